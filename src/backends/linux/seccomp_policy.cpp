#include "backends/linux/seccomp_policy.hpp"

#include <errno.h>
#include <linux/sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <memory>

#include "airlock/errors.hpp"
#include "backends/linux/unique_fd.hpp"

namespace airlock::linux_backend {
namespace {

constexpr const char* kDenied[] = {
    "acct", "add_key", "bpf", "clock_adjtime", "clock_settime", "create_module",
    "delete_module", "finit_module", "fsconfig", "fsmount", "fsopen", "fspick",
    "get_kernel_syms", "init_module", "io_uring_enter", "io_uring_register", "io_uring_setup",
    "ioperm", "iopl", "kcmp", "kexec_file_load", "kexec_load", "keyctl", "lookup_dcookie",
    "mount", "mount_setattr", "move_mount", "name_to_handle_at", "nfsservctl",
    "open_by_handle_at", "open_tree", "perf_event_open", "pidfd_getfd", "pivot_root",
    "process_vm_readv", "process_vm_writev", "ptrace", "query_module", "quotactl",
    "quotactl_fd", "reboot", "request_key", "setns", "settimeofday", "stime", "swapoff",
    "swapon", "_sysctl", "sysfs", "syslog", "umount", "umount2", "unshare", "uselib",
    "userfaultfd", "ustat", "vm86", "vm86old", "fanotify_init", "lsm_set_self_attr",
};

struct ContextDeleter {
  void operator()(void* context) const { seccomp_release(context); }
};

[[noreturn]] void failed(const std::string& what, int result) {
  throw BackendError("the sandbox's seccomp filter could not be built",
                     what + ": " + std::to_string(-result));
}

}  // namespace

std::string compile_seccomp_filter() {
  std::unique_ptr<void, ContextDeleter> context(seccomp_init(SCMP_ACT_ALLOW));
  if (!context) throw BackendError("the sandbox's seccomp filter could not be built", "init");
  if (int rc = seccomp_attr_set(context.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
      rc != 0) {
    failed("bad-arch action", rc);
  }
  // no_new_privs is set by the init itself, just before the filter is loaded.
  if (int rc = seccomp_attr_set(context.get(), SCMP_FLTATR_CTL_NNP, 0); rc != 0) {
    failed("nnp attribute", rc);
  }
  for (const char* name : kDenied) {
    const int number = seccomp_syscall_resolve_name(name);
    if (number == __NR_SCMP_ERROR) continue;  // not a syscall on this architecture
    if (int rc = seccomp_rule_add(context.get(), SCMP_ACT_ERRNO(EPERM), number, 0); rc != 0) {
      failed(std::string("deny ") + name, rc);
    }
  }
  if (int rc = seccomp_rule_add(context.get(), SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
      rc != 0) {
    failed("clone3", rc);
  }
  for (unsigned long flag : {CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID,
                             CLONE_NEWNET, CLONE_NEWCGROUP}) {
    if (int rc = seccomp_rule_add(context.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                                  SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag));
        rc != 0) {
      failed("clone flags", rc);
    }
  }
  for (unsigned long request : {static_cast<unsigned long>(TIOCSTI),
                                static_cast<unsigned long>(TIOCLINUX)}) {
    if (int rc = seccomp_rule_add(context.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                                  SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffUL, request));
        rc != 0) {
      failed("ioctl", rc);
    }
  }

  UniqueFd memory(::memfd_create("airlock-seccomp", MFD_CLOEXEC));
  if (!memory) throw BackendError("the sandbox's seccomp filter could not be built", "memfd");
  if (int rc = seccomp_export_bpf(context.get(), memory.get()); rc != 0) failed("export", rc);
  struct stat info {};
  if (::fstat(memory.get(), &info) != 0) {
    throw BackendError("the sandbox's seccomp filter could not be built", "fstat");
  }
  std::string program(static_cast<std::size_t>(info.st_size), '\0');
  if (::pread(memory.get(), program.data(), program.size(), 0) !=
      static_cast<ssize_t>(program.size())) {
    throw BackendError("the sandbox's seccomp filter could not be built", "read back");
  }
  return program;
}

}  // namespace airlock::linux_backend
