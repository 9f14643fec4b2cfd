#include "egress/loopback.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace airlock::egress::testing {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error(what + ": " + std::strerror(errno));
}

int remaining_ms(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

// Waits for `fd` to be readable; false on timeout.
bool wait_readable(int fd, std::chrono::steady_clock::time_point deadline) {
  pollfd entry{fd, POLLIN, 0};
  for (;;) {
    const int ready = ::poll(&entry, 1, remaining_ms(deadline));
    if (ready > 0) return true;
    if (ready == 0) return false;
    if (errno != EINTR) return false;
  }
}

std::size_t count_entries(const char* directory) {
  std::size_t count = 0;
  DIR* dir = ::opendir(directory);
  if (dir == nullptr) return 0;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  ::closedir(dir);
  return count;
}

}  // namespace

LoopbackServer::LoopbackServer(Mode mode, const std::string& ipv4) : mode_(mode) {
  listener_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listener_) fail("socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  if (::inet_pton(AF_INET, ipv4.c_str(), &address.sin_addr) != 1) fail("inet_pton " + ipv4);
  if (::bind(listener_.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    fail("bind");
  }
  if (::listen(listener_.get(), 256) != 0) fail("listen");
  socklen_t length = sizeof address;
  ::getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&address), &length);
  port_ = ntohs(address.sin_port);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) fail("pipe2");
  stop_read_.reset(pipe_fds[0]);
  stop_write_.reset(pipe_fds[1]);
  acceptor_ = std::thread([this] { accept_loop(); });
}

LoopbackServer::~LoopbackServer() {
  [[maybe_unused]] const auto n = ::write(stop_write_.get(), "x", 1);
  acceptor_.join();
  {
    std::lock_guard lock(mutex_);
    for (const int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
  }
  for (auto& worker : workers_) worker.join();
}

void LoopbackServer::accept_loop() {
  for (;;) {
    pollfd entries[2] = {{listener_.get(), POLLIN, 0}, {stop_read_.get(), POLLIN, 0}};
    if (::poll(entries, 2, -1) < 0 && errno != EINTR) return;
    if (entries[1].revents != 0) return;
    if ((entries[0].revents & POLLIN) == 0) continue;
    const int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    ++accepted_;
    std::lock_guard lock(mutex_);
    open_fds_.push_back(fd);
    workers_.emplace_back([this, fd] { serve(fd); });
  }
}

void LoopbackServer::serve(int fd) {
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  if (mode_ == Mode::http) {
    std::string rest;
    if (!read_head(fd, rest).empty()) {
      const std::string body = kHttpBody;
      send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
                       "\r\nConnection: close\r\n\r\n" + body);
    }
  } else {
    std::string collected;
    char buffer[64 * 1024];
    while (wait_readable(fd, deadline)) {
      const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
      if (n <= 0) break;
      if (mode_ == Mode::echo) {
        send_all(fd, std::string_view(buffer, static_cast<std::size_t>(n)));
      } else {
        collected.append(buffer, static_cast<std::size_t>(n));
      }
    }
    if (mode_ == Mode::reply_after_eof) send_all(fd, collected);
  }
  ::shutdown(fd, SHUT_WR);
  // Hold the descriptor until the client is done, so the close carries no reset.
  char drain[4096];
  while (wait_readable(fd, deadline) && ::recv(fd, drain, sizeof drain, 0) > 0) {
  }
  std::lock_guard lock(mutex_);
  open_fds_.erase(std::find(open_fds_.begin(), open_fds_.end(), fd));
  ::close(fd);
}

base::UniqueFd connect_tcp(std::uint16_t port) {
  base::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) fail("socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    fail("connect 127.0.0.1:" + std::to_string(port));
  }
  return fd;
}

base::UniqueFd connect_unix(const std::string& path) {
  base::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) fail("socket");
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    fail("connect " + path);
  }
  return fd;
}

void send_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // the peer went away; callers assert on what they read back
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
}

std::string read_head(int fd, std::string& rest, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string buffer = std::move(rest);
  rest.clear();
  for (;;) {
    const auto end = buffer.find("\r\n\r\n");
    if (end != std::string::npos) {
      rest = buffer.substr(end + 4);
      return buffer.substr(0, end + 4);
    }
    if (!wait_readable(fd, deadline)) return {};
    char chunk[4096];
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n <= 0) return {};
    buffer.append(chunk, static_cast<std::size_t>(n));
  }
}

std::string read_to_eof(int fd, std::chrono::milliseconds timeout, bool* eof) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string data;
  if (eof != nullptr) *eof = false;
  char chunk[64 * 1024];
  while (wait_readable(fd, deadline)) {
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n <= 0) {
      if (eof != nullptr) *eof = true;
      break;
    }
    data.append(chunk, static_cast<std::size_t>(n));
  }
  return data;
}

std::string read_exactly(int fd, std::size_t size, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string data;
  data.reserve(size);
  char chunk[64 * 1024];
  while (data.size() < size && wait_readable(fd, deadline)) {
    const ssize_t n = ::recv(fd, chunk, std::min(sizeof chunk, size - data.size()), 0);
    if (n <= 0) break;
    data.append(chunk, static_cast<std::size_t>(n));
  }
  return data;
}

int status_of(const std::string& head) {
  if (head.rfind("HTTP/1.1 ", 0) != 0 || head.size() < 12) return 0;
  return std::atoi(head.substr(9, 3).c_str());
}

std::size_t open_descriptor_count() {
  return count_entries("/proc/self/fd");
}
std::size_t thread_count() {
  return count_entries("/proc/self/task");
}

}  // namespace airlock::egress::testing
