// The `docker` backend: sandboxes as containers of a Docker Engine (or of Podman's
// Docker-compatible service), driven over the Engine API with libcurl — never through the
// docker CLI.
//
// One sandbox = one container named "airlock-" + sandbox_identity(key, kind, egress posture),
// labelled with sandbox_labels() (hashed values, never truncated) plus airlock.backend=docker and
// airlock.role=sandbox. The container runs a keeper (`sleep infinity`) under the engine's init
// (`HostConfig.Init`: docker-init / catatonit as PID 1, so orphans are reaped); every `exec` is
// an Engine API exec into it.
//
// What it enforces, and how:
//   - closed egress: NetworkMode "none" (loopback only);
//   - allowlist egress: NOT served yet. The planned topology (an `--internal` network per
//     sandbox whose only other member is a proxy container running airlock's CONNECT proxy)
//     needs airlock-egress-proxy, which is not in this tree; until it is, a configured
//     `proxy_image` is refused with NotSupported and only `closed` is declared;
//   - CapDrop ALL, no-new-privileges, a pids limit (512 by default), optional memory / CPU limits
//     (the spec's `resources` win over the configuration), optionally a read-only root;
//   - no bind mount of any host path and never the engine's socket.
//
// File plane over the archive endpoints (or the host plane; see `file_plane`). A write is a tar PUT
// to the deepest existing ancestor (missing parents travel as directory entries of the same tar);
// stat is the engine's no-follow path stat (X-Docker-Container-Path-Stat); a read refuses links,
// non-regular entries and anything larger than `max_bytes` from the response's stat and tar header
// before its body is read; a listing reads tar headers only; a removal is an exec of `rm -f` / `rm
// -rf` (which never follows a link). Every path method runs the shared confinement walk of
// paths.hpp first.
//
// Hazards a host should know:
//   - A timed-out, cancelled, or output-refused exec RESTARTS the container: the Engine API has
//     no way to kill one exec's process tree, and a restart kills every process in the
//     container's pid namespace — certain, and the files survive. That includes the commands of
//     other calls running in the same sandbox at that moment, and background programs. The
//     error's kill_confirmed says whether it was confirmed (the container is removed when a
//     restart fails).
//   - File operations take the host plane when the engine is local (see `file_plane`): race-free
//     resolution with openat2 on the container's root. Over the archive endpoints (remote
//     engines, gVisor), the walk and the operation are separate requests, so a guest that swaps
//     a checked directory for a link between them wins the race (the seeds' stated residual);
//     what the engine resolves stays inside the container's root either way.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "airlock/backend.hpp"

namespace airlock::docker {

// The Engine API versions this client speaks. The negotiated version is
// min(engine's ApiVersion, api_version_max); an engine below kMinimumApiVersion is refused.
inline constexpr const char* kMinimumApiVersion = "1.40";
inline constexpr const char* kMaximumApiVersion = "1.41";

// The least a sandbox's storage may be (config `disk_bytes`, spec resources.disk_bytes).
inline constexpr std::uint64_t kMinimumDiskBytes = 16ull << 20;

// The image `airlock image build busybox --docker` imports into the engine.
inline constexpr const char* kBuiltDefaultImage = "airlock/busybox:latest";

struct DockerConfig {
  // "unix:///var/run/docker.sock" or "tcp://HOST:PORT". Empty: $DOCKER_HOST, else the default
  // socket.
  std::string host;
  // Never negotiate above this ("1.NN").
  std::string api_version_max = kMaximumApiVersion;
  // TCP only: TLS to the engine, optionally with a client certificate. `tls_verify` = false skips
  // server verification — a weakening, named so it can be found.
  bool tls = false;
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  bool tls_verify = true;

  // Used when a spec names neither image nor image_id. The default is the tag
  // `airlock image build busybox --docker` gives the image it builds from the host's
  // busybox-static; it is never pulled (a registry could hold anything under that name), and
  // when it is missing the refusal names that command.
  std::string default_image = kBuiltDefaultImage;
  bool pull_missing_images = true;
  std::chrono::milliseconds request_timeout{60'000};  // lifecycle and file-plane requests
  std::chrono::milliseconds pull_timeout{600'000};

  std::uint64_t pids_limit = 512;
  std::optional<std::uint64_t> memory_bytes;  // also the memory+swap ceiling (no swap)
  std::optional<std::uint64_t> cpu_millis;    // 1000 = one CPU
  // The image's root read-only: the bounded storage below is then all a guest can write. With
  // false the root is writable on the engine's own storage, unbounded, and a spec's
  // resources.disk_bytes is refused.
  bool read_only_rootfs = true;
  // What a guest may store in total when the spec names no resources.disk_bytes: the work dir's
  // place (its parent directory), /tmp, /dev/shm, and on Podman /run and /var/tmp are tmpfs
  // mounts sharing it (a half, a quarter, an eighth, a sixteenth each). Memory, charged to the
  // container's memory cgroup.
  std::uint64_t disk_bytes = 1ull << 30;
  // ptys from the engine's devpts. No engine lets a container's devpts have a ceiling (max=),
  // and every devpts but the host's shares one kernel pool beyond the host's reserve, so one
  // sandbox can take every pty the others would get; false hides /dev/pts (no ptys at all)
  // for hosts that would rather lose ptys than share them.
  bool ptys = true;
  bool init = true;                                // the engine's init as PID 1 (reaps orphans)
  std::map<std::string, std::string> environment;  // container environment

  // An engine runtime name (e.g. "runsc"); the engine must list it, and every sandbox is checked
  // to run under it. The declared rung stays os_process (see isolation()).
  std::string runtime;

  // Declare run_code and run it as `<interpreter> -` with the code on stdin (e.g. "python3").
  // Empty: run_code is not declared. The operator vouches that the images used have it.
  std::string run_code_interpreter;

  // Allowlist egress: with `proxy_image` set, each allowlist sandbox sits alone on an internal
  // network whose only other member is a container of this image running
  // /usr/local/bin/airlock-egress-proxy with the spec's allowlist (scripts/engines/binary-image
  // builds one offline). `proxy_outbound_network` (an existing, non-internal network) is the
  // proxy's way out; acquire waits up to `proxy_ready_timeout` for its readiness line.
  std::string proxy_image;
  std::string proxy_outbound_network;
  std::chrono::milliseconds proxy_ready_timeout{10'000};
  // Test-only weakening, passed to the proxy: CIDR ranges of non-global addresses it may reach.
  std::vector<std::string> proxy_allow_nonglobal_for_tests;
  std::vector<std::uint16_t> proxy_allowed_ports;  // empty: the proxy's default (443)

  // Where stat, read, write, listing and removal act:
  //   "auto"    the host plane when it applies (see below), the archive endpoints otherwise;
  //   "host"    the host plane or a BackendError saying why it does not apply;
  //   "archive" the Engine API's archive endpoints (and an exec of rm for removal) always.
  // The host plane reaches the container's root from this host through its init's
  // /proc/<pid>/root with openat2(RESOLVE_NO_SYMLINKS): one kernel resolution per operation, so
  // a guest racing a link into a checked path gets a refusal. It applies to a local engine whose
  // containers run in this pid and user namespace under a runc-family runtime. The archive
  // endpoints resolve each request afresh, so a guest that swaps a checked directory for a link
  // between the walk and the operation wins (the seeds' stated residual), and a hard link
  // reads as the regular file it names.
  std::string file_plane = "auto";

  // The backend's own ceiling on one exec's output when the caller sets none; past it the exec
  // is refused (ExecOutputLimitExceeded), never buffered without bound.
  std::uint64_t max_exec_output_bytes = 256ull << 20;
  // A directory listing streams the directory's whole archive; past this many bytes it is refused.
  std::uint64_t list_max_archive_bytes = 256ull << 20;
};

// The backend. Thread-safe; cheap to construct (the engine is contacted on first use).
class DockerBackend : public SandboxBackend {
 public:
  explicit DockerBackend(DockerConfig config);
  ~DockerBackend() override;

  std::string name() const override { return "docker"; }
  // os_process, under every runtime: the isolation suite proves a separate process sharing
  // the kernel, not a container (under runc the guest shares host root's per-user kernel pools;
  // under runsc it can stall or end its own sandbox before the suite proves the rest). See
  // docs/backends/docker.md, "What it declares".
  Isolation isolation() const override;
  std::optional<EgressSet> egress_modes() const override;
  std::optional<CapabilitySet> capabilities() const override;
  std::optional<SandboxLimits> limits() const override;
  std::optional<OsFamilySet> os_families() const override;

  std::shared_ptr<Sandbox> acquire(const SandboxKey& key, const SandboxSpec& spec) override;
  void dispose(const SandboxKey& key) noexcept override;
  bool dispose_kind(const SandboxKey& key, std::string_view kind,
                    std::optional<std::string_view> instance_id) noexcept override;
  int dispose_scope(std::string_view scope,
                    std::optional<std::string_view> thread_id) noexcept override;
  std::vector<SandboxRecord> list_sandboxes() override;
  int purge_all() noexcept override;

  // Snapshots of the storage places (filesystem), kept on the engine as labelled images, when
  // the root is read-only (the places then hold everything a guest writes) and the runtime is
  // runc. See docs/backends/docker.md, "Snapshots".
  std::optional<SnapshotContent> snapshot_content() const override;
  std::shared_ptr<Sandbox> acquire_from_snapshot(const SandboxKey& key, const SandboxSpec& spec,
                                                 const SnapshotRecord& snapshot) override;
  std::optional<SnapshotRecord> find_snapshot(std::string_view id) override;
  std::vector<SnapshotRecord> list_snapshots() override;
  bool delete_snapshot(std::string_view id) noexcept override;

  // The archive endpoints' path race (see `file_plane`), unless the host plane is required.
  std::vector<std::string> stated_residuals() const override;

  // The negotiated Engine API version ("1.41"); contacts the engine if not done yet.
  std::string api_version() const;
  const DockerConfig& config() const noexcept;

  // The container name a (key, kind, egress posture) gets: "airlock-" + 24 hex digits.
  static std::string container_name(const SandboxKey& key, const SandboxSpec& spec);

 private:
  struct State;
  struct Resume;
  std::shared_ptr<Sandbox> obtain(const SandboxKey& key, const SandboxSpec& spec,
                                  const Resume* from);
  std::unique_ptr<State> state_;
};

// Parse the factory configuration (the JSON object of `{"type": "docker", …}` without "type").
// Unknown keys and ill-typed values are refused with an InvalidArgument naming `where`.key.
DockerConfig parse_docker_config(const nlohmann::json& config, std::string_view where);

}  // namespace airlock::docker
