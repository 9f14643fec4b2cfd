// The one owning file-descriptor type. Only libc and the standard library, so that the static
// helpers (airlock-init, airlock-gvisor-guest) hold descriptors the same way the library does.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <utility>

namespace airlock::base {

// Owns one descriptor (or none: -1) and closes it exactly once. Move-only.
class UniqueFd {
 public:
  UniqueFd() noexcept = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  // Gives the descriptor up without closing it.
  int release() noexcept { return std::exchange(fd_, -1); }
  // Closes the held descriptor (if any) and holds `fd` instead. errno is left as it was: an
  // error path that closes a descriptor still reports the errno of the call that failed.
  void reset(int fd = -1) noexcept {
    const int old = std::exchange(fd_, fd);
    if (old >= 0) {
      const int saved = errno;
      ::close(old);
      errno = saved;
    }
  }

 private:
  int fd_ = -1;
};

}  // namespace airlock::base
