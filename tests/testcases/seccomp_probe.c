// Tries what the sandbox's seccomp policy refuses, with raw syscall(), and prints one line per
// attempt: `name=ERRNO` (the errno's symbolic name) or `name=ALLOWED` (the call returned >= 0).
// Arguments are chosen to be harmless should a call get through, and where possible so that the
// kernel itself would answer something else than the filter does (0, EFAULT, EINVAL, EBADF), so
// the answer shows who refused. A few controls that must get through are printed too.
//
//   seccomp_probe        every attempt
//   seccomp_probe x32    an x32 getpid (the process should be killed before it prints)
//   seccomp_probe i386   an i386 getpid through int 0x80 (likewise)
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <asm/unistd.h>
#endif

#define NAME(error) \
  { error, #error }
static const struct {
  int number;
  const char* name;
} kErrnoNames[] = {
    NAME(EPERM),        NAME(ENOENT),     NAME(ESRCH),           NAME(EIO),
    NAME(EBADF),        NAME(EAGAIN),     NAME(ENOMEM),          NAME(EACCES),
    NAME(EFAULT),       NAME(EBUSY),      NAME(EINVAL),          NAME(ENOTTY),
    NAME(ENOSYS),       NAME(EOPNOTSUPP), NAME(EPROTONOSUPPORT), NAME(ESOCKTNOSUPPORT),
    NAME(EAFNOSUPPORT),
};

static const char* errno_name(int error) {
  static char other[32];
  for (size_t i = 0; i < sizeof kErrnoNames / sizeof kErrnoNames[0]; ++i) {
    if (kErrnoNames[i].number == error) return kErrnoNames[i].name;
  }
  snprintf(other, sizeof other, "E%d", error);
  return other;
}

static void report(const char* name, long result, int error) {
  if (result >= 0) {
    printf("%s=ALLOWED\n", name);
  } else {
    printf("%s=%s\n", name, errno_name(error));
  }
  fflush(stdout);
}

// A call that returns a descriptor on success: closed again.
static void report_fd(const char* name, long result, int error) {
  report(name, result, error);
  if (result >= 0) close((int)result);
}

#define TRY(name, ...)                   \
  do {                                   \
    errno = 0;                           \
    long result_ = syscall(__VA_ARGS__); \
    report(name, result_, errno);        \
  } while (0)

#define TRY_FD(name, ...)                \
  do {                                   \
    errno = 0;                           \
    long result_ = syscall(__VA_ARGS__); \
    report_fd(name, result_, errno);     \
  } while (0)

// clone(2) with `flags`: a child that got through exits at once.
static void try_clone(const char* name, unsigned long flags) {
  errno = 0;
  long child = syscall(SYS_clone, flags | SIGCHLD, 0, 0, 0, 0);
  const int error = errno;
  if (child == 0) _exit(0);
  if (child > 0) waitpid((pid_t)child, NULL, 0);
  report(name, child, error);
}

static void attempts(void) {
  const unsigned long high = 1UL << 32;  // bits the kernel drops from a 32-bit argument

  // Controls: the filter lets these through.
  TRY("getpid", SYS_getpid);
  try_clone("clone", 0);
  TRY_FD("socket-unix", SYS_socket, AF_UNIX, SOCK_STREAM, 0);
  TRY_FD("socket-inet", SYS_socket, AF_INET, SOCK_STREAM, 0);
  TRY_FD("socket-inet6", SYS_socket, AF_INET6, SOCK_DGRAM, 0);
  TRY_FD("socket-netlink-route", SYS_socket, AF_NETLINK, SOCK_RAW, NETLINK_ROUTE);
  {
    int pair[2];
    errno = 0;
    long result = syscall(SYS_socketpair, AF_UNIX, SOCK_STREAM, 0, pair);
    report("socketpair-unix", result, errno);
    if (result == 0) {
      close(pair[0]);
      close(pair[1]);
    }
  }
  TRY("personality-query", SYS_personality, 0xffffffffUL);
  TRY("personality-query-sign-extended", SYS_personality, ~0UL);
  TRY("personality-linux", SYS_personality, 0UL);
  {
    int pipes[2];
    int available = 0;
    if (pipe(pipes) == 0) {
      TRY("ioctl-fionread", SYS_ioctl, pipes[0], (unsigned long)FIONREAD, &available);
      TRY("ioctl-fionread-high-bits", SYS_ioctl, pipes[0], high | FIONREAD, &available);
      struct termios settings;
      TRY("ioctl-tcgets", SYS_ioctl, pipes[0], (unsigned long)TCGETS, &settings);
      close(pipes[0]);
      close(pipes[1]);
    }
  }

  // Argument filters.
  try_clone("clone-newuser", CLONE_NEWUSER);
  try_clone("clone-newns", CLONE_NEWNS);
  try_clone("clone-newpid", CLONE_NEWPID);
  try_clone("clone-newnet", CLONE_NEWNET);
  try_clone("clone-newuts", CLONE_NEWUTS);
  try_clone("clone-newipc", CLONE_NEWIPC);
  try_clone("clone-newcgroup", CLONE_NEWCGROUP);
  try_clone("clone-newuser-newnet", CLONE_NEWUSER | CLONE_NEWNET);
  TRY("clone3", SYS_clone3, 0, 0);
  TRY_FD("socket-vsock", SYS_socket, 40 /* AF_VSOCK */, SOCK_STREAM, 0);
  TRY_FD("socket-packet", SYS_socket, AF_PACKET, SOCK_RAW, 0);
  TRY_FD("socket-alg", SYS_socket, 38 /* AF_ALG */, SOCK_SEQPACKET, 0);
  TRY_FD("socket-key", SYS_socket, 15 /* AF_KEY */, SOCK_RAW, 2);
  TRY_FD("socket-bluetooth", SYS_socket, 31 /* AF_BLUETOOTH */, SOCK_RAW, 0);
  TRY_FD("socket-xdp", SYS_socket, 44 /* AF_XDP */, SOCK_RAW, 0);
  TRY_FD("socket-tipc", SYS_socket, 30 /* AF_TIPC */, SOCK_RDM, 0);
  TRY_FD("socket-unspec", SYS_socket, AF_UNSPEC, SOCK_STREAM, 0);
  TRY_FD("socket-vsock-high-bits", SYS_socket, high | 40, SOCK_STREAM, 0);
  TRY_FD("socket-unix-high-bits", SYS_socket, high | AF_UNIX, SOCK_STREAM, 0);
  TRY_FD("socket-netlink-uevent", SYS_socket, AF_NETLINK, SOCK_RAW, 15 /* KOBJECT_UEVENT */);
  TRY_FD("socket-netlink-audit", SYS_socket, AF_NETLINK, SOCK_RAW, 9 /* NETLINK_AUDIT */);
  TRY_FD("socket-netlink-netfilter", SYS_socket, AF_NETLINK, SOCK_RAW, 12 /* NETFILTER */);
  TRY_FD("socket-netlink-generic", SYS_socket, AF_NETLINK, SOCK_RAW, 16 /* GENERIC */);
  {
    int pair[2];
    errno = 0;
    long result = syscall(SYS_socketpair, 40 /* AF_VSOCK */, SOCK_STREAM, 0, pair);
    report("socketpair-vsock", result, errno);
    if (result == 0) {
      close(pair[0]);
      close(pair[1]);
    }
  }
  {
    char byte = '\n';
    TRY("ioctl-tiocsti", SYS_ioctl, 0, (unsigned long)TIOCSTI, &byte);
    TRY("ioctl-tiocsti-high-bits", SYS_ioctl, 0, high | TIOCSTI, &byte);
    TRY("ioctl-tiocsti-sign-extended", SYS_ioctl, 0, 0xffffffff00000000UL | TIOCSTI, &byte);
    char subcode = 0;
    TRY("ioctl-tioclinux", SYS_ioctl, 0, (unsigned long)TIOCLINUX, &subcode);
  }
  TRY("personality-addr-no-randomize", SYS_personality, 0x0040000UL);
  TRY("personality-bsd", SYS_personality, 0x6UL);

  // AIO, io_uring, keyrings.
  TRY("io_setup", SYS_io_setup, 0, 0);
  TRY("io_destroy", SYS_io_destroy, 0);
  TRY("io_submit", SYS_io_submit, 0, 0, 0);
  TRY("io_cancel", SYS_io_cancel, 0, 0, 0);
  TRY("io_getevents", SYS_io_getevents, 0, 0, 0, 0, 0);
  TRY("io_pgetevents", SYS_io_pgetevents, 0, 0, 0, 0, 0, 0);
  TRY_FD("io_uring_setup", SYS_io_uring_setup, 0, 0);
  TRY("io_uring_enter", SYS_io_uring_enter, -1, 0, 0, 0, 0, 0);
  TRY("io_uring_register", SYS_io_uring_register, -1, 0, 0, 0);
  TRY("keyctl", SYS_keyctl, -1, 0, 0, 0, 0);
  TRY("add_key", SYS_add_key, 0, 0, 0, 0, 0);
  TRY("request_key", SYS_request_key, 0, 0, 0, 0);
  // Kernel programs, events, page-fault handlers.
  TRY_FD("bpf", SYS_bpf, -1, 0, 0);
  TRY_FD("perf_event_open", SYS_perf_event_open, 0, 0, -1, -1, 0);
  TRY_FD("userfaultfd", SYS_userfaultfd, ~0UL);
  TRY_FD("fanotify_init", SYS_fanotify_init, ~0UL, 0);
  TRY("lookup_dcookie", SYS_lookup_dcookie, 0, 0, 0);
  // Mounts, roots, namespaces.
  TRY("mount", SYS_mount, 0, 0, 0, 0, 0);
  TRY("umount2", SYS_umount2, 0, 0);
  TRY_FD("fsopen", SYS_fsopen, 0, 0);
  TRY("fsconfig", SYS_fsconfig, -1, 0, 0, 0, 0);
  TRY_FD("fsmount", SYS_fsmount, -1, 0, 0);
  TRY_FD("fspick", SYS_fspick, -1, 0, 0);
  TRY("move_mount", SYS_move_mount, -1, 0, -1, 0, 0);
  TRY_FD("open_tree", SYS_open_tree, -1, 0, 0);
#if defined(__x86_64__) || defined(__aarch64__)
  TRY_FD("open_tree_attr", 467, -1, 0, 0, 0, 0);
#endif
  TRY("mount_setattr", SYS_mount_setattr, -1, 0, 0, 0, 0);
  TRY("pivot_root", SYS_pivot_root, 0, 0);
  TRY("chroot", SYS_chroot, 0);
  TRY("unshare", SYS_unshare, 0);
  TRY("setns", SYS_setns, -1, 0);
  // Other processes.
  TRY("ptrace", SYS_ptrace, 0x7fff, 1, 0, 0);
  TRY("process_vm_readv", SYS_process_vm_readv, getpid(), 0, 0, 0, 0, 0);
  TRY("process_vm_writev", SYS_process_vm_writev, getpid(), 0, 0, 0, 0, 0);
  TRY_FD("pidfd_getfd", SYS_pidfd_getfd, -1, 0, 0);
  TRY("kcmp", SYS_kcmp, getpid(), getpid(), 0 /* KCMP_FILE */, 0, 0);
  // File handles.
  TRY_FD("open_by_handle_at", SYS_open_by_handle_at, -1, 0, 0);
  TRY("name_to_handle_at", SYS_name_to_handle_at, AT_FDCWD, "/", 0, 0, 0);
  // The machine.
  TRY("init_module", SYS_init_module, 0, 0, 0);
  TRY("finit_module", SYS_finit_module, -1, 0, 0);
  TRY("delete_module", SYS_delete_module, 0, 0);
#ifdef SYS_create_module
  TRY("create_module", SYS_create_module, 0, 0);
#endif
#ifdef SYS_query_module
  TRY("query_module", SYS_query_module, 0, 0, 0, 0, 0);
#endif
#ifdef SYS_get_kernel_syms
  TRY("get_kernel_syms", SYS_get_kernel_syms, 0);
#endif
  TRY("kexec_load", SYS_kexec_load, 0, 0, 0, ~0UL);
#ifdef SYS_kexec_file_load
  TRY("kexec_file_load", SYS_kexec_file_load, -1, -1, 0, 0, ~0UL);
#endif
  TRY("reboot", SYS_reboot, 0, 0, 0, 0);
  TRY("swapon", SYS_swapon, 0, 0);
  TRY("swapoff", SYS_swapoff, 0);
  TRY("settimeofday", SYS_settimeofday, 0, 0);
  TRY("clock_settime", SYS_clock_settime, -1, 0);
  TRY("clock_adjtime", SYS_clock_adjtime, -1, 0);
#ifdef SYS_adjtimex
  TRY("adjtimex", SYS_adjtimex, 0);
#endif
#ifdef SYS_stime
  TRY("stime", SYS_stime, 0);
#endif
  TRY("acct", SYS_acct, 0);
  TRY("syslog", SYS_syslog, -1, 0, 0);
  TRY("quotactl", SYS_quotactl, 0, 0, 0, 0);
  TRY("quotactl_fd", SYS_quotactl_fd, -1, 0, 0, 0);
#ifdef SYS_nfsservctl
  TRY("nfsservctl", SYS_nfsservctl, 0, 0, 0);
#endif
#ifdef SYS_uselib
  TRY("uselib", SYS_uselib, 0);
#endif
#ifdef SYS_vm86
  TRY("vm86", SYS_vm86, 0, 0);
#endif
#ifdef SYS_vm86old
  TRY("vm86old", SYS_vm86old, 0);
#endif
#ifdef SYS_iopl
  TRY("iopl", SYS_iopl, 4);
#endif
#ifdef SYS_ioperm
  TRY("ioperm", SYS_ioperm, 0, 0, 0);
#endif
  TRY("vhangup", SYS_vhangup);
  TRY("sethostname", SYS_sethostname, 0, 0);
  TRY("setdomainname", SYS_setdomainname, 0, 0);
  // Secret memory, NUMA placement, LSM attributes.
  TRY_FD("memfd_secret", SYS_memfd_secret, ~0UL);
  TRY("mbind", SYS_mbind, 0, 0, 0, 0, 0, 0);
  TRY("set_mempolicy", SYS_set_mempolicy, 0, 0, 0);
  TRY("set_mempolicy_home_node", SYS_set_mempolicy_home_node, 0, 0, 0, 0);
  TRY("migrate_pages", SYS_migrate_pages, getpid(), 0, 0, 0);
  TRY("move_pages", SYS_move_pages, 0, 0, 0, 0, 0, 0);
#if defined(__x86_64__) || defined(__aarch64__)
  TRY("lsm_set_self_attr", 460, 0, 0, 0, ~0UL);
#endif

  // Not on the list at all: the default answer.
#if defined(__x86_64__) || defined(__aarch64__)
  TRY("statmount", 457, 0, 0, 0, 0);
  TRY("listmount", 458, 0, 0, 0, 0);
#endif
  TRY("get_mempolicy", SYS_get_mempolicy, 0, 0, 0, 0, 0);
  TRY("process_madvise", SYS_process_madvise, -1, 0, 0, 0, 0);
#ifdef SYS_modify_ldt
  TRY("modify_ldt", SYS_modify_ldt, 0, 0, 0);
#endif
  TRY("unassigned-1000", 1000);
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "x32") == 0) {
#if defined(__x86_64__)
    errno = 0;
    long result = syscall(__X32_SYSCALL_BIT | __NR_getpid);
    report("x32-getpid", result, errno);
#endif
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "i386") == 0) {
#if defined(__x86_64__)
    long result;
    __asm__ volatile("int $0x80" : "=a"(result) : "a"(20L /* i386 getpid */) : "memory");
    report("i386-getpid", result, result < 0 ? (int)-result : 0);
#endif
    return 0;
  }
  attempts();
  return 0;
}
