// The seccomp filter every guest command runs under, compiled once per backend with libseccomp
// and handed to each sandbox's init as raw BPF.
//
// A deny list in the spirit of Docker's default profile: the default action is ALLOW, and what
// would let a process change the sandbox's shape or reach the kernel's sharp edges fails with
// EPERM — mounting (mount, umount2, the new mount API, pivot_root), namespaces (unshare, setns,
// clone with any CLONE_NEW* flag; clone3 answers ENOSYS so the C library falls back to clone,
// whose flags a filter can see), tracing and cross-process memory (ptrace, process_vm_*,
// pidfd_getfd, kcmp), the kernel keyring (add_key, keyctl, request_key), BPF, perf events,
// userfaultfd, io_uring, kernel modules and kexec, reboot, swap, clocks, quotas, accounting,
// file handles (open_by_handle_at, the classic container escape), legacy personality syscalls,
// and the TIOCSTI/TIOCLINUX ioctls that push input into a terminal. Syscalls of any other
// architecture (i386, x32) kill the process.
#pragma once

#include <string>

namespace airlock::linux_backend {

// struct sock_filter[] as bytes. Throws BackendError when libseccomp fails.
std::string compile_seccomp_filter();

}  // namespace airlock::linux_backend
