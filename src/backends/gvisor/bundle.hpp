// The OCI bundle of one sandbox: config.json written by us, the rootfs the image store's.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "airlock/json.hpp"

namespace airlock::gvisor_backend {

struct BundlePlan {
  std::filesystem::path rootfs;            // the image's extracted rootfs (absolute, not a link)
  std::filesystem::path helper_directory;  // host directory bound read-only at /.airlock
  // An empty host directory, the lower layer of /tmp and /dev/shm: both are binds of it that
  // runsc overlays (--overlay2=all:…), so what the guest writes there lands in the sandbox's
  // bounded storage with the root's writes, never in this directory.
  std::filesystem::path empty_directory;
  std::string cgroups_path;                // absolute: "/airlock-gvisor/<container id>"
  std::string work_dir;                    // created by the keeper
  std::uint32_t uid_base = 0;
  std::vector<std::string> environment;  // "KEY=value", the image's first, then ours
  std::optional<std::uint64_t> memory_bytes;
  // The guest's process allowance, enforced inside gVisor as RLIMIT_NPROC (the Sentry refuses
  // the fork with EAGAIN), and the host pids cgroup as a backstop sized for the Sentry's own
  // threads and its per-process stubs: hitting that one makes the Sentry fail as a whole.
  std::optional<std::uint64_t> guest_pids;
  std::optional<std::uint64_t> host_pids;
  std::optional<std::uint64_t> cpu_millis;
  // The host directory holding the proxy's socket under allowlist (empty under closed), bound
  // read-only at kEgressGuestDirectory, and the keeper's bridge on its loopback port inside.
  // Every sandbox has both, whatever its posture: a snapshot restores only the mounts it was
  // saved with, and one saved closed may be resumed allowlisted.
  std::optional<std::filesystem::path> egress_directory;
  // The host directory bound read-only at kControlGuestDirectory: the keeper socket alone. Read-
  // only, so no guest process can replace the socket with a listener of its own and catch the
  // keeper's token.
  std::filesystem::path control_directory;
};

inline constexpr const char* kEgressGuestDirectory = "/.airlock-egress";
// The command channel's directory in the guest (the host's StateStore::control_dir) and the
// keeper socket in it.
inline constexpr const char* kControlGuestDirectory = "/.airlock-control";
inline constexpr const char* kKeeperSocketName = "keeper.sock";
inline constexpr const char* kEgressSocketName = "egress.sock";
inline constexpr int kEgressBridgePort = 3128;

// What every command of an allowlisted sandbox finds in its environment: HTTP(S)_PROXY (both
// cases) at the keeper's bridge, and NO_PROXY naming loopback.
std::vector<std::pair<std::string, std::string>> egress_proxy_environment();

// The config.json document for `plan`.
json::Json bundle_config(const BundlePlan& plan);

// Writes config.json into `bundle_directory` (created 0700), atomically.
void write_bundle(const std::filesystem::path& bundle_directory, const BundlePlan& plan);

}  // namespace airlock::gvisor_backend
