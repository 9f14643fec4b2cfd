// Builds a sandbox's root filesystem at <sandbox>/root, and its storage at <sandbox>/storage, in
// the current (private) mount namespace. As root, the monitor calls it in its own namespace
// before cloning the init; unprivileged, the init calls it inside its user namespace.
//
// Storage: one tmpfs of `storage_bytes` and `storage_inodes`, owned by the guest root, holding
// every place the guest can write —
//   storage/work       image "host": bound at the work dir (or at its new first component)
//   storage/upper, storage/ovl-work    images: the overlay's upper layer and its workdir
//   storage/tmp, run, shm              bound at /tmp, /run, /dev/shm
//   storage/host-tools                 bound read-only at /run/airlock-host-tools; the host
//                                      creates its sockets through the storage descriptor
// so no guest can fill the host's disk or inodes, and no mount the guest sees names a host path
// (every bind's source is a directory of that tmpfs).
//
// Every failure ends the process through fail() (report.hpp): a root is built whole or not at
// all.
#pragma once

#include "backends/linux/spawn_config.hpp"
#include "base/unique_fd.hpp"

namespace airlock::linux_backend::init {

struct BuiltRoot {
  base::UniqueFd root;  // O_PATH: the sandbox's "/" (the top mount at <sandbox>/root)
  base::UniqueFd
      storage;  // O_PATH: the storage tmpfs's root, read-write (the guest sees only binds)
};

// `sandbox` is an O_PATH descriptor of <sandbox>; `lower` an O_PATH descriptor of the image's
// rootfs (directory images; -1 otherwise) — already idmapped when the image needs it.
BuiltRoot build_root(const SpawnConfig& config, int sandbox, int lower);

// After /proc is mounted beneath `root`: /proc/sys read-only, and the world-readable files that
// describe the host's kernel state (kcore, keys, timer_list, sched_debug, kallsyms) masked, as
// container runtimes do.
void harden_proc(int root);

// "/proc/self/fd/N".
std::string fd_path(int fd);

}  // namespace airlock::linux_backend::init
