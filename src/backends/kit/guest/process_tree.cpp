#include "backends/kit/guest/process_tree.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "backends/kit/guest/file_protocol.hpp"

namespace airlock::guest_kit {

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

static void sleep_ms(long milliseconds) {
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
std::vector<sock_filter> device_node_filter() {
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
  return program;
}

bool apply_filter(std::vector<sock_filter>& program) {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
  sock_fprog filter{static_cast<unsigned short>(program.size()), program.data()};
  return ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &filter, 0, 0) == 0;
}

// chdir, except that a missing directory is waited for (up to 3 s) while the keeper has not yet
// said it made the work dir: the first exec of a fresh sandbox may start before PID 1 ran.
bool enter_directory(const char* directory) {
  for (int round = 0; round < 300; ++round) {
    if (::chdir(directory) == 0) return true;
    if (errno != ENOENT) return false;
    char name[32] = {};
    const int fd = ::open("/proc/1/comm", O_RDONLY | O_CLOEXEC);
    const ssize_t got = fd >= 0 ? ::read(fd, name, sizeof name - 1) : -1;
    if (fd >= 0) ::close(fd);
    if (got > 0 && std::strncmp(name, kGuestReadyName, std::strlen(kGuestReadyName)) == 0) {
      errno = ENOENT;
      return false;
    }
    sleep_ms(10);
  }
  errno = ENOENT;
  return false;
}

}  // namespace airlock::guest_kit
