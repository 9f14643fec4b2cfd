#include "base/openat2.hpp"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace airlock::base {

Opened openat2(int dirfd, const char* path, std::uint64_t flags, std::uint64_t resolve,
               std::uint64_t mode) noexcept {
  open_how how{};
  how.flags = flags | O_CLOEXEC;
  // O_TMPFILE carries O_DIRECTORY's bit, so it is tested whole.
  const bool creates = (flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE;
  how.mode = creates ? mode : 0;
  how.resolve = resolve;
  constexpr int kRenameRetries = 8;
  for (int renamed = 0;;) {
    const long fd = ::syscall(SYS_openat2, dirfd, path, &how, sizeof how);
    if (fd >= 0) return {UniqueFd(static_cast<int>(fd)), 0};
    const int error = errno;
    if (error == EINTR) continue;
    if (error == EAGAIN && ++renamed < kRenameRetries) continue;
    return {UniqueFd(), error};
  }
}

}  // namespace airlock::base
