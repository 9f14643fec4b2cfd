// The one openat2 wrapper. Every file plane (the image store, the linux and docker host planes,
// the file-system sink, airlock-init's root builder) resolves guest-controlled paths through
// it, and their safety is in the resolve flags: the kernel walks the whole path in one call and
// refuses a link or an escape atomically, so no check-then-use gap exists.
//
// There is deliberately no fallback. A kernel without openat2 (before Linux 5.6) gets ENOSYS
// back, which errno_text() and SyscallError spell as that requirement; a plain openat would
// follow links a guest can plant and is never substituted.
#pragma once

#include <linux/openat2.h>  // RESOLVE_*

#include <cstdint>

#include "base/unique_fd.hpp"

namespace airlock::base {

// Never leave the starting directory; never follow a symbolic or magic link anywhere in the path.
inline constexpr std::uint64_t kResolveConfined =
    RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;

// The descriptor openat2 opened, or the errno that refused it (exactly one of the two).
struct Opened {
  UniqueFd fd;
  int error = 0;
  explicit operator bool() const noexcept { return static_cast<bool>(fd); }
};

// openat2(dirfd, path, {flags | O_CLOEXEC, mode, resolve}). `mode` is passed only with O_CREAT
// or O_TMPFILE (the kernel refuses it otherwise). EINTR is retried, and so, a bounded number of
// times, is EAGAIN — the kernel's answer when a concurrent rename made a walk through ".."
// unverifiable; every retry is the same fully checked lookup.
[[nodiscard]] Opened openat2(int dirfd, const char* path, std::uint64_t flags,
                             std::uint64_t resolve, std::uint64_t mode = 0) noexcept;

}  // namespace airlock::base
