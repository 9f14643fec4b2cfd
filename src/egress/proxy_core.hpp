// The proxy's event loop: one epoll thread owning every listener and connection of one
// EgressProxy, timers on a heap, and a queue for work handed in from other threads (listener
// changes, finished name lookups).
//
// Everything below "loop thread only" may be called only from the loop thread; the rest is
// thread-safe.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "airlock/egress.hpp"
#include "base/unique_fd.hpp"
#include "egress/policy.hpp"
#include "egress/resolver.hpp"

namespace airlock::egress {

class Connection;

using Clock = std::chrono::steady_clock;

// What an epoll event or a timer refers to: an object id and which of its fds.
enum class Role : std::uint8_t { wakeup = 0, listener = 1, client = 2, upstream = 3 };
inline std::uint64_t make_token(std::uint64_t id, Role role) {
  return (id << 2) | static_cast<std::uint64_t>(role);
}

struct Listener {
  Listener() = default;
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  // Closes the socket and removes the socket file if it is still the one bound here.
  ~Listener();

  std::uint64_t id = 0;
  base::UniqueFd fd;
  CompiledPolicy policy;
  std::string sandbox_id;
  std::string endpoint;
  bool tcp = false;
  // The socket file this listener made — its directory (held, so that a path of any length
  // works and the file is removed where it was made), its name, and its identity, so that
  // closing removes only it.
  base::UniqueFd unix_directory;
  std::string unix_name;
  dev_t unix_device = 0;
  ino_t unix_inode = 0;
  bool paused = false;  // accept() hit a descriptor limit; retried after a pause
  std::unordered_set<std::uint64_t> connections;
};

class ProxyCore {
 public:
  explicit ProxyCore(EgressProxy::Options options);
  ~ProxyCore();
  ProxyCore(const ProxyCore&) = delete;
  ProxyCore& operator=(const ProxyCore&) = delete;

  // Closes every listener and connection and joins the loop and resolver threads. Idempotent.
  // Must not be called from the loop thread.
  void stop();

  // Takes ownership of a listening socket; throws when the proxy has stopped.
  std::uint64_t add_listener(std::unique_ptr<Listener> listener);
  // Closes a listener and everything it accepted; nothing when it is already gone. From the loop
  // thread (a decision callback) the close is queued and happens once the callback returns,
  // because the connection that called back may be one of those being closed.
  void remove_listener(std::uint64_t id) noexcept;
  std::size_t open_connections() const;
  std::size_t open_connections(std::uint64_t listener_id) const;

  // ---- loop thread only ----------------------------------------------------------------------
  Clock::time_point now() const noexcept { return now_; }
  // Registers, changes or (events == 0) removes interest in `fd`; `current` is updated.
  void watch(int fd, std::uint64_t token, std::uint32_t events, std::uint32_t& current);
  void schedule(std::uint64_t token, Clock::time_point when);
  // Resolves `host` off the loop; the connection's on_resolved runs later on the loop.
  void resolve(std::uint64_t connection_id, const std::string& host);
  // Logs a decision and hands it to the callback.
  void emit(const EgressDecision& decision);

 private:
  struct Timer {
    Clock::time_point when;
    std::uint64_t token;
    bool operator>(const Timer& other) const { return when > other.when; }
  };

  void run();
  // Queues `task` for the loop; false when the loop has closed its queue.
  bool post(std::function<void()> task);
  // Runs `task` on the loop and waits for it (inline when already on the loop thread).
  void call(const std::function<void()>& task);
  void drain_posted();
  void fire_timers();
  void on_listener_ready(Listener& listener);
  void refuse_over_capacity(Listener& listener, base::UniqueFd client);
  void dispatch_connection(std::uint64_t id, Role role, std::uint32_t events);
  void destroy_connection(std::uint64_t id);
  void close_listener(std::uint64_t id);
  void close_everything();

  EgressProxy::Options options_;
  base::UniqueFd epoll_;
  base::UniqueFd wakeup_;
  Clock::time_point now_ = Clock::now();

  mutable std::mutex mutex_;  // guards posted_, queue_closed_
  std::vector<std::function<void()>> posted_;
  bool queue_closed_ = false;

  std::atomic<bool> stop_requested_{false};
  std::atomic<std::size_t> connection_count_{0};
  std::uint64_t next_id_ = 1;
  std::unordered_map<std::uint64_t, std::unique_ptr<Listener>> listeners_;
  std::unordered_map<std::uint64_t, std::unique_ptr<Connection>> connections_;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers_;

  std::unique_ptr<ResolverPool> resolver_;
  std::thread thread_;
  std::thread::id loop_thread_id_;
  std::once_flag stopped_;
};

}  // namespace airlock::egress
