// What the library tells airlock-init when it starts a sandbox, and what airlock-init reports
// back while it does. Shared by both sides.
//
// airlock-init is started with these descriptors and nothing else open:
//   3  a memfd holding the encoded SpawnConfig
//   4  the write end of the status pipe (the library reads it until end of stream)
//   5  the control socket, already bound and listening
//   6  (optional, kHasImagePin) a descriptor holding the image store's pin on the rootfs
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace airlock::linux_backend {

inline constexpr int kConfigFd = 3;
inline constexpr int kStatusFd = 4;
inline constexpr int kControlFd = 5;
inline constexpr int kImagePinFd = 6;

enum class RootKind : std::uint32_t { host = 1, directory = 2 };

// SpawnConfig flags.
inline constexpr std::uint32_t kEgressBridge = 1u
                                               << 0;  // 127.0.0.1:3128 → /run/airlock/egress.sock
inline constexpr std::uint32_t kHasImagePin = 1u << 1;
inline constexpr std::uint32_t kMapFullRange =
    1u << 2;  // as root: guest 0..65535 → base..; else 0 → own uid

// Where a sandbox sees its host-tool socket directory (read-only: connecting to a unix socket
// needs write permission on the socket, not on its directory or mount). Outside /run/airlock so
// it never sits inside the egress bridge's bound directory.
inline constexpr const char* kHostToolsGuestDir = "/run/airlock-host-tools";

struct ResourceLimit {
  std::uint32_t resource = 0;  // RLIMIT_*
  std::uint64_t soft = 0;
  std::uint64_t hard = 0;
};

struct SpawnConfig {
  std::string instance_id;
  std::uint32_t flags = 0;
  // What every control request must carry (protocol::kSecretBytes bytes).
  std::string control_secret;

  // The root filesystem (host paths, all created by the library).
  RootKind root_kind = RootKind::host;
  std::string root_mount;                 // an empty directory that becomes the sandbox's "/"
  std::string lower_dir;                  // directory image: the rootfs (read-only lower layer)
  std::string upper_dir;                  // directory image: overlay upper (the sandbox's writes)
  std::string overlay_work_dir;           // directory image: overlay workdir
  std::string work_storage;               // host image: the directory bound at the guest work dir
  std::string guest_work_dir;             // the spec's work_dir (guest path)
  std::vector<std::string> hidden_paths;  // host paths covered by an empty read-only tmpfs
  std::string egress_dir;                 // bound at /run/airlock when kEgressBridge
  std::string host_tools_dir;             // bound read-only at kHostToolsGuestDir when not empty

  // Identity mapping: guest uid/gid 0 is host `uid_base` (root: a range of `id_count`).
  std::uint32_t uid_base = 0;
  std::uint32_t gid_base = 0;
  std::uint32_t id_count = 1;

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
enum class StatusKind : std::uint32_t { init_pid = 1, ready = 2, failure = 3 };
struct Status {
  StatusKind kind = StatusKind::failure;
  std::int64_t pid = 0;  // init_pid: the init's pid in the library's pid namespace
  std::int32_t error_number = 0;
  std::string step;  // failure: which step failed ("bind /usr", "pivot_root", …)
};
std::string encode_status(const Status& status);
bool decode_status(const std::string& bytes, Status& status);

}  // namespace airlock::linux_backend
