#include "backends/microvm/jail/program.hpp"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backends/microvm/jail/report.hpp"

namespace airlock::microvm_jail {
namespace {

// In the child between fork and execv nothing may allocate or fail loudly: a failed step writes
// "ERRNO STEP" on the report pipe and the child ends.
[[noreturn]] void child_fail(int report, const char* step, int error_number) noexcept {
  char line[128];
  const int size = std::snprintf(line, sizeof line, "%d %s", error_number, step);
  if (size > 0) {
    const ssize_t ignored = ::write(report, line, static_cast<std::size_t>(size));
    (void)ignored;
  }
  ::_exit(kSetupFailed);
}

// Closes every descriptor but 0, 1, 2, `keep` (sorted, unique, all > 2) and `report`.
int close_others(std::vector<int> keep, int report) noexcept {
  keep.push_back(report);
  std::sort(keep.begin(), keep.end());
  unsigned next = 3;
  for (const int fd : keep) {
    const auto descriptor = static_cast<unsigned>(fd);
    if (descriptor > next && ::close_range(next, descriptor - 1, 0) != 0) return errno;
    next = std::max(next, descriptor + 1);
  }
  return ::close_range(next, UINT_MAX, 0) != 0 ? errno : 0;
}

int capset_empty() noexcept {
  __user_cap_header_struct header{};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  return ::syscall(SYS_capset, &header, data) != 0 ? errno : 0;
}

bool capabilities_empty(int last_capability) noexcept {
  __user_cap_header_struct header{};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  for (const auto& word : data) {
    if (word.effective != 0 || word.permitted != 0 || word.inheritable != 0) return false;
  }
  for (int capability = 0; capability <= last_capability; ++capability) {
    if (::prctl(PR_CAPBSET_READ, capability, 0, 0, 0) != 0) return false;
    if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, capability, 0, 0) != 0) return false;
  }
  return true;
}

[[noreturn]] void become_program(const Options& options, int last_capability, int report,
                                 char** argv) noexcept {
  sigset_t none;
  sigemptyset(&none);
  for (const int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGCHLD}) {
    ::signal(sig, SIG_DFL);
  }
  if (::sigprocmask(SIG_SETMASK, &none, nullptr) != 0) child_fail(report, "sigprocmask", errno);
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) {
    child_fail(report, "prctl PR_SET_PDEATHSIG", errno);
  }
  // The warden is PID 1 here: another parent means it is already gone.
  if (::getppid() != 1) child_fail(report, "the warden is gone", ESRCH);

  if (const int error = close_others(options.keep_fds, report); error != 0) {
    child_fail(report, "close_range", error);
  }
  for (const int fd : options.keep_fds) {
    if (::fcntl(fd, F_SETFD, 0) != 0) child_fail(report, "keep a descriptor", errno);
  }

  // The bounding set and the ambient set while CAP_SETPCAP is still held; the setresuid below
  // (without SECBIT_KEEP_CAPS) then empties the permitted and effective sets, and capset the
  // inheritable set, which no uid change touches.
  for (int capability = 0; capability <= last_capability; ++capability) {
    if (::prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0) {
      child_fail(report, "prctl PR_CAPBSET_DROP", errno);
    }
  }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) {
    child_fail(report, "prctl PR_CAP_AMBIENT_CLEAR_ALL", errno);
  }
  // No supplementary group but the one /dev/kvm is opened through, when the program was given
  // it: the node is the host's (bound, never changed), usually root:kvm 0660.
  gid_t groups[1] = {0};
  std::size_t group_count = 0;
  if (std::find(options.devices.begin(), options.devices.end(), "kvm") != options.devices.end()) {
    struct stat node {};
    if (::stat("/dev/kvm", &node) != 0) child_fail(report, "stat /dev/kvm", errno);
    if (node.st_gid != 0) groups[group_count++] = node.st_gid;
  }
  if (::setgroups(group_count, groups) != 0) child_fail(report, "setgroups", errno);
  if (::setresgid(options.gid, options.gid, options.gid) != 0)
    child_fail(report, "setresgid", errno);
  if (::setresuid(options.uid, options.uid, options.uid) != 0)
    child_fail(report, "setresuid", errno);
  if (const int error = capset_empty(); error != 0) child_fail(report, "capset", error);
  if (!capabilities_empty(last_capability)) child_fail(report, "verify no capability", EPERM);
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    child_fail(report, "prctl PR_SET_NO_NEW_PRIVS", errno);
  }
  if (::chdir("/") != 0) child_fail(report, "chdir /", errno);

  ::execv(argv[0], argv);
  child_fail(report, "execv", errno);
}

}  // namespace

StartedProgram start_program(const Options& options, int last_capability) {
  // Built before the fork: the child only calls async-signal-safe functions.
  std::vector<char*> argv;
  for (const auto& argument : options.program) argv.push_back(const_cast<char*>(argument.c_str()));
  argv.push_back(nullptr);

  int ends[2];
  if (::pipe2(ends, O_CLOEXEC) != 0) fail("pipe for the exec report", errno);
  const pid_t pid = ::fork();
  if (pid < 0) fail("fork the program", errno);
  if (pid == 0) {
    ::close(ends[0]);
    become_program(options, last_capability, ends[1], argv.data());
  }
  ::close(ends[1]);
  return StartedProgram{pid, ends[0]};
}

}  // namespace airlock::microvm_jail
