// A failed system call, kept whole: its errno, the call's name and the path it was given —
// never flattened into a sentence that has lost the errno. Only the standard library, so the
// static helpers can raise it too; the library converts it to the public airlock errors where
// a backend or store hands a failure to its caller (see BackendError in airlock/errors.hpp).
#pragma once

#include <cerrno>
#include <string>
#include <string_view>
#include <system_error>

namespace airlock::base {

// strerror(error), except where a supported kernel's requirement explains the failure better:
// ENOSYS from openat2 says that Linux 5.6 or later is required.
std::string errno_text(int error, std::string_view syscall = {});

// what(): "<syscall> <path>: <errno_text>", e.g.
// "openat2 /maf-sandbox/work/x: No such file or directory"; without a path, "<syscall>: …".
// code() is the errno in std::generic_category().
class SyscallError : public std::system_error {
 public:
  SyscallError(int error, std::string_view syscall, std::string_view path = {});

  const char* what() const noexcept override { return message_.c_str(); }
  const std::string& syscall() const noexcept { return syscall_; }
  const std::string& path() const noexcept { return path_; }

 private:
  std::string syscall_;
  std::string path_;
  std::string message_;
};

// `error` as an error code of the generic (errno) category.
inline std::error_code errno_code(int error) noexcept {
  return std::error_code(error, std::generic_category());
}

// The SyscallError for errno as it is now (read before anything else can change it).
[[nodiscard]] SyscallError errno_error(std::string_view syscall, std::string_view path = {});

[[noreturn]] void throw_errno(std::string_view syscall, std::string_view path = {});
[[noreturn]] void throw_errno(int error, std::string_view syscall, std::string_view path = {});

}  // namespace airlock::base
