// Loopback servers and clients for the egress tests: real sockets, real bytes, no network
// beyond 127.0.0.1.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/unique_fd.hpp"

namespace airlock::egress::testing {

using namespace std::chrono_literals;

// A TCP server on 127.0.0.1 by default (ephemeral port) with one thread per connection.
class LoopbackServer {
 public:
  enum class Mode {
    http,             // reads a request head, answers 200 with `kHttpBody`, closes
    echo,             // writes back every byte as it arrives; closes after the client's EOF
    reply_after_eof,  // reads until EOF, then writes back everything it read, then closes
  };
  static constexpr const char* kHttpBody = "hello-from-loopback";

  // Binds `ipv4` (an IPv4 literal: another 127.x address, or 0.0.0.0 for every interface).
  explicit LoopbackServer(Mode mode, const std::string& ipv4 = "127.0.0.1");
  ~LoopbackServer();
  LoopbackServer(const LoopbackServer&) = delete;
  LoopbackServer& operator=(const LoopbackServer&) = delete;

  std::uint16_t port() const noexcept { return port_; }
  std::string port_text() const { return std::to_string(port_); }
  // Connections accepted so far: a refused tunnel must leave this unchanged.
  int accepted() const noexcept { return accepted_.load(); }

 private:
  void accept_loop();
  void serve(int fd);

  Mode mode_;
  base::UniqueFd listener_;
  base::UniqueFd stop_read_;
  base::UniqueFd stop_write_;
  std::uint16_t port_ = 0;
  std::atomic<int> accepted_{0};
  std::mutex mutex_;
  std::vector<int> open_fds_;
  std::vector<std::thread> workers_;
  std::thread acceptor_;
};

base::UniqueFd connect_tcp(std::uint16_t port);
base::UniqueFd connect_unix(const std::string& path);

void send_all(int fd, std::string_view bytes);
// Reads until "\r\n\r\n"; returns the head (and leaves later bytes in `rest`). Empty on EOF or
// timeout before a full head.
std::string read_head(int fd, std::string& rest, std::chrono::milliseconds timeout = 10s);
// Reads until EOF (or timeout); `eof` tells which ended it.
std::string read_to_eof(int fd, std::chrono::milliseconds timeout = 10s, bool* eof = nullptr);
// Reads exactly `size` bytes (or fewer on EOF / timeout).
std::string read_exactly(int fd, std::size_t size, std::chrono::milliseconds timeout = 10s);
// The status code of an HTTP response head, 0 when there is none.
int status_of(const std::string& head);

// Descriptors and threads this process holds right now (from /proc/self).
std::size_t open_descriptor_count();
std::size_t thread_count();

}  // namespace airlock::egress::testing
