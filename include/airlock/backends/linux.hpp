// The `linux` backend: the embedded default sandbox. No daemon, no image download.
//
// One sandbox = one long-lived init process of ours (PID 1 in new user, pid, mount, network,
// ipc, uts and cgroup namespaces) that reaps zombies and runs the commands sent to it over a
// control socket, so a warm exec costs about one fork+exec.
//
// Declares: isolation `container`; egress `closed` (a network namespace with loopback only) and
// `allowlist` (the same, plus the egress bridge below);
// capabilities exec, run_code, files_in, files_out, files_list, files_delete, host_tools, and
// as root snapshot (filesystem: the guest's writable storage, copied while the sandbox is frozen
// and restored into a fresh sandbox; memory and processes are not kept); os family posix;
// transfer ceilings from `LinuxBackendConfig::limits`.
//
// ---- What a sandbox is made of ----
//   root filesystem  image "host": the host's /usr, /bin, /sbin, /lib*, /etc and /opt read-only
//                    and nothing else of the host (no home, /root, /var, state directory, host
//                    /tmp or /run), a minimal /dev, fresh /proc (its knobs read-only) and /sys.
//                    An image from the image store (images.hpp), or a rootfs directory named by
//                    an absolute path: an overlay over it (idmapped onto the sandbox's ids); a
//                    stored image is pinned while in use.
//   storage          everything the guest can write — the work dir's storage or the overlay's
//                    upper layer, /tmp, /run, /dev/shm — is one tmpfs of resources.disk_bytes
//                    (default 1 GiB) with an inode bound, in the sandbox's mount namespace only:
//                    no guest can fill the host's disk. It is memory of the sandbox's cgroup.
//   identity         as root, each live sandbox has host ids of its own: guest 0..65535 are
//                    uid_base + n*65536 .. +65535 (n ≥ 1, held by a flock the init keeps), and
//                    its user namespace is created by that uid, so per-user kernel pools are
//                    the sandbox's own. Unprivileged, guest root is the calling user.
//   commands         each in its own session and process group (and, with a delegable cgroup v2
//                    hierarchy, its own leaf cgroup so a timeout kills its whole tree, even
//                    descendants that left the process group); non-dumpable from clone to
//                    execve; every capability dropped, no_new_privs, a seccomp allowlist
//                    (docs/backends/linux-seccomp.md), rlimits, oom_score_adj 1000.
//   limits           cgroups (v1 or v2) for memory, pids and CPU, from the spec's `resources`
//                    over the config's defaults (pids 512 and memory 2 GiB unless configured).
//                    Unprivileged, only in cgroups delegated to the user (delegated_cgroups):
//                    without them no sandbox is started.
//   file plane       from the host side, beneath a held descriptor of the sandbox's root with
//                    openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS): a
//                    link anywhere on a path — the working directory's ancestors included — is
//                    refused by the kernel in the same lookup that does the work, so there is no
//                    window between a check and its use.
//   durable state    <state_dir>/linux/<id>/ holds the record (hashed labels, init pid and start
//                    time, cgroups, creation time, the control secret) and the control socket.
//                    Sandboxes outlive the process that created them; any process with access to
//                    the state directory adopts, lists, disposes or purges them. The init answers
//                    only requests carrying the secret. The state directory is checked before use
//                    (no planted link, no other user's directory, nothing others may write).
//   egress           `allowlist`: the sandbox's netns still has only loopback; inside it the init
//                    relays 127.0.0.1:3128 to egress.sock in <state_dir>/linux/<id>/egress/,
//                    reached through a descriptor it took before leaving the host's mount
//                    namespace. The backend owns ONE EgressProxy (egress.hpp: one event-loop
//                    thread serving every sandbox's listener, started at the first allowlisted
//                    acquire) and listens on that socket with the spec's egress_allow as the host
//                    patterns over `egress_policy` — at create, and again whenever a process
//                    adopts the live sandbox (the socket is unlinked and re-bound, so the last
//                    process to acquire serves it). The listener lives until the sandbox is
//                    disposed or the backend is destroyed; a kept sandbox whose process exits has
//                    no proxy until it is acquired again (its guest then just fails to connect).
//                    HTTPS_PROXY/HTTP_PROXY name the bridge; the proxy speaks CONNECT only.
//
// ---- Hazards a host should know ----
//   - image "host" shows the guest every file under the shown directories readable by
//     "others". Keep secrets out of /usr, /etc and /opt, or use an image.
//   - disk_bytes and memory_bytes share one budget: what a guest stores is memory.
//   - A memory limit under which one sandbox could hold half of the host's file table (in files
//     kept open by mappings) is refused: raise fs.file-max, as systemd does.
//   - Not root: no sandbox without delegated cgroups; guest root is the calling user, and the
//     user's sandboxes share that user's per-user kernel pools.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "airlock/backend.hpp"
#include "airlock/egress.hpp"
#include "airlock/json.hpp"
#include "airlock/records.hpp"

namespace airlock {

// The warm pool (off unless `size` > 0): sandboxes built ahead of need, per shape — image, work
// dir, limits, egress posture — so that a cold acquire of a shape seen before claims a ready
// sandbox instead of building one. A pooled sandbox has never been handed out (it is claimed
// once, by one conversation, and never returned), appears in list_sandboxes() with state
// "pooled", counts against the host like any sandbox, and is reclaimed by purge_all() and,
// after its process died, by the next backend on the state directory.
struct LinuxPoolConfig {
  // Ready sandboxes kept per shape; 0 turns the pool off.
  std::uint32_t size = 0;
  // A shape not acquired for this long is forgotten, its ready sandboxes discarded.
  std::chrono::milliseconds idle_timeout{5 * 60 * 1000};
  // What all ready sandboxes may hold in memory together, as their cgroups count it (init,
  // page tables, empty storage): no member is built past it.
  std::uint64_t memory_ceiling_bytes = std::uint64_t{256} << 20;
  // Build the default shape (default image and limits, the seeds' default work dir, egress
  // closed) at construction instead of at its first acquire.
  bool prewarm = false;
  // At most this many shapes are kept warm; the least recently acquired makes room.
  std::uint32_t max_shapes = 8;
};

// One sandbox's start, step by step (LinuxBackendConfig::setup_observer).
struct LinuxSetupTimings {
  std::string instance_id;
  bool pooled = false;   // built by the warm pool, off every acquire's path
  bool standby = false;  // started by claiming the standby monitor
  // In order, each step's own duration: "prepare" (the library: host id range, record,
  // cgroups, state directory, control socket), then the monitor's and the init's — "spawn"
  // (exec of airlock-init and its config; a standby's claim), "cgroup joins", "root mounts",
  // "namespaces (clone)", "id maps", "proc, sys, pivot_root", "init ready" (loopback, hostname,
  // signals, until the library reads the report) — then "record" (the library's last write).
  // The seccomp filter is compiled once per backend, inside the first "prepare", and installed
  // by every command as it starts.
  std::vector<std::pair<std::string, std::chrono::nanoseconds>> steps;
};
using LinuxSetupObserver = std::function<void(const LinuxSetupTimings&)>;

struct LinuxBackendConfig {
  // Where records, control sockets and sandbox storage live. Empty: $AIRLOCK_STATE_DIR, else
  // /var/lib/airlock as root, else $XDG_STATE_HOME/airlock (or ~/.local/state/airlock).
  std::filesystem::path state_dir;
  // The image of a spec that names none: "host", an image store reference, or an absolute path
  // to a rootfs directory.
  std::string default_image = "host";
  // The image store references resolve in. Empty: <state_dir>/images (where `airlock image`
  // imports by default).
  std::filesystem::path image_store;
  // As root: guest ids 0..65535 map to uid_base..uid_base+65535 (same base for gids).
  std::uint32_t uid_base = 1'000'000'000;
  // Limits for a spec whose `resources` leave a leg unset. nullopt = no limit on that leg
  // (disk_bytes cannot be unlimited: everything a guest writes lives in one bounded store).
  ResourceLimits default_resources{std::uint64_t{2} << 30, 512, std::nullopt,
                                   std::uint64_t{1} << 30};
  // Cgroup directories (one per hierarchy: v1 memory and pids, or one v2 directory with both
  // controllers) in which this backend makes its sandboxes' cgroups, instead of
  // <hierarchy>/airlock. Required when not root: an unprivileged backend starts no sandbox
  // without them (nothing else would bound a guest's memory and processes).
  std::vector<std::string> delegated_cgroups;
  // Not root: run the guest on the user's subordinate ids (/etc/subuid and /etc/subgid, 65536
  // of each, mapped by newuidmap/newgidmap) when the host has them, so that the guest's root is
  // not the calling user. false keeps guest root = the calling user.
  bool subordinate_ids = true;
  // Ceiling on the ptys one sandbox may hold (its devpts instance's `max=`): the kernel's pool
  // (kernel.pty.max, less the host's reserve) is shared by every sandbox.
  std::uint32_t max_ptys = 64;
  // Commands running at once per sandbox; more wait their turn (and a deadline that passes
  // while waiting raises QueuedTimeout). run_code is additionally one program at a time.
  std::uint32_t max_concurrent_commands = 16;
  // The airlock-init helper. Empty: $AIRLOCK_INIT, else next to libairlock (build tree), else
  // <libdir>/../libexec/airlock/airlock-init, else the configured install prefix.
  std::filesystem::path init_path;
  // Ceiling on one exec's combined output when the caller sets no max_output_bytes: past it the
  // command is killed and ExecOutputLimitExceeded raised, so no guest can exhaust host memory.
  std::uint64_t output_ceiling_bytes = std::uint64_t{256} << 20;
  // Transfer ceilings this backend declares (and enforces on write_file's size).
  SandboxLimits limits{TransferLimits{std::uint64_t{256} << 20, std::uint64_t{1} << 30, 4096},
                       TransferLimits{std::uint64_t{256} << 20, std::uint64_t{1} << 30, 4096}};
  // How long acquire waits for a new sandbox's init to report ready.
  std::chrono::milliseconds start_timeout{30'000};
  // Per-command cgroup v2 leaves (when a v2 hierarchy can be delegated): a timeout or a kill then
  // reaches every descendant of the command, not only its process group.
  bool per_command_cgroups = true;
  // Keep one airlock-init started ahead of need (spawned, inside a fresh instance's cgroups),
  // from the first acquire on, so later cold acquires skip the spawn and the cgroup migration.
  // Costs one idle process and its empty cgroups per backend.
  bool standby = true;
  // Sandboxes built ahead of need (off by default; see LinuxPoolConfig).
  LinuxPoolConfig pool;
  // The proxy policy of every `allowlist` sandbox: its allowed_hosts are replaced by the spec's
  // egress_allow; every other field (ports, bounds, the test-only allow_nonglobal_for_tests)
  // applies as set here. Not part of a sandbox's identity: a process that adopts a live sandbox
  // serves it with ITS config's policy.
  EgressPolicy egress_policy;
  // Called with the step-by-step timings of every sandbox this backend starts (on the thread
  // that started it: an acquire's, or the warm pool's). Must be quick and must not throw.
  LinuxSetupObserver setup_observer;
  // Called (on the proxy's event-loop thread) with every egress decision of this backend's
  // sandboxes, after it is logged. Must be quick.
  EgressDecisionCallback egress_decisions;
};

// Config keys (JSON, as given to make_backend("linux", …)): state_dir, default_image,
// image_store, uid_base,
// memory_bytes, pids, cpu_millis (each a number, or null for no limit), max_concurrent_commands,
// init_path, output_ceiling_bytes, start_timeout_ms, per_command_cgroups, standby, pool ({size,
// idle_timeout_ms, memory_ceiling_bytes, prewarm, max_shapes}), limits
// ({files_in, files_out}), egress_ports (the ports an allowlisted sandbox may reach, default
// [443]), egress_allow_nonglobal_for_tests (CIDR ranges; WEAKENS the boundary, see egress.hpp).
// Unknown keys are refused naming the key.
LinuxBackendConfig parse_linux_backend_config(const json::Json& config, std::string_view where);

std::shared_ptr<SandboxBackend> make_linux_backend(LinuxBackendConfig config = {});

// The state directory a default-configured backend uses (see LinuxBackendConfig::state_dir).
std::filesystem::path default_linux_state_dir();

}  // namespace airlock
