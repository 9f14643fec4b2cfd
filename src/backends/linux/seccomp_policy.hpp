// The seccomp filter every guest command runs under, compiled once per backend with libseccomp
// and handed to each sandbox's init as raw BPF.
//
// An allowlist in the spirit of Docker's default profile and sandbox2's policies: a syscall the
// policy does not name fails with ENOSYS, as on a kernel that lacks it, so a syscall added to
// the kernel after this list was written is unreachable and callers take the fallback they
// already have for older kernels. The allowed families (files, memory, processes and threads,
// signals, time reading, sockets, polling, System V and POSIX IPC, self-sandboxing) are listed
// in src/backends/guest_seccomp_policy.hpp (shared with the docker backend, which renders the
// same policy as the engine's seccomp profile) and docs/backends/linux-seccomp.md with their
// reasons. Where a family is
// only partly safe an argument filter decides: clone without any CLONE_NEW* flag (clone3, whose
// flags sit in memory a filter cannot read, answers ENOSYS so the C library falls back to
// clone), socket()/socketpair() for AF_UNIX, AF_INET, AF_INET6 and NETLINK_ROUTE only, ioctl
// except TIOCSTI and TIOCLINUX, personality for Docker's values only. What would change the
// sandbox's shape or reach the kernel's sharp edges is refused explicitly with EPERM (mounts,
// namespaces, tracing, keyrings, BPF, perf, userfaultfd, io_uring and AIO, modules, kexec,
// clocks, …). Syscalls of any other architecture (i386, x32) kill the process.
#pragma once

#include <cstddef>
#include <string>

namespace airlock::linux_backend {

// The kernel refuses a classic BPF program longer than this (BPF_MAXINSNS).
inline constexpr std::size_t kSeccompInstructionLimit = 4096;

// What the compiled policy holds, for reports and tests. Counts are of syscalls that exist on
// the architecture the filter is compiled for.
struct SeccompPolicySummary {
  std::size_t allowed = 0;       // allowed whatever their arguments
  std::size_t conditional = 0;   // allowed for some arguments only (clone, socket, ioctl, …)
  std::size_t denied = 0;        // refused explicitly (EPERM); everything else is ENOSYS
  std::size_t instructions = 0;  // BPF instructions of the compiled filter
  bool binary_tree = false;      // libseccomp's binary-tree syscall dispatch was available
};

// struct sock_filter[] as bytes. Throws BackendError when libseccomp fails or the program
// would not fit the kernel's limit.
std::string compile_seccomp_filter();

// Compiles the filter and describes it.
SeccompPolicySummary seccomp_policy_summary();

}  // namespace airlock::linux_backend
