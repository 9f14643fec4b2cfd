// How a jail ends: with its program (reported on the status channel), or with its owner (the
// leash closes, the jail's process is killed, the warden is told to stop) — and then wholly,
// with nothing of it left running or unreaped.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>

#include "fixture.hpp"

namespace airlock::microvm_jail_test {
namespace {

// The pids of the running jail's cgroup once the probe and its child run (4 of them).
std::vector<pid_t> settled_pids(RunningJail& jail, const std::string& cgroup) {
  EXPECT_TRUE(jail.await_output("sleeping"));
  const auto pids = cgroup_pids(cgroup);
  EXPECT_EQ(pids.size(), 4u);
  return pids;
}

void expect_all_gone(const std::vector<pid_t>& pids, const std::string& cgroup) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!cgroup_pids(cgroup).empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(cgroup_pids(cgroup).empty()) << "the jail's cgroup still holds processes";
  for (const pid_t pid : pids) EXPECT_TRUE(gone(pid)) << pid << " is still there (or a zombie)";
}

pid_t warden_of(pid_t jail) {
  std::ifstream children("/proc/" + std::to_string(jail) + "/task/" + std::to_string(jail) +
                         "/children");
  long pid = -1;
  children >> pid;
  return static_cast<pid_t>(pid);
}

TEST_F(JailTest, ClosingTheLeashEndsTheWholeJail) {
  RunningJail jail = start({}, {"spawn", "sleep"});
  ASSERT_EQ(jail.await_status("ready"), "ready");
  const auto pids = settled_pids(jail, cgroup_->path());
  const auto closed = std::chrono::steady_clock::now();
  jail.close_leash();
  const Outcome outcome = jail.finish();
  EXPECT_LT(std::chrono::steady_clock::now() - closed, std::chrono::seconds(3));
  EXPECT_EQ(outcome.status, "ready\nsignal 9\n");
  EXPECT_EQ(outcome.exit_code, 128 + SIGKILL);
  expect_all_gone(pids, cgroup_->path());
}

// On a host whose limits live in several hierarchies (v1 memory, pids and cpu), the jail is
// given one directory in each; every process of the jail is counted in every one of them. (On
// a v2-only host a process is in one cgroup, and there is no second hierarchy to give.)
TEST_F(JailTest, EveryCgroupGivenHoldsTheWholeJail) {
  const auto v1 = cgroup1_mount();
  if (!v1) GTEST_SKIP() << "SKIPPED: this host mounts no cgroup v1 hierarchy beside v2";
  TestCgroup second(*v1);
  RunningJail jail = start({"--cgroup", second.path()}, {"spawn", "sleep"});
  ASSERT_EQ(jail.await_status("ready"), "ready");
  auto pids = settled_pids(jail, cgroup_->path());
  auto also = cgroup_pids(second.path());
  std::sort(pids.begin(), pids.end());
  std::sort(also.begin(), also.end());
  EXPECT_EQ(pids, also);
  jail.close_leash();
  (void)jail.finish();
  expect_all_gone(pids, second.path());
}

// The warden, orphaned, is re-parented to the nearest subreaper: this test, so that it can
// show the warden reaped rather than left to whatever the host's init does with zombies.
TEST_F(JailTest, KillingTheJailProcessEndsTheWholeJail) {
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
  RunningJail jail = start({}, {"spawn", "sleep"});
  const auto pids = settled_pids(jail, cgroup_->path());
  const pid_t warden = warden_of(jail.pid());
  ASSERT_GT(warden, 0);
  ASSERT_EQ(::kill(jail.pid(), SIGKILL), 0);
  jail.finish();
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  pid_t reaped = 0;
  while ((reaped = ::waitpid(warden, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (reaped == 0) {
    ADD_FAILURE() << "the warden outlived the jail's process";
    ::kill(warden, SIGKILL);
    reaped = ::waitpid(warden, &status, 0);
  }
  EXPECT_EQ(reaped, warden);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "the warden was not ended by its parent-death signal";
  ::prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
  expect_all_gone(pids, cgroup_->path());
}

TEST_F(JailTest, TerminatingTheWardenEndsTheWholeJail) {
  RunningJail jail = start({}, {"spawn", "sleep"});
  const auto pids = settled_pids(jail, cgroup_->path());
  const pid_t warden = warden_of(jail.pid());
  ASSERT_GT(warden, 0);
  ASSERT_EQ(::kill(warden, SIGTERM), 0);
  const Outcome outcome = jail.finish();
  EXPECT_EQ(outcome.status, "ready\nsignal 9\n");
  expect_all_gone(pids, cgroup_->path());
}

TEST_F(JailTest, ReportsTheProgramsExit) {
  const Outcome exited = run({}, {"exit", "7"});
  EXPECT_EQ(exited.status, "ready\nexit 7\n");
  EXPECT_EQ(exited.exit_code, 7);
  const Outcome signalled = run({}, {"raise", std::to_string(SIGSEGV)});
  EXPECT_EQ(signalled.status, "ready\nsignal " + std::to_string(SIGSEGV) + "\n");
  EXPECT_EQ(signalled.exit_code, 128 + SIGSEGV);
  EXPECT_TRUE(cgroup_pids(cgroup_->path()).empty());
}

}  // namespace
}  // namespace airlock::microvm_jail_test
