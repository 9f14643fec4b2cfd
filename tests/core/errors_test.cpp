// How a failed system call reaches a library caller: a BackendError that keeps the errno.
#include "airlock/errors.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <system_error>

#include "base/syscall_error.hpp"

namespace airlock {
namespace {

TEST(BackendErrorFromASyscall, KeepsTheErrnoAsItsCodeAndTheCallsAccountAsItsDetail) {
  const BackendError error("pipe failed", base::SyscallError(EMFILE, "pipe2"));
  EXPECT_EQ(error.code(), std::errc::too_many_files_open);
  EXPECT_EQ(&error.code().category(), &std::generic_category());
  EXPECT_EQ(error.detail(), base::SyscallError(EMFILE, "pipe2").what());
  // What a model may see is the message alone: the call, its path and errno stay in the detail.
  EXPECT_STREQ(error.what(), "pipe failed");
  EXPECT_EQ(error.type(), "BackendError");
}

TEST(BackendErrorFromASyscall, NamesThePathInTheDetailOnly) {
  errno = EADDRINUSE;
  const BackendError error("the control socket could not be made",
                           base::errno_error("bind", "/run/airlock/x/control.sock"));
  EXPECT_EQ(error.code().value(), EADDRINUSE);
  EXPECT_EQ(std::string(error.what()).find("/run/airlock"), std::string::npos);
  EXPECT_NE(error.detail().find("bind /run/airlock/x/control.sock: "), std::string::npos)
      << error.detail();
  EXPECT_NE(error_detail(error).find(error.detail()), std::string::npos)
      << "the logs' account carries the call";
}

TEST(BackendErrorFromASyscall, AProviderFailureThatIsNoSyscallHasNoCode) {
  const BackendError error("the engine failed", "POST /containers 500");
  EXPECT_FALSE(error.code());
  EXPECT_EQ(error.detail(), "POST /containers 500");
}

}  // namespace
}  // namespace airlock
