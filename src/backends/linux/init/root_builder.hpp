// Builds a sandbox's root filesystem under config.root_mount, in the calling process's (private)
// mount namespace. As root this runs in the monitor, before the init is cloned, so overlay and
// bind mounts are made with the host's privilege and the user namespace inherits them locked;
// unprivileged it runs in the init itself, inside its own user namespace.
//
// image "host":  a small read-only tmpfs "/" holding a recursive read-only bind of every top-level
//                directory of the host root (except proc, sys, dev, tmp, run, lost+found) and
//                copies of its top-level links; fresh tmpfs /tmp and /run; the work storage bound
//                read-write at the work dir; the hidden paths covered.
// directory:     an overlay (lower = the image rootfs, upper = the sandbox's own directory);
//                tmpfs /tmp and /run; the work dir created (owned by the guest root).
// Both:          a tmpfs /dev (read-only after setup) with null, zero, full, random, urandom and
//                tty bound from the host, the usual /proc/self/fd links, /dev/shm and a private
//                devpts; /run/airlock bound read-only from the egress directory when bridging.
// /proc and /sys are mounted by the init, which alone is inside the new pid namespace.
#pragma once

#include "backends/linux/spawn_config.hpp"

namespace airlock::linux_backend::init {

// Fails (and ends the process through `fail`) on any error, naming the step.
void build_root(const SpawnConfig& config);

}  // namespace airlock::linux_backend::init
