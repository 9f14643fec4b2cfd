// base::openat2: the kernel's resolve flags refuse every escape and report why by errno; a kernel
// without openat2 gets a refusal, never a plain open.
#include "base/openat2.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <seccomp.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>

#include "base/syscall_error.hpp"

namespace airlock::base {
namespace {

// root/
//   inside/file
//   inside-link -> inside/file    (stays beneath root)
//   escape      -> /etc           (absolute: leaves root)
//   up          -> ..             (relative: leaves root)
class Openat2Test : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/airlock-base-openat2-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    root_path_ = pattern;
    std::filesystem::create_directory(root_path_ / "inside");
    std::ofstream(root_path_ / "inside" / "file") << "content";
    std::filesystem::create_symlink("inside/file", root_path_ / "inside-link");
    std::filesystem::create_symlink("/etc", root_path_ / "escape");
    std::filesystem::create_symlink("..", root_path_ / "up");
    root_.reset(::open(root_path_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_path_); }

  std::filesystem::path root_path_;
  UniqueFd root_;
};

TEST_F(Openat2Test, OpensWhatLiesBeneathWithCloseOnExec) {
  const Opened opened = openat2(root_.get(), "inside/file", O_RDONLY, kResolveConfined);
  ASSERT_TRUE(opened) << errno_text(opened.error);
  EXPECT_EQ(opened.error, 0);
  const int flags = ::fcntl(opened.fd.get(), F_GETFD);
  EXPECT_NE(flags & FD_CLOEXEC, 0) << "no descriptor it opens may leak into a child";
}

TEST_F(Openat2Test, ASymlinkOutOfTheRootIsRefusedBeneathWithEXDEV) {
  // RESOLVE_BENEATH alone: links are followed, but never out of the starting directory.
  const Opened absolute = openat2(root_.get(), "escape/hostname", O_RDONLY, RESOLVE_BENEATH);
  EXPECT_FALSE(absolute);
  EXPECT_EQ(absolute.error, EXDEV);
  const Opened relative = openat2(root_.get(), "up/etc/hostname", O_RDONLY, RESOLVE_BENEATH);
  EXPECT_FALSE(relative);
  EXPECT_EQ(relative.error, EXDEV);
  const Opened dotdot = openat2(root_.get(), "inside/../../etc", O_PATH, RESOLVE_BENEATH);
  EXPECT_FALSE(dotdot);
  EXPECT_EQ(dotdot.error, EXDEV);
  // Positive control: the very same flags follow a link that stays beneath.
  EXPECT_TRUE(openat2(root_.get(), "inside-link", O_RDONLY, RESOLVE_BENEATH));
  // And without any resolve flag the escape succeeds: the flags are what refuse it.
  EXPECT_TRUE(openat2(root_.get(), "escape/hostname", O_PATH, 0) ||
              !std::filesystem::exists("/etc/hostname"));
}

TEST_F(Openat2Test, TheConfinedResolutionFollowsNoLinkAtAll) {
  for (const char* path : {"escape/hostname", "up", "inside-link"}) {
    const Opened opened = openat2(root_.get(), path, O_PATH, kResolveConfined);
    EXPECT_FALSE(opened) << path;
    EXPECT_EQ(opened.error, ELOOP) << path << ": " << errno_text(opened.error);
  }
  const Opened magic = openat2(AT_FDCWD, "/proc/self/root/etc", O_PATH, RESOLVE_NO_MAGICLINKS);
  EXPECT_FALSE(magic);
  EXPECT_EQ(magic.error, ELOOP);
}

TEST_F(Openat2Test, AMissingPathReportsENOENTAndHoldsNoDescriptor) {
  const Opened opened = openat2(root_.get(), "inside/absent", O_RDONLY, kResolveConfined);
  EXPECT_FALSE(opened);
  EXPECT_EQ(opened.fd.get(), -1);
  EXPECT_EQ(opened.error, ENOENT);
}

TEST_F(Openat2Test, TheModeReachesTheKernelOnlyWhenAFileIsCreated) {
  const mode_t previous = ::umask(0);
  const Opened created =
      openat2(root_.get(), "inside/new", O_WRONLY | O_CREAT | O_EXCL, kResolveConfined, 0640);
  ::umask(previous);
  ASSERT_TRUE(created) << errno_text(created.error);
  struct stat info {};
  ASSERT_EQ(::fstat(created.fd.get(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0640u);
  // The kernel refuses a mode without O_CREAT/O_TMPFILE (EINVAL); O_DIRECTORY shares a bit with
  // O_TMPFILE and must not be mistaken for it.
  const Opened directory =
      openat2(root_.get(), "inside", O_RDONLY | O_DIRECTORY, kResolveConfined, 0755);
  EXPECT_TRUE(directory) << errno_text(directory.error);
}

// A kernel without openat2, played by a seccomp filter in a child: openat2 answers ENOSYS, and
// plain openat (which would follow the planted link) still works there.
TEST_F(Openat2Test, AKernelWithoutOpenat2IsRefusedNeverFallenBackFrom) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    scmp_filter_ctx filter = ::seccomp_init(SCMP_ACT_ALLOW);
    if (filter == nullptr ||
        ::seccomp_rule_add(filter, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(openat2), 0) != 0 ||
        ::seccomp_load(filter) != 0) {
      ::_exit(10);
    }
    const Opened opened = openat2(root_.get(), "inside-link", O_RDONLY, kResolveConfined);
    if (opened) ::_exit(1);  // something answered in openat2's place
    if (opened.error != ENOSYS) ::_exit(2);
    const std::string said = SyscallError(opened.error, "openat2", "/work/x").what();
    if (said.find("Linux 5.6") == std::string::npos) ::_exit(3);
    // The control: the unsafe call a fallback would make is available, and follows the link.
    const int plain = ::openat(root_.get(), "inside-link", O_RDONLY | O_CLOEXEC);
    ::_exit(plain >= 0 ? 0 : 4);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "1: a descriptor came back; 2: another errno; 3: the message does not name the kernel "
         "requirement; 4: the control failed; 10: the filter could not be installed";
}

}  // namespace
}  // namespace airlock::base
