// What tests/testcases/seccomp_probe must see from a guest under the shared guest policy
// (src/backends/guest_seccomp_policy.hpp), attempt by attempt: the linux backend's filter
// answers exactly this (docs/backends/linux-seccomp.md), and so does the docker backend's
// profile, but for the syscalls its engine's libseccomp does not know by name
// (late_syscall_attempts()).
#pragma once

#include <map>
#include <set>
#include <string>

namespace airlock::test_support {

// What the probe must see, attempt by attempt (docs/backends/linux-seccomp.md).
inline std::map<std::string, std::string> expected_probe_answers() {
  std::map<std::string, std::string> expected;
  for (const char* allowed :
       {"getpid", "clone", "socket-unix", "socket-inet", "socket-inet6", "socket-netlink-route",
        "socketpair-unix", "personality-query", "personality-query-sign-extended",
        "personality-linux", "ioctl-fionread", "ioctl-fionread-high-bits"}) {
    expected[allowed] = "ALLOWED";
  }
  expected["ioctl-tcgets"] = "ENOTTY";  // through the filter; the kernel says "not a terminal"
  for (const char* eperm : {"clone-newuser",
                            "clone-newns",
                            "clone-newpid",
                            "clone-newnet",
                            "clone-newuts",
                            "clone-newipc",
                            "clone-newcgroup",
                            "clone-newuser-newnet",
                            "ioctl-tiocsti",
                            "ioctl-tiocsti-high-bits",
                            "ioctl-tiocsti-sign-extended",
                            "ioctl-tioclinux",
                            "io_setup",
                            "io_destroy",
                            "io_submit",
                            "io_cancel",
                            "io_getevents",
                            "io_pgetevents",
                            "io_uring_setup",
                            "io_uring_enter",
                            "io_uring_register",
                            "keyctl",
                            "add_key",
                            "request_key",
                            "bpf",
                            "perf_event_open",
                            "userfaultfd",
                            "fanotify_init",
                            "lookup_dcookie",
                            "mount",
                            "umount2",
                            "fsopen",
                            "fsconfig",
                            "fsmount",
                            "fspick",
                            "move_mount",
                            "open_tree",
                            "open_tree_attr",
                            "mount_setattr",
                            "pivot_root",
                            "chroot",
                            "unshare",
                            "setns",
                            "ptrace",
                            "process_vm_readv",
                            "process_vm_writev",
                            "pidfd_getfd",
                            "kcmp",
                            "open_by_handle_at",
                            "name_to_handle_at",
                            "init_module",
                            "finit_module",
                            "delete_module",
                            "create_module",
                            "query_module",
                            "get_kernel_syms",
                            "kexec_load",
                            "kexec_file_load",
                            "reboot",
                            "swapon",
                            "swapoff",
                            "settimeofday",
                            "clock_settime",
                            "clock_adjtime",
                            "adjtimex",
                            "stime",
                            "acct",
                            "syslog",
                            "quotactl",
                            "quotactl_fd",
                            "nfsservctl",
                            "uselib",
                            "vm86",
                            "vm86old",
                            "iopl",
                            "ioperm",
                            "vhangup",
                            "sethostname",
                            "setdomainname",
                            "memfd_secret",
                            "mbind",
                            "set_mempolicy",
                            "set_mempolicy_home_node",
                            "migrate_pages",
                            "move_pages",
                            "lsm_set_self_attr"}) {
    expected[eperm] = "EPERM";
  }
  for (const char* enosys :
       {"clone3", "personality-addr-no-randomize", "personality-bsd", "statmount", "listmount",
        "get_mempolicy", "process_madvise", "modify_ldt", "unassigned-1000"}) {
    expected[enosys] = "ENOSYS";
  }
  for (const char* family :
       {"socket-vsock", "socket-packet", "socket-alg", "socket-key", "socket-bluetooth",
        "socket-xdp", "socket-tipc", "socket-unspec", "socket-vsock-high-bits",
        "socket-unix-high-bits", "socketpair-vsock"}) {
    expected[family] = "EAFNOSUPPORT";
  }
  for (const char* protocol : {"socket-netlink-uevent", "socket-netlink-audit",
                               "socket-netlink-netfilter", "socket-netlink-generic"}) {
    expected[protocol] = "EPROTONOSUPPORT";
  }
  return expected;
}

// Attempts of syscalls newer than libseccomp 2.5.4 (the policy names them; a profile can only
// name them, so an engine whose libseccomp does not know them answers the default ENOSYS).
inline std::set<std::string> late_syscall_attempts() {
  return {"open_tree_attr", "lsm_set_self_attr"};
}

}  // namespace airlock::test_support
