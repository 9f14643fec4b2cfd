#include "backends/linux/init/command.hpp"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <linux/securebits.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "backends/linux/syscalls.hpp"

namespace airlock::linux_backend::init {
namespace {

constexpr const char* kDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

[[noreturn]] void die(int error_pipe, protocol::SpawnStage stage, int error_number) {
  ChildFailure failure{static_cast<std::uint32_t>(stage), error_number};
  ssize_t ignored = ::write(error_pipe, &failure, sizeof failure);
  (void)ignored;
  ::_exit(error_number == ENOENT ? 127 : 126);
}

// Places `fd` at `target` (no CLOEXEC), whatever descriptors currently sit there.
bool place(int fd, int target) {
  if (fd == target) {
    const int flags = ::fcntl(fd, F_GETFD);
    return flags >= 0 && ::fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC) == 0;
  }
  return ::dup2(fd, target) == target;
}

void drop_capabilities(int error_pipe, int last_capability) {
  // Locked securebits: uid 0 gains nothing on execve, and nothing can be unlocked again.
  const unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                             SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                             SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
  if (::prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) != 0) die(error_pipe, protocol::SpawnStage::setup, errno);
  for (int capability = 0; capability <= last_capability; ++capability) {
    if (::prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0 && errno != EINVAL) {
      die(error_pipe, protocol::SpawnStage::setup, errno);
    }
  }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) {
    die(error_pipe, protocol::SpawnStage::setup, errno);
  }
  struct __user_cap_header_struct header {};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  header.pid = 0;
  struct __user_cap_data_struct data[2] {};
  if (::syscall(SYS_capset, &header, data) != 0) die(error_pipe, protocol::SpawnStage::setup, errno);
}

void apply_seccomp(int error_pipe, const std::string& filter) {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    die(error_pipe, protocol::SpawnStage::setup, errno);
  }
  if (filter.empty()) return;
  struct sock_fprog program {};
  program.len = static_cast<unsigned short>(filter.size() / sizeof(struct sock_filter));
  program.filter = reinterpret_cast<struct sock_filter*>(const_cast<char*>(filter.data()));
  if (::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &program) != 0) {
    die(error_pipe, protocol::SpawnStage::setup, errno);
  }
}

std::string find_path_variable(const std::vector<std::string>& environment) {
  for (const auto& entry : environment) {
    if (entry.rfind("PATH=", 0) == 0) return entry.substr(5);
  }
  return kDefaultPath;
}

}  // namespace

int read_last_capability() {
  int fd = ::open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return CAP_LAST_CAP;
  char text[16] = {};
  const ssize_t length = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (length <= 0) return CAP_LAST_CAP;
  return std::atoi(text);
}

void run_command(const protocol::ExecRequest& request, int stdin_fd, int stdout_fd, int stderr_fd,
                 int error_pipe, const SpawnConfig& config, int last_capability) {
  sigset_t all;
  ::sigemptyset(&all);
  ::sigprocmask(SIG_SETMASK, &all, nullptr);
  if (::setsid() < 0) die(error_pipe, protocol::SpawnStage::setup, errno);

  int null_fd = -1;
  if (stdin_fd < 0) {
    null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd < 0) die(error_pipe, protocol::SpawnStage::setup, errno);
    stdin_fd = null_fd;
  }
  // Move everything above the stdio range first, so no dup2 below clobbers a source.
  const int high = 100;
  const int sources[4] = {stdin_fd, stdout_fd, stderr_fd, error_pipe};
  int moved[4];
  for (int i = 0; i < 4; ++i) {
    moved[i] = ::fcntl(sources[i], F_DUPFD_CLOEXEC, high);
    if (moved[i] < 0) die(error_pipe, protocol::SpawnStage::setup, errno);
  }
  error_pipe = moved[3];
  if (!place(moved[0], 0) || !place(moved[1], 1) || !place(moved[2], 2)) {
    die(error_pipe, protocol::SpawnStage::setup, errno);
  }
  if (::dup2(moved[3], 3) != 3) die(error_pipe, protocol::SpawnStage::setup, errno);
  error_pipe = 3;
  ::fcntl(3, F_SETFD, FD_CLOEXEC);
  sys::close_range(4, ~0u);
  // A terminal: the pty slave (now 0, 1 and 2) becomes this new session's controlling
  // terminal, so its line discipline signals the command's process group (^C → SIGINT).
  if ((request.flags & protocol::kTerminal) != 0 && ::ioctl(0, TIOCSCTTY, 0) != 0) {
    die(error_pipe, protocol::SpawnStage::setup, errno);
  }

  for (const auto& limit : config.resource_limits) {
    struct rlimit value {};
    value.rlim_cur = limit.soft;
    value.rlim_max = limit.hard;
    if (::setrlimit(static_cast<__rlimit_resource>(limit.resource), &value) != 0) {
      die(error_pipe, protocol::SpawnStage::setup, errno);
    }
  }
  // The command, not the init, is what the kernel kills first when the sandbox runs out of
  // memory. The init is not dumpable, and a copy of it owns none of its /proc files, so the
  // child is dumpable for exactly this write — while it still holds every capability of the
  // sandbox's namespace, so no capability-less guest process may attach to it or open its
  // memory meanwhile — and non-dumpable again before anything is dropped. From here until
  // execve (which decides dumpability afresh) no other guest process can read or write this
  // process's memory through /proc, ptrace or process_vm_*: its filter cannot be stripped.
  if (::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) die(error_pipe, protocol::SpawnStage::setup, errno);
  const int oom = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  const bool adjusted = oom >= 0 && ::write(oom, "1000", 4) == 4;
  const int oom_error = errno;
  if (oom >= 0) ::close(oom);
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) die(error_pipe, protocol::SpawnStage::setup, errno);
  if (!adjusted) die(error_pipe, protocol::SpawnStage::setup, oom_error);

  if (::chdir(request.working_directory.c_str()) != 0) {
    die(error_pipe, protocol::SpawnStage::working_directory, errno);
  }

  std::vector<char*> argv;
  for (const auto& argument : request.argv) argv.push_back(const_cast<char*>(argument.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& entry : request.env) envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);
  const std::string& program = request.argv.front();
  std::vector<std::string> candidates;
  if (program.find('/') != std::string::npos) {
    candidates.push_back(program);
  } else {
    const std::string path = find_path_variable(request.env);
    std::size_t start = 0;
    while (start <= path.size()) {
      std::size_t end = path.find(':', start);
      if (end == std::string::npos) end = path.size();
      std::string candidate = end > start ? path.substr(start, end - start) : std::string(".");
      candidate.push_back('/');
      candidate.append(program);
      candidates.push_back(std::move(candidate));
      start = end + 1;
    }
  }

  drop_capabilities(error_pipe, last_capability);
  apply_seccomp(error_pipe, config.seccomp_filter);

  int error = ENOENT;
  bool saw_eacces = false;
  for (const auto& candidate : candidates) {
    ::execve(candidate.c_str(), argv.data(), envp.data());
    error = errno;
    if (error == EACCES) {
      saw_eacces = true;
    } else if (error != ENOENT && error != ENOTDIR) {
      break;
    }
  }
  if (saw_eacces && (error == ENOENT || error == ENOTDIR)) error = EACCES;
  die(error_pipe, protocol::SpawnStage::execute, error);
}

}  // namespace airlock::linux_backend::init
