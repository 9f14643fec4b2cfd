// What of the host's processes, network and descriptors the jailed program reaches: none of
// them, but its own cgroup.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>

#include "fixture.hpp"

namespace airlock::microvm_jail_test {
namespace {

std::vector<long> numbers(const std::string& list) {
  std::vector<long> values;
  std::istringstream items(list);
  std::string item;
  while (std::getline(items, item, ',')) values.push_back(std::stol(item));
  return values;
}

// A host process of the program's own uid, sleeping until killed.
pid_t host_process_of_the_program_uid() {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::setresgid(kProgramGid, kProgramGid, kProgramGid) != 0 ||
        ::setresuid(kProgramUid, kProgramUid, kProgramUid) != 0) {
      ::_exit(1);
    }
    for (;;) ::pause();
  }
  return pid;
}

TEST_F(JailTest, SeesNoHostProcess) {
  const Outcome outcome = run({}, {"pids"});
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  const std::string line = line_starting(outcome.out, "pids self=");
  ASSERT_FALSE(line.empty()) << outcome.out;
  const long self = std::stol(line.substr(10));
  EXPECT_EQ(self, 2) << "the program is the warden's first child in a new pid namespace";
  const auto seen = numbers(line.substr(line.find("seen=") + 5));
  EXPECT_FALSE(seen.empty());
  for (const long pid : seen) EXPECT_TRUE(pid == self || pid == 1) << line;
}

TEST_F(JailTest, CannotSignalAHostProcess) {
  const pid_t victim = host_process_of_the_program_uid();
  ASSERT_GT(victim, 0);
  const std::string target = std::to_string(victim), test = std::to_string(::getpid());
  const Outcome outcome = run({}, {"kill", target, "kill", test, "kill", "-1", "kill", "1"});
  EXPECT_EQ(outcome.exit_code, 0) << outcome.err;
  EXPECT_EQ(line_starting(outcome.out, "kill " + target + " "),
            "kill " + target + " errno " + std::to_string(ESRCH));
  EXPECT_EQ(line_starting(outcome.out, "kill " + test + " "),
            "kill " + test + " errno " + std::to_string(ESRCH));
  EXPECT_EQ(line_starting(outcome.out, "kill -1 "), "kill -1 errno " + std::to_string(ESRCH));
  // The warden (root) is not the program's to signal.
  EXPECT_EQ(line_starting(outcome.out, "kill 1 "), "kill 1 errno " + std::to_string(EPERM));
  int status = 0;
  EXPECT_EQ(::waitpid(victim, &status, WNOHANG), 0) << "the host process was killed";
  ::kill(victim, SIGKILL);
  ::waitpid(victim, &status, 0);
}

TEST_F(JailTest, NetworkHoldsOnlyLoopback) {
  const Outcome outcome = run({}, {"netdevs", "ifnames"});
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  EXPECT_EQ(line_starting(outcome.out, "netdevs"), "netdevs lo");
  EXPECT_EQ(line_starting(outcome.out, "ifnames"), "ifnames lo");
}

TEST_F(JailTest, JoinsTheCgroupWithEverythingItStarts) {
  RunningJail jail = start({}, {"cgroup", "spawn", "sleep"});
  ASSERT_TRUE(jail.await_output("sleeping"));
  ASSERT_EQ(jail.await_output("cgroup"), "cgroup 0::/");
  const auto pids = cgroup_pids(cgroup_->path());
  EXPECT_NE(std::find(pids.begin(), pids.end(), jail.pid()), pids.end())
      << "the jail's own process is not in " << cgroup_->path();
  // The jail, the warden, the probe and the probe's child.
  EXPECT_EQ(pids.size(), 4u);
  EXPECT_EQ(std::count_if(pids.begin(), pids.end(),
                          [](pid_t pid) { return command_name(pid) == "probe"; }),
            2);
  jail.close_leash();
  jail.finish();
}

TEST_F(JailTest, InheritsNoDescriptorButStandardOnes) {
  const int planted = ::open("/proc/self/status", O_RDONLY);  // no O_CLOEXEC
  ASSERT_GE(planted, 0);
  const Outcome outcome = run({}, {"fds"}, {{7, planted}, {20, planted}});
  ::close(planted);
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  EXPECT_EQ(line_starting(outcome.out, "fds"), "fds 0,1,2");
}

TEST_F(JailTest, InheritsTheKeptDescriptorsOnly) {
  const int planted = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(planted, 0);
  const Outcome outcome = run({"--keep-fd", "8", "--keep-fd", "20"}, {"fds"},
                              {{7, planted}, {8, planted}, {20, planted}, {21, planted}});
  ::close(planted);
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  EXPECT_EQ(line_starting(outcome.out, "fds"), "fds 0,1,2,8,20");
}

}  // namespace
}  // namespace airlock::microvm_jail_test
