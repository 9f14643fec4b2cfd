// Who the jailed program is: the given uid and gid, no group, no capability anywhere, and no
// way to gain one (no_new_privs; a setuid-root binary on a bound path grants nothing).
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "fixture.hpp"

namespace airlock::microvm_jail_test {
namespace {

using ::testing::Test;

constexpr const char* kNoCapability = "0000000000000000";

void expect_unprivileged(const std::string& out) {
  for (const char* set : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}) {
    const std::string line = line_starting(out, std::string("status ") + set + ":");
    ASSERT_FALSE(line.empty()) << set << " missing from:\n" << out;
    EXPECT_NE(line.find(kNoCapability), std::string::npos) << line;
  }
  EXPECT_EQ(line_starting(out, "status NoNewPrivs:"), "status NoNewPrivs:\t1");
  const std::string uid = std::to_string(kProgramUid), gid = std::to_string(kProgramGid);
  EXPECT_EQ(line_starting(out, "status Uid:"),
            "status Uid:\t" + uid + "\t" + uid + "\t" + uid + "\t" + uid);
  EXPECT_EQ(line_starting(out, "status Gid:"),
            "status Gid:\t" + gid + "\t" + gid + "\t" + gid + "\t" + gid);
  const std::string groups = line_starting(out, "status Groups:");
  EXPECT_EQ(groups.find_first_not_of(" \t", sizeof "status Groups:" - 1), std::string::npos)
      << groups;
}

TEST_F(JailTest, ProgramHoldsNoCapabilityAndOnlyItsIds) {
  const Outcome outcome = run({}, {"status"});
  EXPECT_EQ(outcome.exit_code, 0) << outcome.err;
  EXPECT_EQ(outcome.status, "ready\nexit 0\n");
  expect_unprivileged(outcome.out);
}

// A setuid-root copy of the probe on an --ro path (nosuid) and no_new_privs: exec'ing it still
// runs as the program's uid, with nothing.
TEST_F(JailTest, SetuidRootBinaryOnABoundPathGrantsNothing) {
  const std::string setuid = workspace_->read_only() + "/setuid-probe";
  std::filesystem::copy_file(workspace_->probe(), setuid);
  ASSERT_EQ(::chown(setuid.c_str(), 0, 0), 0);
  ASSERT_EQ(::chmod(setuid.c_str(), 04755), 0);
  const Outcome outcome = run({"--ro", workspace_->read_only()}, {"exec", setuid});
  EXPECT_EQ(outcome.exit_code, 0) << outcome.out << outcome.err;
  EXPECT_TRUE(line_starting(outcome.out, "exec ").empty()) << outcome.out;
  expect_unprivileged(outcome.out);
}

}  // namespace
}  // namespace airlock::microvm_jail_test
