// What the jail refuses: root as the program's uid or gid, a device not on its list, paths it
// cannot recreate, a program it cannot run — each with a clear message or an "error" status
// line, never a hang.
#include <errno.h>

#include "fixture.hpp"

namespace airlock::microvm_jail_test {
namespace {

// Replaces the value after `flag` in the fixture's arguments.
std::vector<std::string> with(std::vector<std::string> arguments, const std::string& flag,
                              const std::string& value) {
  for (std::size_t index = 0; index + 1 < arguments.size(); ++index) {
    if (arguments[index] == flag) {
      arguments[index + 1] = value;
      return arguments;
    }
  }
  ADD_FAILURE() << flag << " is not among the arguments";
  return arguments;
}

TEST_F(JailTest, RootUidIsRefused) {
  const Outcome outcome = start_jail(with(arguments({}, {"status"}), "--uid", "0")).finish();
  EXPECT_EQ(outcome.exit_code, 2);
  EXPECT_NE(outcome.err.find("--uid 0"), std::string::npos) << outcome.err;
  EXPECT_EQ(outcome.out, "");
  EXPECT_TRUE(cgroup_pids(cgroup_->path()).empty());
}

TEST_F(JailTest, RootGidIsRefused) {
  const Outcome outcome = start_jail(with(arguments({}, {"status"}), "--gid", "0")).finish();
  EXPECT_EQ(outcome.exit_code, 2);
  EXPECT_NE(outcome.err.find("--gid 0"), std::string::npos) << outcome.err;
  EXPECT_EQ(outcome.out, "");
}

TEST_F(JailTest, UnknownDeviceIsRefused) {
  for (const char* device : {"vda", "mem", "../vda", "tty", "kvm/x"}) {
    const Outcome outcome = run({"--dev", device}, {"status"});
    EXPECT_EQ(outcome.exit_code, 2) << device;
    EXPECT_NE(outcome.err.find(std::string("--dev ") + device), std::string::npos) << outcome.err;
    EXPECT_EQ(outcome.out, "");
  }
}

TEST_F(JailTest, UnusablePathsAreRefused) {
  for (const char* path : {"relative", "/usr/../etc", "/proc", "/dev/x", "/tmp", "/a//b", "/a/"}) {
    const Outcome outcome = run({"--ro", path}, {"status"});
    EXPECT_EQ(outcome.exit_code, 2) << path;
    EXPECT_NE(outcome.err.find(std::string("--ro ") + path), std::string::npos) << outcome.err;
  }
}

TEST_F(JailTest, MissingProgramIsAnErrorLine) {
  auto all = arguments({}, {});
  all.back() = "/nonexistent/program";
  const Outcome outcome = start_jail(all).finish();
  EXPECT_EQ(outcome.exit_code, 127);
  EXPECT_EQ(outcome.status, "error " + std::to_string(ENOENT) + " execv\n");
  EXPECT_NE(outcome.err.find("execv"), std::string::npos) << outcome.err;
}

TEST_F(JailTest, MissingBoundPathIsAnErrorLine) {
  const Outcome outcome = run({"--ro", "/nonexistent/path"}, {"status"});
  EXPECT_EQ(outcome.exit_code, 127);
  EXPECT_EQ(outcome.status, "error " + std::to_string(ENOENT) + " open_tree /nonexistent/path\n");
  EXPECT_EQ(outcome.out, "");
}

TEST_F(JailTest, MissingCgroupIsAnErrorLine) {
  const Outcome outcome =
      start_jail(with(arguments({}, {"status"}), "--cgroup", cgroup_->path() + "/missing"))
          .finish();
  EXPECT_EQ(outcome.exit_code, 127);
  EXPECT_EQ(line_starting(outcome.status, "error ").substr(0, 8),
            "error " + std::to_string(ENOENT) + " ");
  EXPECT_EQ(outcome.out, "");
}

TEST_F(JailTest, ACgroupGivenTwiceOrNotPlainIsRefused) {
  const Outcome twice = start_jail(arguments({"--cgroup", cgroup_->path()}, {"status"})).finish();
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_NE(twice.err.find("given twice"), std::string::npos) << twice.err;
  const Outcome relative =
      start_jail(arguments({"--cgroup", cgroup_->path() + "/../x"}, {"status"})).finish();
  EXPECT_EQ(relative.exit_code, 2);
  EXPECT_NE(relative.err.find("must be absolute"), std::string::npos) << relative.err;
  EXPECT_TRUE(cgroup_pids(cgroup_->path()).empty());
}

TEST_F(JailTest, MissingArgumentsAreNamed) {
  const Outcome no_program = start_jail({"--leash", "3", "--status-fd", "4", "--cgroup",
                                         cgroup_->path(), "--uid", "1", "--gid", "1", "--"})
                                 .finish();
  EXPECT_EQ(no_program.exit_code, 2);
  EXPECT_NE(no_program.err.find("PROGRAM"), std::string::npos) << no_program.err;
  const Outcome no_leash = start_jail({"--status-fd", "4", "--cgroup", cgroup_->path(), "--uid",
                                       "1", "--gid", "1", "--", "/bin/true"})
                               .finish();
  EXPECT_EQ(no_leash.exit_code, 2);
  EXPECT_NE(no_leash.err.find("--leash"), std::string::npos) << no_leash.err;
  const Outcome closed_fd =
      start_jail({"--leash", "3", "--status-fd", "9", "--cgroup", cgroup_->path(), "--uid", "1",
                  "--gid", "1", "--", "/bin/true"})
          .finish();
  EXPECT_EQ(closed_fd.exit_code, 2);
  EXPECT_NE(closed_fd.err.find("--status-fd 9"), std::string::npos) << closed_fd.err;
  const Outcome unknown = start_jail({"--leash", "3", "--sys", "/sys"}).finish();
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("--sys"), std::string::npos) << unknown.err;
}

}  // namespace
}  // namespace airlock::microvm_jail_test
