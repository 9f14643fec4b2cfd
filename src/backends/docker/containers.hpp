// Container, network and image calls the backend's lifecycle is made of. Each names the
// request in its error detail and keeps the model-facing message free of engine words.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backends/docker/engine_client.hpp"

namespace airlock::docker {

inline constexpr const char* kBackendLabel = "airlock.backend";
inline constexpr const char* kRoleLabel = "airlock.role";
inline constexpr const char* kRoleSandbox = "sandbox";
inline constexpr const char* kRoleProxy = "proxy";
inline constexpr const char* kRoleNetwork = "network";
inline constexpr const char* kRoleStorage = "storage";
// A snapshot's image, and the never-started container a resume reads it through.
inline constexpr const char* kRoleSnapshot = "snapshot";
inline constexpr const char* kRoleSnapshotReader = "snapshot-reader";
inline constexpr const char* kSnapshotLabel = "airlock.snapshot";
// A sandbox whose keeper can stop and continue every other process (kKeeperScript's USR2 and
// HUP): what a snapshot on Podman needs, whose archive endpoints cannot read a frozen one.
inline constexpr const char* kKeeperLabel = "airlock.keeper";
inline constexpr const char* kKeeperVersion = "2";

struct ContainerInfo {
  std::string id;
  std::string name;  // without the leading '/'
  bool running = false;
  bool paused = false;  // inspect only
  int pid = 0;          // inspect only: the init's pid in the engine's pid namespace
  std::string runtime;  // inspect only
  std::string image_id;  // inspect only: the image the container was made from ("sha256:…")
  std::string state;    // the engine's word ("running", "exited", …)
  std::map<std::string, std::string> labels;
  std::chrono::system_clock::time_point created_at{};
};

// Which engine answers: Docker Engine, or Podman's Docker-compatible service (the only one whose
// GET /info carries BuildahVersion). They take some hardening in different words.
enum class EngineFlavour { docker, podman };

// A bounded writable place of a sandbox: a tmpfs of `bytes` (and `inodes`, where the engine lets
// them be bounded) at `target`.
struct StorageMount {
  std::string target;
  std::uint64_t bytes = 0;
  std::uint64_t inodes = 0;
  std::string mode = "1777";
};

// Where a sandbox may write, made from its work dir and its storage budget (disk_bytes):
//   - the work dir's place: its parent directory (so the work dir and its neighbours share one
//     filesystem, as in an image; the conformance suites plant `<work>-outside` there), or the
//     work dir itself when the parent is `/` or in a system directory (/usr, /etc, /opt, /var, …),
//     or the standard place it lies in — half the budget;
//   - /tmp a quarter, /dev/shm an eighth, and on Podman /run and /var/tmp a sixteenth each
//     (Podman mounts unbounded ones there on a read-only root unless they are given).
// The places never add up to more than the budget. A work dir of `/` or under /proc, /sys or
// /dev gets no place (it stays read-only, or the kernel's): `work_base` is empty then.
struct StorageLayout {
  std::vector<StorageMount> mounts;
  std::uint64_t shm_bytes = 0;
  std::string work_base;                      // the mount the work dir lies in; may be empty
  std::vector<std::string> work_directories;  // to make beneath work_base, parents first
};
StorageLayout plan_storage(const std::string& work_dir, std::uint64_t disk_bytes,
                           EngineFlavour flavour);

// The keeper a sandbox container runs as its main process (under the engine's init, when
// `init`): it blocks reading a FIFO it holds open both ways (made in /tmp, the storage, and
// unlinked at once), and on SIGUSR1 kills every other process in the container (`kill -9 -1`
// spares only the caller and the pid namespace's init), so a forced stop ends every command
// without a restart, which would empty the bounded storage. On SIGUSR2 it stops every other
// process, and on SIGHUP continues them: a snapshot's quiescence where the engine cannot read a
// frozen container (Podman). It never forks after its start: a shell that cannot fork (the guest
// holds every pid) exits, and its container with it.
inline constexpr const char* kKeeperScript =
    "f=/tmp/.airlock-keeper-$$; mkfifo \"$f\" && exec 3<>\"$f\" && rm -f \"$f\" || exit 1; "
    "trap 'kill -9 -1' USR1; trap 'kill -STOP -1' USR2; trap 'kill -CONT -1' HUP; "
    "while :; do read -r _ <&3; done";

// What a sandbox (or proxy) container is made from.
struct ContainerRequest {
  std::string name;
  std::string image;
  std::vector<std::string> entrypoint;  // replaces the image's entrypoint; no Cmd is passed
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> environment;
  std::string network_mode = "none";
  std::optional<std::string> network_alias;  // on a user-defined network only
  std::uint64_t pids_limit = 512;
  std::optional<std::uint64_t> memory_bytes;
  std::optional<std::uint64_t> cpu_millis;
  bool read_only_rootfs = false;
  bool init = true;
  std::string runtime;
  EngineFlavour flavour = EngineFlavour::docker;
  // HostConfig.SecurityOpt "seccomp=" + this: the profile itself on Docker, a file holding it on
  // Podman. Empty: the engine's default profile.
  std::string seccomp;
  // A sandbox (not a proxy): /proc/sys, /sys/fs/cgroup and /dev read-only (Docker) or the cgroup
  // tree masked (Podman), /dev/pts hidden unless `ptys`, no container log (PID 1's output would
  // land on the engine's disk), and `storage` as the only writable places beside /dev/shm.
  bool sandbox = false;
  bool ptys = true;
  std::vector<StorageMount> storage;
  std::optional<std::uint64_t> shm_bytes;
  std::map<std::string, std::string> storage_labels;  // Docker: the storage volumes' labels
};

// The create body: CapDrop ALL, no-new-privileges, the limits, no binds, no published ports;
// for a sandbox, the hardening above.
std::string container_create_body(const ContainerRequest& request);

// Label filter for /containers/json and /networks: {"label": ["k=v", …]}, URL-encoded.
std::string label_filter(const std::map<std::string, std::string>& labels);

std::optional<ContainerInfo> inspect_container(EngineClient& client, const std::string& name_or_id);
// Creates; returns nullopt when the name is taken (409) so the caller can adopt.
std::optional<std::string> create_container(EngineClient& client, const ContainerRequest& request);
void start_container(EngineClient& client, const std::string& id);
// SIGKILL then DELETE ?force=1. True when the container is confirmed gone (404 counts). Never
// throws.
bool remove_container(EngineClient& client, const std::string& name_or_id) noexcept;
std::vector<ContainerInfo> list_containers(EngineClient& client,
                                           const std::map<std::string, std::string>& labels);

struct NetworkInfo {
  std::string id;
  std::string name;
  std::map<std::string, std::string> labels;
};
// Creates an internal (or not) bridge network; an existing one of that name is adopted.
std::string ensure_network(EngineClient& client, const std::string& name, bool internal,
                           const std::map<std::string, std::string>& labels);
void connect_network(EngineClient& client, const std::string& network, const std::string& container,
                     const std::vector<std::string>& aliases);
std::vector<NetworkInfo> list_networks(EngineClient& client,
                                       const std::map<std::string, std::string>& labels);
// True when gone (404 counts). Never throws.
bool remove_network(EngineClient& client, const std::string& name_or_id) noexcept;

// Present locally, or pulled when `pull` (bounded by `pull_timeout`). Throws InvalidArgument
// when the image is absent and pulling is off, BackendError when the pull fails.
void ensure_image(EngineClient& client, const std::string& image, bool pull,
                  std::chrono::milliseconds pull_timeout);

// What GET /info says about the engine: its flavour, and the runtimes it lists and lets a create
// choose (name → binary path and arguments). No runtimes for Podman's service, which lists
// runtimes it then ignores.
struct EngineRuntime {
  std::string path;
  std::vector<std::string> arguments;
};
struct EngineInfo {
  EngineFlavour flavour = EngineFlavour::docker;
  std::map<std::string, EngineRuntime> runtimes;
};
EngineInfo engine_info(EngineClient& client);

// Makes `directories` (relative to `base`, parents first) in a running container, through the
// archive endpoint; existing ones are kept.
void make_directories(EngineClient& client, const std::string& id, const std::string& base,
                      const std::vector<std::string>& directories);

// The processes of a running container (GET /containers/{id}/top); nullopt when the engine
// could not list them.
std::optional<std::size_t> count_processes(EngineClient& client, const std::string& id);

// Freeze and thaw every process of a container (the engine's cgroup freezer).
void pause_container(EngineClient& client, const std::string& id);
void unpause_container(EngineClient& client, const std::string& id) noexcept;
// Sends `signal` ("SIGUSR2", …) to the container's PID 1.
void signal_container(EngineClient& client, const std::string& id, const std::string& signal);
// The state letter ("S", "T", "Z", …) of each process of a running container; nullopt when the
// engine could not say. Docker runs the host's ps; Podman reads the processes itself.
std::optional<std::vector<std::string>> process_states(EngineClient& client, const std::string& id,
                                                       EngineFlavour flavour);

struct ImageInfo {
  std::string id;
  std::map<std::string, std::string> labels;
};
// Images carrying `labels` (a label filter).
std::vector<ImageInfo> list_images(EngineClient& client,
                                   const std::map<std::string, std::string>& labels);
// One image's id and labels; nullopt when the engine has none by that name or id.
std::optional<ImageInfo> inspect_image(EngineClient& client, const std::string& name_or_id);
// An image of one layer holding the tar `fd` holds (`bytes` long), tagged `reference` and
// labelled `labels`; returns its id.
std::string import_image(EngineClient& client, int fd, std::uint64_t bytes,
                         const std::string& reference,
                         const std::map<std::string, std::string>& labels);
// True when gone (404 counts). Never throws.
bool remove_image(EngineClient& client, const std::string& id) noexcept;

// Storage volumes (Docker) carrying `labels`; removed, never throwing.
void remove_volumes(EngineClient& client,
                    const std::map<std::string, std::string>& labels) noexcept;

}  // namespace airlock::docker
