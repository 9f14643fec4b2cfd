// The jail's root filesystem, built by the warden in its own mount namespace and then entered
// with pivot_root, the host's root detached. The new root holds only:
//   /usr (and /bin /sbin /lib /lib64 ... as the host has them: the same links on a merged-/usr
//        system, read-only binds where they are real directories)   read-only, nosuid, nodev
//   every --ro PATH at PATH                                           read-only, nosuid, nodev
//   every --rw PATH at PATH                                 read-write, nosuid, nodev, noexec
//   /dev   a small read-only tmpfs with the --dev nodes bound from the host's /dev, and links
//          fd, stdin, stdout, stderr into /proc/self
//   /proc  a fresh procfs of the jail's pid namespace: hidepid=invisible, subset=pid (no
//          /proc/sys, /proc/kcore, /proc/sysrq-trigger: only processes and self)
//   /tmp   a small private tmpfs (nosuid, nodev, noexec)
// and the root itself is a read-only tmpfs. No /sys, /etc, /run, /home, /root, nor any other
// host path. Binds are recursive: what is mounted below a bound path comes with it, with the
// same flags (mount_setattr, AT_RECURSIVE), so no submount stays writable or suid.
//
// Every failure ends the process through fail() (report.hpp): a root is built whole or not at
// all.
#pragma once

#include "backends/microvm/jail/options.hpp"

namespace airlock::microvm_jail {

// Builds the root and pivots into it; on return the calling process's "/" is the new root and
// its working directory is "/". Needs a private mount namespace, and to be in the pid namespace
// whose /proc it mounts.
void enter_root(const Options& options);

}  // namespace airlock::microvm_jail
