#include "backends/gvisor/guest/run.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "backends/gvisor/guest_protocol.hpp"

namespace airlock::gvisor_guest {
namespace {

void write_line(int fd, const std::string& line) {
  const std::string text = line + "\n";
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t wrote = ::write(fd, text.data() + done, text.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return;
    done += static_cast<std::size_t>(wrote);
  }
}

// Every process whose parent chain reaches `root`, from /proc (the guest's, inside gVisor).
std::set<pid_t> descendants_of(pid_t root) {
  std::map<pid_t, pid_t> parent_of;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return {};
  while (const dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0') continue;
    std::ifstream stat_file("/proc/" + std::string(entry->d_name) + "/stat");
    std::string text;
    std::getline(stat_file, text);
    // "pid (comm) state ppid …" — comm may hold spaces and parentheses: parse after the last ')'.
    const auto close = text.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(text.substr(close + 1));
    std::string state;
    long ppid = 0;
    rest >> state >> ppid;
    parent_of[static_cast<pid_t>(pid)] = static_cast<pid_t>(ppid);
  }
  ::closedir(proc);
  std::set<pid_t> found;
  bool grew = true;
  while (grew) {
    grew = false;
    for (const auto& [pid, ppid] : parent_of) {
      if ((ppid == root || found.count(ppid) != 0) && found.insert(pid).second) grew = true;
    }
  }
  return found;
}

void sleep_ms(long milliseconds) {
  timespec duration{milliseconds / 1000, (milliseconds % 1000) * 1'000'000};
  ::nanosleep(&duration, nullptr);
}

// Kills the command's process group and every descendant (the subreaper makes orphans ours)
// until none is left. Returns how many distinct processes were signalled, or -1 when some
// were still there after the bound.
long kill_tree(pid_t leader) {
  std::set<pid_t> signalled;
  for (int round = 0; round < 500; ++round) {  // ~5 s
    if (leader > 0) ::kill(-leader, SIGKILL);
    for (pid_t pid : descendants_of(::getpid())) {
      ::kill(pid, SIGKILL);
      signalled.insert(pid);
    }
    for (;;) {
      const pid_t reaped = ::waitpid(-1, nullptr, WNOHANG);
      if (reaped > 0) continue;
      if (reaped < 0 && errno == ECHILD && descendants_of(::getpid()).empty()) {
        return static_cast<long>(signalled.size());
      }
      break;
    }
    sleep_ms(10);
  }
  return -1;
}

// gVisor 20240729 creates a character or block device for a caller without CAP_MKNOD (upstream
// added the check in 2026), so every command carries a filter that refuses it: mknod and
// mknodat of S_IFCHR or S_IFBLK fail with EPERM, as they would without the capability on
// Linux. FIFOs, sockets and regular files stay allowed. The filter is inherited by everything
// the command starts and cannot be removed. Any other architecture's or ABI's system call
// (i386, x32) is refused outright: no command needs one.
bool refuse_device_nodes() {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
#if defined(__x86_64__)
  constexpr std::uint32_t kArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
  constexpr std::uint32_t kArch = AUDIT_ARCH_AARCH64;
#else
#error "the guest helper's device filter knows x86_64 and aarch64"
#endif
  constexpr std::uint32_t kRefuse = SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA);
  constexpr std::uint32_t kNr = offsetof(seccomp_data, nr);
  constexpr std::uint32_t kArchField = offsetof(seccomp_data, arch);
  // The low 32 bits of argument `n` (mode_t is 32 bits; x86_64 and aarch64 are little-endian).
  auto argument = [](int n) {
    return static_cast<std::uint32_t>(offsetof(seccomp_data, args) + 8 * n);
  };
  std::vector<sock_filter> program = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, kArchField),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kArch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, kRefuse),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, kNr),
#if defined(__x86_64__)
      // x32 system calls carry bit 30 of the number.
      BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, kRefuse),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mknod, 0, 2),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, argument(1)),
      BPF_JUMP(BPF_JMP | BPF_JA, 2, 0, 0),
#endif
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mknodat, 0, 6),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, argument(2)),
      // The mode is loaded: its file type decides.
      BPF_STMT(BPF_ALU | BPF_AND | BPF_K, S_IFMT),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, S_IFCHR, 2, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, S_IFBLK, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, kRefuse),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog filter{static_cast<unsigned short>(program.size()), program.data()};
  return ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &filter, 0, 0) == 0;
}

// chdir, except that a missing directory is waited for (up to 3 s) while the keeper has not yet
// said it made the work dir: the first exec of a fresh sandbox may start before PID 1 ran.
bool enter_directory(const std::string& directory) {
  for (int round = 0; round < 300; ++round) {
    if (::chdir(directory.c_str()) == 0) return true;
    if (errno != ENOENT) return false;
    char name[32] = {};
    const int fd = ::open("/proc/1/comm", O_RDONLY | O_CLOEXEC);
    const ssize_t got = fd >= 0 ? ::read(fd, name, sizeof name - 1) : -1;
    if (fd >= 0) ::close(fd);
    if (got > 0 && std::strncmp(name, kKeeperReadyName, std::strlen(kKeeperReadyName)) == 0) {
      errno = ENOENT;
      return false;
    }
    sleep_ms(10);
  }
  errno = ENOENT;
  return false;
}

}  // namespace

int run_command(const std::string& cwd, const std::vector<std::string>& argv) {
  // Not dumpable: another guest process of the same uid cannot open /proc/<us>/fd/3 and forge a
  // status line.
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  ::fcntl(kStatusFd, F_SETFD, FD_CLOEXEC);
  ::fcntl(kControlFd, F_SETFD, FD_CLOEXEC);

  sigset_t watched;
  sigemptyset(&watched);
  for (int signal : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&watched, signal);
  sigset_t previous;
  ::sigprocmask(SIG_BLOCK, &watched, &previous);
  const int signals = ::signalfd(-1, &watched, SFD_CLOEXEC);

  int exec_report[2];
  if (::pipe2(exec_report, O_CLOEXEC) != 0) {
    write_line(kStatusFd, "error " + std::to_string(errno) + " pipe");
    return 127;
  }
  const pid_t child = ::fork();
  if (child < 0) {
    write_line(kStatusFd, "error " + std::to_string(errno) + " fork");
    return 127;
  }
  if (child == 0) {
    ::close(exec_report[0]);
    ::sigprocmask(SIG_SETMASK, &previous, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    ::setsid();
    int failure[2] = {0, 0};
    if (!refuse_device_nodes()) {
      failure[0] = errno;
      failure[1] = 3;
    } else if (!cwd.empty() && !enter_directory(cwd)) {
      failure[0] = errno;
      failure[1] = 1;
    } else {
      std::vector<char*> arguments;
      for (const auto& argument : argv) arguments.push_back(const_cast<char*>(argument.c_str()));
      arguments.push_back(nullptr);
      ::execvp(arguments[0], arguments.data());
      failure[0] = errno;
      failure[1] = 2;
    }
    (void)!::write(exec_report[1], failure, sizeof failure);
    ::_exit(127);
  }
  ::close(exec_report[1]);
  int failure[2] = {0, 0};
  ssize_t got;
  do {
    got = ::read(exec_report[0], failure, sizeof failure);
  } while (got < 0 && errno == EINTR);
  ::close(exec_report[0]);
  if (got == static_cast<ssize_t>(sizeof failure)) {
    ::waitpid(child, nullptr, 0);
    write_line(kStatusFd, "error " + std::to_string(failure[0]) +
                              (failure[1] == 1   ? " chdir " + cwd
                               : failure[1] == 3 ? std::string(" seccomp")
                                                 : " exec " + argv[0]));
    return 127;
  }

  pollfd watch[2] = {{signals, POLLIN, 0}, {kControlFd, POLLIN, 0}};
  for (;;) {
    const int ready = ::poll(watch, 2, -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      break;
    }
    bool kill_requested = false;
    if ((watch[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      // kSignalRequest + a number: signal the command's process group; anything else (EOF,
      // another byte, a read error) asks for the kill.
      char request[64];
      const ssize_t asked = ::read(kControlFd, request, sizeof request);
      if (asked < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      kill_requested = asked <= 0;
      for (ssize_t i = 0; i < asked; ++i) {
        if (request[i] == kSignalRequest && i + 1 < asked) {
          const int number = static_cast<unsigned char>(request[++i]);
          // The host sends only forwardable signals; this pipe is the host's alone (the
          // helper is not dumpable, so no guest process can open it through /proc).
          if (number > 0 && number < 65) ::kill(-child, number);
        } else {
          kill_requested = true;
        }
      }
    }
    if ((watch[0].revents & POLLIN) != 0) {
      signalfd_siginfo info{};
      while (::read(signals, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        if (info.ssi_signo != SIGCHLD) kill_requested = true;
        if (info.ssi_signo == SIGCHLD) break;
      }
      int status = 0;
      pid_t reaped;
      while ((reaped = ::waitpid(-1, &status, WNOHANG)) > 0) {
        if (reaped != child) continue;  // an orphan of the command, adopted as subreaper
        if (WIFSIGNALED(status)) {
          write_line(kStatusFd, "signal " + std::to_string(WTERMSIG(status)));
          return 128 + WTERMSIG(status);
        }
        write_line(kStatusFd, "exit " + std::to_string(WEXITSTATUS(status)));
        return WEXITSTATUS(status);
      }
    }
    if (kill_requested) {
      const long killed = kill_tree(child);
      if (killed >= 0) write_line(kStatusFd, "killed " + std::to_string(killed));
      return 137;
    }
  }
  return 127;
}

int keep(const std::string& workdir, const std::string& bridge_socket, int bridge_port);

namespace {

// The sandbox's storage: a tmpfs of `bytes` at `directory`, in a mount namespace of the
// shepherd's own (private propagation), so runsc — started from here — makes the overlay's file
// store in it, and the host's mount table never holds it. The file store is unlinked as soon as
// runsc made it and lives while the sandbox holds it: the tmpfs, and the memory its pages hold,
// go with the sandbox however it ends. Few inodes: runsc makes one file per overlaid mount.
bool mount_storage(const std::string& directory, std::uint64_t bytes) {
  if (::unshare(CLONE_NEWNS) != 0) {
    std::fprintf(stderr, "airlock-gvisor-guest: unshare(CLONE_NEWNS): %s\n", std::strerror(errno));
    return false;
  }
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    std::fprintf(stderr, "airlock-gvisor-guest: making mounts private: %s\n",
                 std::strerror(errno));
    return false;
  }
  const std::string options = "size=" + std::to_string(bytes) + ",nr_inodes=64,mode=0700";
  // Not noexec: the Sentry maps the guest's programs from these files with PROT_EXEC (a noexec
  // store makes every binary written by the guest die with SIGSEGV when run).
  if (::mount("airlock-storage", directory.c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
              options.c_str()) != 0) {
    std::fprintf(stderr, "airlock-gvisor-guest: mounting the storage tmpfs on %s: %s\n",
                 directory.c_str(), std::strerror(errno));
    return false;
  }
  return true;
}

}  // namespace

int shepherd(int status_fd, const std::string& storage_directory, std::uint64_t storage_bytes,
             const std::vector<std::string>& argv) {
  // The caller waits for this first process; the shepherd proper is its child, so it is never a
  // zombie of a host process that did not expect one.
  const pid_t detached = ::fork();
  if (detached < 0) return 1;
  if (detached > 0) return 0;
  ::setsid();
  ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  if (!storage_directory.empty() && !mount_storage(storage_directory, storage_bytes)) {
    write_line(status_fd, "create 125");
    return 1;
  }
  const pid_t runsc = ::fork();
  if (runsc < 0) {
    write_line(status_fd, "create 125");
    return 1;
  }
  if (runsc == 0) {
    // runsc gets stdio only: the status descriptor and the image pin stay with the shepherd.
    for (int fd = 3; fd < 1024; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    std::vector<char*> arguments;
    for (const auto& argument : argv) arguments.push_back(const_cast<char*>(argument.c_str()));
    arguments.push_back(nullptr);
    ::execv(arguments[0], arguments.data());
    ::_exit(126);
  }
  int status = 0;
  while (::waitpid(runsc, &status, 0) < 0 && errno == EINTR) {
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  write_line(status_fd, "create " + std::to_string(code));
  ::close(status_fd);
  ::close(0);
  ::close(1);
  ::close(2);
  // Reap the sandbox and gofer the moment they die; leave when there is nothing left to reap.
  for (;;) {
    if (::waitpid(-1, nullptr, 0) < 0) {
      if (errno == EINTR) continue;
      break;
    }
  }
  return 0;
}

}  // namespace airlock::gvisor_guest
