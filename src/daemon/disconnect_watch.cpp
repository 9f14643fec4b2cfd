#include "daemon/disconnect_watch.hpp"

#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

#include "base/syscall_error.hpp"

namespace airlock::daemon {

DisconnectWatch::DisconnectWatch() {
  epoll_fd_.reset(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_fd_) base::throw_errno("epoll_create1");
  wake_fd_.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_fd_) base::throw_errno("eventfd");
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = 0;  // id 0 is the wake-up
  if (epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, wake_fd_.get(), &event) != 0) {
    base::throw_errno("epoll_ctl(eventfd)");
  }
  thread_ = std::jthread([this](std::stop_token stop) { run(stop); });
}

DisconnectWatch::~DisconnectWatch() {
  thread_.request_stop();
  const std::uint64_t one = 1;
  if (write(wake_fd_.get(), &one, sizeof one) < 0) {
    spdlog::warn("disconnect watch: could not wake its thread: {}", base::errno_text(errno));
  }
  // Joined before the descriptors it polls are closed (the members go after this body).
  if (thread_.joinable()) thread_.join();
}

DisconnectWatch::Guard DisconnectWatch::watch(int fd) noexcept {
  if (fd < 0) return Guard();
  try {
    std::lock_guard lock(mutex_);
    const std::uint64_t id = next_id_++;
    std::stop_source source;
    epoll_event event{};
    // One-shot: a hung-up socket stays readable, and one notice is all that is wanted.
    event.events = EPOLLRDHUP | EPOLLHUP | EPOLLERR | EPOLLONESHOT;
    event.data.u64 = id;
    if (epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &event) != 0) {
      spdlog::warn("disconnect watch: cannot watch socket {}: {}", fd, base::errno_text(errno));
      return Guard();
    }
    watched_.emplace(id, source);
    return Guard(this, id, fd, source);
  } catch (const std::exception& error) {
    spdlog::warn("disconnect watch: cannot watch socket {}: {}", fd, error.what());
    return Guard();
  }
}

std::size_t DisconnectWatch::watched() const {
  std::lock_guard lock(mutex_);
  return watched_.size();
}

void DisconnectWatch::forget(std::uint64_t id, int fd) noexcept {
  std::lock_guard lock(mutex_);
  // Removed under the lock, before the caller's connection can close the socket: a later socket
  // that reuses the number is never confused with this one.
  epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, fd, nullptr);
  watched_.erase(id);
}

void DisconnectWatch::run(std::stop_token stop) {
  epoll_event events[32];
  while (!stop.stop_requested()) {
    const int ready = epoll_wait(epoll_fd_.get(), events, 32, -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      spdlog::error("disconnect watch: epoll_wait failed: {}", base::errno_text(errno));
      return;
    }
    std::lock_guard lock(mutex_);
    for (int i = 0; i < ready; ++i) {
      const std::uint64_t id = events[i].data.u64;
      if (id == 0) continue;  // the wake-up; the loop condition decides
      auto found = watched_.find(id);
      if (found != watched_.end()) found->second.request_stop();
    }
  }
}

DisconnectWatch::Guard::Guard(Guard&& other) noexcept
    : watch_(std::exchange(other.watch_, nullptr)),
      id_(other.id_),
      fd_(other.fd_),
      source_(std::move(other.source_)) {}

DisconnectWatch::Guard& DisconnectWatch::Guard::operator=(Guard&& other) noexcept {
  if (this != &other) {
    reset();
    watch_ = std::exchange(other.watch_, nullptr);
    id_ = other.id_;
    fd_ = other.fd_;
    source_ = std::move(other.source_);
  }
  return *this;
}

DisconnectWatch::Guard::~Guard() {
  reset();
}

void DisconnectWatch::Guard::reset() noexcept {
  if (watch_) watch_->forget(id_, fd_);
  watch_ = nullptr;
}

}  // namespace airlock::daemon
