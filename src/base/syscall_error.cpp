#include "base/syscall_error.hpp"

namespace airlock::base {

std::string errno_text(int error, std::string_view syscall) {
  if (error == ENOSYS && syscall == "openat2") {
    return "the kernel has no openat2, which airlock's confined path resolution requires "
           "(Linux 5.6 or later)";
  }
  return std::generic_category().message(error);
}

namespace {
std::string describe(int error, std::string_view syscall, std::string_view path) {
  std::string message(syscall);
  if (!path.empty()) {
    if (!message.empty()) message += ' ';
    message += path;
  }
  message += ": ";
  message += errno_text(error, syscall);
  return message;
}
}  // namespace

SyscallError::SyscallError(int error, std::string_view syscall, std::string_view path)
    : std::system_error(error, std::generic_category()),
      syscall_(syscall),
      path_(path),
      message_(describe(error, syscall, path)) {}

SyscallError errno_error(std::string_view syscall, std::string_view path) {
  const int error = errno;
  return SyscallError(error, syscall, path);
}

void throw_errno(std::string_view syscall, std::string_view path) {
  const int error = errno;
  throw SyscallError(error, syscall, path);
}

void throw_errno(int error, std::string_view syscall, std::string_view path) {
  throw SyscallError(error, syscall, path);
}

}  // namespace airlock::base
