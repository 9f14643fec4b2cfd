// Thin wrappers for the system calls glibc 2.36 does not wrap (or wraps without the flags we
// need). Shared by the library and airlock-init. openat2 is base's (base/openat2.hpp).
#pragma once

#include <fcntl.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#ifndef MOUNT_ATTR_RDONLY
#include <linux/mount.h>
#endif

namespace airlock::linux_backend::sys {

inline int pidfd_open(pid_t pid, unsigned int flags = 0) noexcept {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, flags));
}

inline int pidfd_send_signal(int pidfd, int signal) noexcept {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, signal, nullptr, 0));
}

// clone3 without a new stack: the child returns 0 on a copy of the caller's stack, like fork.
// Only for single-threaded callers (airlock-init), because no atfork handlers run.
inline long clone3_fork(struct clone_args* arguments) noexcept {
  return ::syscall(SYS_clone3, arguments, sizeof *arguments);
}

inline int mount_setattr(int dirfd, const char* path, unsigned int flags,
                         struct mount_attr* attributes) noexcept {
  return static_cast<int>(
      ::syscall(SYS_mount_setattr, dirfd, path, flags, attributes, sizeof *attributes));
}

inline int pivot_root(const char* new_root, const char* put_old) noexcept {
  return static_cast<int>(::syscall(SYS_pivot_root, new_root, put_old));
}

inline int close_range(unsigned int first, unsigned int last, unsigned int flags = 0) noexcept {
  return static_cast<int>(::syscall(SYS_close_range, first, last, flags));
}

}  // namespace airlock::linux_backend::sys
