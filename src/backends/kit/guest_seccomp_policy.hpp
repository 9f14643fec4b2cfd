// The syscall policy every guest command runs under, as data: the one definition the backends
// that filter a shared kernel's syscalls enforce. The linux backend compiles it with libseccomp
// into the BPF its init loads (src/backends/linux/seccomp_policy.cpp); the docker backend renders
// it as the engine's JSON seccomp profile (src/backends/docker/seccomp_profile.cpp), which the
// engine's runtime compiles with the same library. docs/backends/linux-seccomp.md gives every
// family's and every denial's reason.
//
// An allowlist: a syscall the policy does not name fails with ENOSYS (kDefaultErrno), as on a
// kernel that lacks it; the families below are allowed whatever their arguments; kDenied is
// refused explicitly with EPERM; argument_rules() allows or refuses a few syscalls by their
// arguments (clone, socket, socketpair, ioctl, personality). A syscall is either unconditional
// (allowed or denied) or conditional, never both: libseccomp silently drops the conditional
// rules of a syscall that also has an unconditional one.
//
// The order of the tables and of argument_rules() is the order the linux backend adds its
// rules in, which decides the bytes of its program: keep it.
#pragma once

#include <errno.h>
#include <linux/netlink.h>
#include <linux/sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace airlock::guest_seccomp {

// What a syscall the policy does not name answers, and what a denied one answers.
inline constexpr int kDefaultErrno = ENOSYS;
inline constexpr int kDeniedErrno = EPERM;

// Descriptors and the file system. Every path is resolved inside the sandbox's own mount
// namespace; device nodes need CAP_MKNOD, which no guest holds, so mknod makes FIFOs only.
inline constexpr const char* kFiles[] = {
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2",
    "pwritev2", "open", "openat", "openat2", "creat", "close", "close_range", "dup", "dup2",
    "dup3", "lseek", "fcntl", "flock", "pipe", "pipe2", "sendfile", "splice", "tee", "vmsplice",
    "copy_file_range", "stat", "lstat", "fstat", "newfstatat", "statx", "statfs", "fstatfs",
    "access", "faccessat", "faccessat2", "getdents", "getdents64", "getcwd", "chdir", "fchdir",
    "mkdir", "mkdirat", "rmdir", "mknod", "mknodat", "link", "linkat", "symlink", "symlinkat",
    "unlink", "unlinkat", "rename", "renameat", "renameat2", "readlink", "readlinkat",
    "truncate", "ftruncate", "fallocate", "fadvise64", "readahead", "fsync", "fdatasync",
    "sync", "syncfs", "sync_file_range", "chmod", "fchmod", "fchmodat", "fchmodat2", "chown",
    "fchown", "lchown", "fchownat", "umask", "utime", "utimes", "futimesat", "utimensat",
    "getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr", "setxattr",
    "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr", "inotify_init",
    "inotify_init1", "inotify_add_watch", "inotify_rm_watch", "memfd_create", "cachestat",
};

// The process's own address space. mlock is bounded by RLIMIT_MEMLOCK and the cgroup.
inline constexpr const char* kMemory[] = {
    "brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "mincore", "msync", "mlock",
    "mlock2", "munlock", "mlockall", "munlockall", "membarrier", "pkey_alloc", "pkey_free",
    "pkey_mprotect", "map_shadow_stack", "mseal",
};

// Processes and threads (clone is filtered below). The pid namespace bounds which processes
// kill and the pidfd calls can name; rlimits and priorities only go where the kernel's own
// checks let an unprivileged process go.
inline constexpr const char* kProcesses[] = {
    "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid", "getpid",
    "getppid", "gettid", "getpgid", "setpgid", "getpgrp", "getsid", "setsid", "kill", "tkill",
    "tgkill", "pidfd_open", "pidfd_send_signal", "process_mrelease", "set_tid_address",
    "set_robust_list", "get_robust_list", "futex", "futex_waitv", "futex_wake", "futex_wait",
    "futex_requeue", "rseq", "arch_prctl", "prctl", "getrlimit", "setrlimit", "prlimit64",
    "getrusage", "getpriority", "setpriority", "sched_yield", "sched_getaffinity",
    "sched_setaffinity", "sched_getparam", "sched_setparam", "sched_getscheduler",
    "sched_setscheduler", "sched_get_priority_max", "sched_get_priority_min",
    "sched_rr_get_interval", "sched_getattr", "sched_setattr", "ioprio_get", "ioprio_set",
    "getcpu",
};

// Identity within the sandbox's user namespace; capabilities can only be dropped (the bounding
// set is empty, securebits are locked).
inline constexpr const char* kIdentity[] = {
    "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups", "setuid",
    "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setfsuid", "setfsgid",
    "setgroups", "capget", "capset",
};

// Signals, to processes the pid namespace shows.
inline constexpr const char* kSignals[] = {
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigsuspend",
    "rt_sigtimedwait", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "sigaltstack", "signalfd",
    "signalfd4", "pause", "alarm", "restart_syscall",
};

// Reading clocks, sleeping and timers; setting a clock is denied below.
inline constexpr const char* kTime[] = {
    "clock_gettime", "clock_getres", "clock_nanosleep", "gettimeofday", "time", "nanosleep",
    "getitimer", "setitimer", "timer_create", "timer_settime", "timer_gettime",
    "timer_getoverrun", "timer_delete", "timerfd_create", "timerfd_settime", "timerfd_gettime",
    "times",
};

// Sockets (socket and socketpair are filtered below), in the sandbox's own network namespace.
inline constexpr const char* kSockets[] = {
    "bind", "connect", "listen", "accept", "accept4", "getsockname", "getpeername",
    "getsockopt", "setsockopt", "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg",
    "recvmmsg", "shutdown",
};

// Waiting on descriptors, and the descriptors made for waiting.
inline constexpr const char* kPolling[] = {
    "poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl",
    "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2",
};

// System V and POSIX IPC, private to the sandbox's IPC namespace.
inline constexpr const char* kIpc[] = {
    "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop", "semctl",
    "shmget", "shmat", "shmdt", "shmctl", "mq_open", "mq_unlink", "mq_timedsend",
    "mq_timedreceive", "mq_notify", "mq_getsetattr",
};

// Self-sandboxing (a filter can only be added, never removed; no_new_privs is already set),
// and what the system says about itself.
inline constexpr const char* kSelf[] = {
    "seccomp", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
    "uname", "sysinfo", "getrandom",
};

// The allowed families, in the order they are added.
inline constexpr std::span<const char* const> kAllowedFamilies[] = {
    kFiles, kMemory, kProcesses, kIdentity, kSignals, kTime, kSockets, kPolling, kIpc, kSelf,
};

// Refused explicitly with EPERM: the syscall exists and this process may not use it, which is
// what an unprivileged program expects to hear (and handles) from all of these.
inline constexpr const char* kDenied[] = {
    // Host-wide pools a sandbox could drain (fs.aio-max-nr, the per-user key quotas), and
    // io_uring's large attack surface.
    "io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "keyctl", "add_key", "request_key",
    // Kernel programs, events and page-fault handlers.
    "bpf", "perf_event_open", "userfaultfd", "fanotify_init", "lookup_dcookie",
    // The sandbox's shape: mounts and roots, namespaces.
    "mount", "umount", "umount2", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount",
    "open_tree", "open_tree_attr", "mount_setattr", "pivot_root", "chroot", "unshare", "setns",
    // Other processes' memory and descriptors.
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
    // File handles: open_by_handle_at resolves a handle without a path (the classic escape).
    "open_by_handle_at", "name_to_handle_at",
    // The machine: modules, kexec, reboot, swap, clocks, accounting, logs, quotas, hardware.
    "init_module", "finit_module", "delete_module", "create_module", "query_module",
    "get_kernel_syms", "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "stime", "acct", "syslog",
    "quotactl", "quotactl_fd", "nfsservctl", "uselib", "vm86", "vm86old", "iopl", "ioperm",
    "vhangup", "sethostname", "setdomainname",
    // Memory outside the kernel's reach and NUMA placement (Docker: CAP_SYS_NICE).
    "memfd_secret", "mbind", "set_mempolicy", "set_mempolicy_home_node", "migrate_pages",
    "move_pages",
    // The process's LSM attributes.
    "lsm_set_self_attr",
};

// Syscalls newer than some libseccomp releases in use (2.5.4 knows none of these by name),
// by their number in the table every architecture has shared since Linux 5.1 (424 onwards).
struct LateSyscall {
  const char* name;
  int number;
};
inline constexpr LateSyscall kLateSyscalls[] = {
    {"cachestat", 451},        {"fchmodat2", 452},  {"map_shadow_stack", 453},
    {"futex_wake", 454},       {"futex_wait", 455}, {"futex_requeue", 456},
    {"lsm_set_self_attr", 460}, {"mseal", 462},     {"open_tree_attr", 467},
};

// ---- argument rules ---------------------------------------------------------------------------

// A comparison of one argument, as libseccomp (and the engines' JSON profiles) express it.
// masked_eq: (argument & mask) == value, with `mask` in `value` and the compared value in
// `value_two` (the order of libseccomp's datum_a/datum_b and of the profiles' value/valueTwo).
enum class Op { eq, ne, gt, masked_eq };
struct Condition {
  unsigned argument;
  Op op;
  std::uint64_t value;
  std::uint64_t value_two = 0;
};

// allow, or fail with `error`.
struct Rule {
  const char* syscall;
  bool allow;
  int error;  // when !allow
  std::vector<Condition> conditions;
};

// The CLONE_NEW* flags clone(2) can carry (CLONE_NEWTIME shares its bit with the exit signal
// there, and only clone3 and unshare take it).
inline constexpr std::uint64_t kCloneNewFlags[] = {CLONE_NEWNS,   CLONE_NEWUTS, CLONE_NEWIPC,
                                                   CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET,
                                                   CLONE_NEWCGROUP};
// The values Docker's default profile allows: Linux, PER_LINUX32, UNAME26, both, and the query.
inline constexpr std::uint64_t kPersonalities[] = {0x0, 0x8, 0x20000, 0x20008, 0xffffffff};
// Push input into a terminal another process reads (TIOCSTI), or drive the virtual console.
inline constexpr std::uint32_t kDeniedIoctls[] = {TIOCSTI, TIOCLINUX};

// Masked-equality patterns (mask, value) on a 32-bit value that together match every value
// except `excluded`, each value exactly once: the leaves of a binary trie over the value's bits
// that hold none of the excluded values. libseccomp has no "masked not-equal", and a rule that
// ignores the arguments would override every conditional rule of the same syscall.
inline void complement_patterns(std::span<const std::uint32_t> excluded, std::uint32_t prefix,
                                int depth,
                                std::vector<std::pair<std::uint32_t, std::uint32_t>>& out) {
  const std::uint32_t mask = depth == 0 ? 0 : ~std::uint32_t{0} << (32 - depth);
  bool holds_excluded = false;
  for (std::uint32_t value : excluded) holds_excluded |= (value & mask) == prefix;
  if (!holds_excluded) {
    out.emplace_back(mask, prefix);
    return;
  }
  if (depth == 32) return;  // exactly an excluded value
  const std::uint32_t bit = std::uint32_t{1} << (31 - depth);
  complement_patterns(excluded, prefix, depth + 1, out);
  complement_patterns(excluded, prefix | bit, depth + 1, out);
}

// Every argument rule, in the order they are added.
inline std::vector<Rule> argument_rules() {
  std::vector<Rule> rules;
  auto allow = [&](const char* call, std::vector<Condition> conditions) {
    rules.push_back({call, true, 0, std::move(conditions)});
  };
  auto refuse = [&](const char* call, int error, std::vector<Condition> conditions) {
    rules.push_back({call, false, error, std::move(conditions)});
  };

  // clone: threads and processes, in no new namespace. clone3 is left out (ENOSYS): its flags
  // are in memory the filter cannot read, and every C library falls back to clone.
  std::uint64_t all_new = 0;
  for (std::uint64_t flag : kCloneNewFlags) {
    all_new |= flag;
    refuse("clone", EPERM, {{0, Op::masked_eq, flag, flag}});
  }
  allow("clone", {{0, Op::masked_eq, all_new, 0}});

  // socket, socketpair: local, IPv4 and IPv6 sockets, and the routing netlink the C library
  // reads interfaces and addresses from. Every other family answers EAFNOSUPPORT, as from a
  // kernel built without it, and every other netlink protocol EPROTONOSUPPORT. The whole 64-bit
  // argument is compared, so stray high bits are refused rather than truncated by the kernel.
  for (const char* call : {"socket", "socketpair"}) {
    for (std::uint64_t family : {AF_UNIX, AF_INET, AF_INET6}) {
      allow(call, {{0, Op::eq, family}});
    }
    allow(call, {{0, Op::eq, AF_NETLINK}, {2, Op::eq, NETLINK_ROUTE}});
    refuse(call, EPROTONOSUPPORT, {{0, Op::eq, AF_NETLINK}, {2, Op::ne, NETLINK_ROUTE}});
    for (std::uint64_t family = 0; family < AF_NETLINK; ++family) {
      if (family == AF_UNIX || family == AF_INET || family == AF_INET6) continue;
      refuse(call, EAFNOSUPPORT, {{0, Op::eq, family}});
    }
    refuse(call, EAFNOSUPPORT, {{0, Op::gt, AF_NETLINK}});
  }

  // ioctl: every request but TIOCSTI and TIOCLINUX (EPERM). The kernel reads the request as
  // 32 bits, so only the low 32 bits are compared: high bits cannot smuggle one past.
  for (std::uint32_t request : kDeniedIoctls) {
    refuse("ioctl", EPERM, {{1, Op::masked_eq, 0xffffffffULL, request}});
  }
  std::vector<std::pair<std::uint32_t, std::uint32_t>> patterns;
  complement_patterns(kDeniedIoctls, 0, 0, patterns);
  for (const auto& [mask, value] : patterns) allow("ioctl", {{1, Op::masked_eq, mask, value}});

  // personality: the values Docker allows (the kernel reads 32 bits); any other answers ENOSYS.
  for (std::uint64_t persona : kPersonalities) {
    allow("personality", {{0, Op::masked_eq, 0xffffffffULL, persona}});
  }
  return rules;
}

}  // namespace airlock::guest_seccomp
