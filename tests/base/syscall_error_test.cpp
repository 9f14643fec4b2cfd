// A failed system call keeps its errno, its name and its path, whichever way it is raised.
#include "base/syscall_error.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>
#include <type_traits>

namespace airlock::base {
namespace {

static_assert(std::is_base_of_v<std::system_error, SyscallError>,
              "whoever catches std::system_error catches it, with its code intact");

TEST(SyscallError, ThrowErrnoKeepsTheErrnoTheCallAndThePath) {
  errno = ENOENT;
  try {
    throw_errno("openat2", "/maf-sandbox/work/x");
    FAIL() << "throw_errno returned";
  } catch (const SyscallError& error) {
    EXPECT_EQ(error.code(), std::errc::no_such_file_or_directory);
    EXPECT_EQ(error.code().value(), ENOENT);
    EXPECT_EQ(&error.code().category(), &std::generic_category());
    EXPECT_EQ(error.syscall(), "openat2");
    EXPECT_EQ(error.path(), "/maf-sandbox/work/x");
    EXPECT_STREQ(error.what(), "openat2 /maf-sandbox/work/x: No such file or directory");
  }
}

TEST(SyscallError, WithoutAPathTheMessageNamesTheCallAlone) {
  try {
    throw_errno(EMFILE, "pipe2");
    FAIL() << "throw_errno returned";
  } catch (const std::system_error& error) {
    EXPECT_EQ(error.code().value(), EMFILE);
    EXPECT_EQ(std::string(error.what()), std::string("pipe2: ") + std::strerror(EMFILE));
  }
}

TEST(SyscallError, ErrnoErrorReadsErrnoWhenItIsCalled) {
  errno = EACCES;
  const SyscallError error = errno_error("bind", "/run/x.sock");
  errno = 0;
  EXPECT_EQ(error.code().value(), EACCES);
  EXPECT_EQ(error.path(), "/run/x.sock");
  EXPECT_EQ(std::string(error.what()), std::string("bind /run/x.sock: ") + std::strerror(EACCES));
}

TEST(SyscallError, AKernelWithoutOpenat2IsNamedAsTheRequirementItMisses) {
  const std::string text = errno_text(ENOSYS, "openat2");
  EXPECT_NE(text.find("openat2"), std::string::npos) << text;
  EXPECT_NE(text.find("Linux 5.6"), std::string::npos) << text;
  const SyscallError error(ENOSYS, "openat2", "/work/x");
  EXPECT_EQ(error.code().value(), ENOSYS);
  EXPECT_EQ(std::string(error.what()), "openat2 /work/x: " + text);
  // Any other call's ENOSYS is the plain text: the requirement is openat2's alone.
  EXPECT_EQ(errno_text(ENOSYS, "clone3"), std::strerror(ENOSYS));
  EXPECT_EQ(errno_text(ENOENT, "openat2"), std::strerror(ENOENT));
}

TEST(SyscallError, ErrnoCodeIsOfTheGenericCategory) {
  EXPECT_EQ(errno_code(EPIPE), std::errc::broken_pipe);
  EXPECT_FALSE(errno_code(0));
}

}  // namespace
}  // namespace airlock::base
