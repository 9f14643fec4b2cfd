// Notices a client that hangs up while its request is being handled.
//
// libmicrohttpd watches a connection's socket only between calls into the application: while a
// handler runs (an exec of a minute, say), nothing reads the socket, so nothing notices that
// the client went away, and its connection-closed notification arrives only after the handler
// has returned. A client that vanishes mid-exec must stop that exec (and condemn the instance),
// so the daemon watches the sockets of handlers in flight itself, with one epoll thread.
//
// What counts as gone: the peer closed or shut down its sending side (EPOLLRDHUP), or the socket
// reports a hang-up or an error. An HTTP client that half-closes after sending its request is
// therefore treated as gone — no client of this API does that.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stop_token>
#include <thread>

#include "base/unique_fd.hpp"

namespace airlock::daemon {

class DisconnectWatch {
 public:
  DisconnectWatch();
  ~DisconnectWatch();
  DisconnectWatch(const DisconnectWatch&) = delete;
  DisconnectWatch& operator=(const DisconnectWatch&) = delete;

  // Watches one socket for as long as it lives (RAII). `gone()` is requested once the peer hangs
  // up. The socket must stay open for the guard's lifetime (the caller's connection owns it).
  class Guard {
   public:
    Guard() = default;
    Guard(Guard&& other) noexcept;
    Guard& operator=(Guard&& other) noexcept;
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;
    ~Guard();

    // Never requested when the socket could not be watched.
    std::stop_token gone() const noexcept { return source_.get_token(); }
    // Whether the socket is actually watched (a registration can fail, e.g. ENOMEM).
    bool watching() const noexcept { return watch_ != nullptr; }

   private:
    friend class DisconnectWatch;
    Guard(DisconnectWatch* watch, std::uint64_t id, int fd, std::stop_source source)
        : watch_(watch), id_(id), fd_(fd), source_(std::move(source)) {}
    void reset() noexcept;

    DisconnectWatch* watch_ = nullptr;
    std::uint64_t id_ = 0;
    int fd_ = -1;
    std::stop_source source_{std::nostopstate};
  };

  // Start watching `fd`. Never throws; on failure the guard's token is simply never requested.
  Guard watch(int fd) noexcept;

  // How many sockets are watched right now (tests, metrics).
  std::size_t watched() const;

 private:
  void run(std::stop_token stop);
  void forget(std::uint64_t id, int fd) noexcept;

  base::UniqueFd epoll_fd_;
  base::UniqueFd wake_fd_;  // eventfd: wakes the thread to exit
  mutable std::mutex mutex_;
  std::uint64_t next_id_ = 1;
  std::map<std::uint64_t, std::stop_source> watched_;
  std::jthread thread_;  // last: it uses everything above
};

}  // namespace airlock::daemon
