// airlock-microvm-jail: confines the microvm backend's VMM (QEMU) the way Firecracker's jailer
// confines its own. The library starts it as root:
//
//   airlock-microvm-jail --leash FD --status-fd FD --cgroup DIR --uid N --gid N
//                        [--ro PATH]... [--rw PATH]... [--dev NAME]... [--keep-fd FD]...
//                        -- PROGRAM ARGS...
//
// The process the library started joins each DIR first (one per cgroup hierarchy: the v2
// directory, or on a hybrid host the v1 memory, pids and cpu ones), so everything it forks is
// counted there; unshares the mount, pid, network, ipc, uts and cgroup namespaces; forks the
// warden (warden.hpp: PID 1 of the new pid namespace, which builds the root of root.hpp and
// starts the program of program.hpp) and exits with the warden's status. The network namespace
// is new and empty: the program sees only a loopback device that is down.
//
// Status lines (report.hpp) go to --status-fd; a bad command line is refused with exit 2 and a
// message naming the argument, any failure before the program runs with exit 127 and an
// "error ERRNO STEP" line.
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "backends/microvm/jail/options.hpp"
#include "backends/microvm/jail/report.hpp"
#include "backends/microvm/jail/warden.hpp"
#include "base/unique_fd.hpp"

namespace airlock::microvm_jail {
namespace {

void join_cgroup(const std::string& directory) {
  base::UniqueFd dir(::open(directory.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir) fail("open the cgroup " + directory, errno);
  base::UniqueFd procs(::openat(dir.get(), "cgroup.procs", O_WRONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!procs) fail("open " + directory + "/cgroup.procs", errno);
  if (!write_all(procs.get(), std::to_string(::getpid()))) {
    fail("join the cgroup " + directory, errno);
  }
}

// The highest capability this kernel knows, read while the host's /proc is still there.
int last_capability() {
  base::UniqueFd fd(::open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC));
  if (!fd) fail("open /proc/sys/kernel/cap_last_cap", errno);
  char text[16] = {};
  const ssize_t got = ::read(fd.get(), text, sizeof text - 1);
  if (got <= 0) fail("read /proc/sys/kernel/cap_last_cap", got < 0 ? errno : EIO);
  int value = -1;
  if (std::sscanf(text, "%d", &value) != 1 || value < 0 || value > 63) {
    fail("parse /proc/sys/kernel/cap_last_cap", EINVAL);
  }
  return value;
}

int exit_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kSetupFailed;
}

int run(int argc, char** argv) {
  Parsed parsed = parse_options(argc, argv);
  if (!parsed.options) {
    std::fprintf(stderr, "airlock-microvm-jail: %s\n%s", parsed.error.c_str(), usage());
    return 2;
  }
  const Options& options = *parsed.options;
  set_status_fd(options.status_fd);
  // A status write to an owner that is gone must not kill the jail before it has cleaned up.
  ::signal(SIGPIPE, SIG_IGN);
  for (const int fd : {options.leash_fd, options.status_fd}) {
    const int flags = ::fcntl(fd, F_GETFD);
    if (flags < 0 || ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC) != 0) {
      fail("set close-on-exec on descriptor " + std::to_string(fd), errno);
    }
  }
  if (::geteuid() != 0) fail("the jail must run as root", EPERM);

  for (const std::string& directory : options.cgroups) join_cgroup(directory);
  const int capabilities = last_capability();
  if (::unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS |
                CLONE_NEWCGROUP) != 0) {
    fail("unshare", errno);
  }
  const pid_t warden = ::fork();
  if (warden < 0) fail("fork the warden", errno);
  if (warden == 0) run_warden(options, capabilities);

  // This process only waits: were it killed, the warden's parent-death signal ends the jail.
  ::close(options.leash_fd);
  int status = 0;
  while (::waitpid(warden, &status, 0) < 0) {
    if (errno != EINTR) fail("wait for the warden", errno);
  }
  return exit_status(status);
}

}  // namespace
}  // namespace airlock::microvm_jail

int main(int argc, char** argv) {
  try {
    return airlock::microvm_jail::run(argc, argv);
  } catch (...) {
    airlock::microvm_jail::fail("unexpected exception", EIO);
  }
}
