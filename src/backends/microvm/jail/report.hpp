// The jail's status channel (--status-fd) to the library, one line each:
//   ready               the program's execv succeeded
//   exit N | signal N   how the program ended (the jail ends with it)
//   error ERRNO STEP    a step before the program ran failed; the jail exits 127
// Failures go to stderr too. Writes never raise SIGPIPE (the jail ignores it): an owner that
// is gone is noticed through the leash, not by dying on a write.
#pragma once

#include <string>

namespace airlock::microvm_jail {

inline constexpr int kSetupFailed = 127;

void set_status_fd(int fd) noexcept;
int status_fd() noexcept;

// Writes `line` and a newline to the status channel.
void report(const std::string& line) noexcept;
// "error ERRNO STEP" on the status channel and on stderr, then _exit(127).
[[noreturn]] void fail(const std::string& step, int error_number) noexcept;

// Writes all of `bytes` to `fd` (retrying EINTR); false when it could not.
bool write_all(int fd, const std::string& bytes) noexcept;

}  // namespace airlock::microvm_jail
