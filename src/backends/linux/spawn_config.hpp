// What the library tells airlock-init when it starts a sandbox, and what airlock-init reports
// back while it does. Shared by both sides.
//
// airlock-init is started with these descriptors and nothing else open:
//   3  a memfd holding the encoded SpawnConfig
//   4  the write end of the status pipe (the library reads it until end of stream)
//   5  the control socket, already bound and listening
//   6  (optional, kHasImagePin) a descriptor holding the image store's pin on the rootfs
//   7  (optional, kHasIdSlot) the flock on the sandbox's host id range (see IdSlots): held by
//      the init for its whole life, so no other sandbox is given the same ids while it runs
//   8  (optional, kPooled) the leash: a socket to the warm pool that built the sandbox ahead of
//      need. Until the pool sends one byte 'c' (claimed) on it, end of stream on it — the
//      pool's process died or discarded the sandbox — ends the sandbox.
//   9  (optional, kFromSnapshot) a snapshot's stream (snapshot_stream.hpp), read once into the
//      new storage before the root is mounted on it, then closed: no guest process inherits it
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace airlock::linux_backend {

inline constexpr int kConfigFd = 3;
inline constexpr int kStatusFd = 4;
inline constexpr int kControlFd = 5;
inline constexpr int kImagePinFd = 6;
inline constexpr int kIdSlotFd = 7;
inline constexpr int kPoolLeashFd = 8;
inline constexpr int kSnapshotFd = 9;

enum class RootKind : std::uint32_t { host = 1, directory = 2 };

// SpawnConfig flags.
inline constexpr std::uint32_t kEgressBridge = 1u << 0;  // 127.0.0.1:3128 → the host's proxy
inline constexpr std::uint32_t kHasImagePin = 1u << 1;
// As root: guest ids 0..65535 are a host range of their own, and the monitor builds the root
// as real root. Otherwise the init builds it inside its user namespace.
inline constexpr std::uint32_t kMapFullRange = 1u << 2;
inline constexpr std::uint32_t kHasIdSlot = 1u << 3;
// Unprivileged with subordinate ids: the maps are written by newuidmap/newgidmap (setuid helpers
// that check /etc/subuid and /etc/subgid) instead of by the monitor itself.
inline constexpr std::uint32_t kSubordinateIds = 1u << 4;
// Built by the warm pool: held on the leash at kPoolLeashFd until claimed.
inline constexpr std::uint32_t kPooled = 1u << 5;
// Resumed from a snapshot: the storage starts as the stream at kSnapshotFd holds it.
inline constexpr std::uint32_t kFromSnapshot = 1u << 6;

// Where a sandbox sees its host-tool socket directory (read-only: connecting to a unix socket
// needs write permission on the socket, not on its directory or mount).
inline constexpr const char* kHostToolsGuestDir = "/run/airlock-host-tools";

// The top-level host directories image "host" shows (read-only), when they exist. Nothing else
// of the host is visible: no /home, /root, /var, /srv, /mnt, /media, /run or /tmp of the host,
// and so no user's files, no state directory, and no host unix socket living there.
inline constexpr const char* kHostRootDirectories[] = {"usr", "bin", "sbin", "lib", "lib32",
                                                       "lib64", "libx32", "etc", "opt"};

struct ResourceLimit {
  std::uint32_t resource = 0;  // RLIMIT_*
  std::uint64_t soft = 0;
  std::uint64_t hard = 0;
};

// A value the init writes into its own user namespace's /proc/sys/user/<name> (the namespace's
// own ceilings on what its processes may create).
struct NamespaceLimit {
  std::string name;
  std::uint64_t value = 0;
};

struct SpawnConfig {
  std::string instance_id;
  std::uint32_t flags = 0;
  // What every control request must carry (protocol::kSecretBytes bytes).
  std::string control_secret;

  // <state>/linux/<id> (mode 0711): the monitor opens it and everything the init needs beneath
  // it as descriptors, so the init never walks a host path as the guest's ids.
  //   root/      the mount point of the sandbox's "/" (on the host it stays empty)
  //   storage/   the mount point of the sandbox's storage (a bounded tmpfs; see below)
  //   egress/    allowlist: where the host's proxy listens (egress.sock)
  std::string sandbox_dir;

  // The root filesystem.
  RootKind root_kind = RootKind::host;
  std::string lower_dir;                  // directory image: the rootfs (read-only lower layer)
  // Stored images are owned by image_uid_base+k on disk; when it differs from uid_base the
  // lower layer is an idmapped mount showing them as uid_base+k (0 = not a stored image).
  std::uint32_t image_uid_base = 0;
  std::string guest_work_dir;             // the spec's work_dir (guest path)
  std::vector<std::string> hidden_paths;  // host paths covered by an empty read-only tmpfs

  // Everything the guest can write lives in ONE tmpfs of `storage_bytes` and `storage_inodes`:
  // the work storage (image host) or the overlay's upper layer (images), /tmp, /run, /dev/shm.
  std::uint64_t storage_bytes = 0;
  std::uint64_t storage_inodes = 0;
  std::uint32_t max_ptys = 64;            // devpts instance `max=`

  // Identity mapping: guest uid/gid 0 is host `uid_base` (as root: a range of `id_count`).
  std::uint32_t uid_base = 0;
  std::uint32_t gid_base = 0;
  std::uint32_t id_count = 1;
  // kSubordinateIds: the setuid helpers that write the maps (newuidmap, newgidmap).
  std::string uid_mapper;
  std::string gid_mapper;
  std::vector<NamespaceLimit> namespace_limits;

  // cgroups: the monitor writes itself into each of these cgroup.procs before it clones the
  // init, so the init is born inside them. `command_cgroup` (cgroup v2, delegated to the guest
  // root) is where the init makes one leaf per command, so a timed-out command's whole tree can
  // be killed with cgroup.kill even when it left its process group. Empty: no leaves.
  std::vector<std::string> cgroup_procs;
  std::string command_cgroup;

  // Commands.
  std::uint32_t max_commands = 16;
  std::string seccomp_filter;  // struct sock_filter[] as bytes
  std::vector<ResourceLimit> resource_limits;
  std::string hostname = "airlock";
};

std::string encode_spawn_config(const SpawnConfig& config);
bool decode_spawn_config(const std::string& bytes, SpawnConfig& config);

// Status records on descriptor 4, each a u64 length then the bytes.
// `step`: one step of the start is done (the setup-latency breakdown); `pid` then carries the
// CLOCK_MONOTONIC time it ended at, in nanoseconds (one clock for the library, the monitor and
// the init: no time namespace is made).
enum class StatusKind : std::uint32_t { init_pid = 1, ready = 2, failure = 3, step = 4 };
struct Status {
  StatusKind kind = StatusKind::failure;
  std::int64_t pid = 0;  // init_pid: the init's pid in the library's pid namespace; step: time
  std::int32_t error_number = 0;
  std::string step;  // failure: which step failed ("bind /usr", "pivot_root", …); step: its name
};
std::string encode_status(const Status& status);
bool decode_status(const std::string& bytes, Status& status);

}  // namespace airlock::linux_backend
