// The `gvisor` backend: runsc (gVisor) driven directly with OCI bundles we write, on the
// `hardened_container` rung. Every guest system call is served by gVisor's user-space kernel
// (the Sentry), not by the host's; the host kernel sees only the Sentry and its file proxy (the
// Gofer), both confined by runsc's own seccomp filters and running as an unprivileged host uid.
//
// Declares: isolation `hardened_container`; egress `closed` (runsc --network=none: loopback
// only) and `allowlist` (the same, plus the egress bridge under "egress" below); capabilities exec,
// run_code, files_in, files_out, files_list, files_delete, host_tools, snapshot (filesystem+memory:
// runsc's checkpoint of the whole sandbox, restored into a new container; see "snapshots" below);
// os family posix; transfer ceilings from `GvisorBackendConfig::limits`.
//
// ---- What a sandbox is made of ----
//   container    one long-lived runsc container per (key, kind, egress posture), named from
//                sandbox_identity() and this backend's state directory, in a private runsc
//                state root (<state_dir>/gvisor/runsc). Its PID 1 is our keeper, which reaps
//                orphans and creates the spec's work dir.
//   root         the image's extracted rootfs from the image store (`images.hpp`), read-only on
//                the host, under runsc's own overlay (--overlay2=all:dir=<storage>): the guest
//                may write anywhere its permissions allow and the image is never modified.
//   storage      everything the guest writes — the root's overlay, /tmp and /dev/shm (binds of
//                an empty directory, overlaid too) — lands in runsc's file stores on ONE tmpfs
//                of resources.disk_bytes (default 1 GiB), mounted by the sandbox's shepherd in a
//                mount namespace of its own: a full store is ENOSPC in the guest, the host's
//                disk is never written, its pages are charged to the sandbox's memory cgroup
//                (disk_bytes and memory_bytes share one budget), and it goes with the sandbox.
//                /dev is runsc's own and cannot be sized: bounded by the memory limit only.
//   identity     a user namespace maps guest ids 0..65535 onto host uid_base..uid_base+65535,
//                the same map the image store owns the files with; the Sentry and Gofer run as
//                host uid_base, never as host root. No capabilities, no_new_privs, and every
//                command under a filter refusing mknod of devices (gVisor 20240729 does not
//                check CAP_MKNOD itself).
//   limits       cgroups (an absolute path under /airlock-gvisor/) for memory, pids and CPU.
//                The guest's process allowance is enforced inside gVisor (RLIMIT_NPROC: a
//                fork past it fails with EAGAIN and the sandbox serves on). The host pids
//                cgroup is only a backstop: the Sentry's own threads and per-process stubs
//                count there, and a Sentry that cannot make one dies with the whole sandbox,
//                so it is written as 8 × the allowance + `pids_overhead`.
//   exec         `runsc exec` of our guest helper, which runs the command as a session leader
//                and child subreaper, reports its exit status on a descriptor of its own, and on
//                a timeout, an output overflow or a cancellation kills the command's whole tree
//                (descendants that left its process group too) and reports when none is left —
//                that report is `kill_confirmed`. stdout and stderr are separate pipes, bounded
//                as they stream.
//   file plane   through the guest: gVisor's overlay keeps the guest's writes in the Sentry, so
//                the host cannot see or safely touch them. Every file operation is one exec of
//                the guest helper, which walks the path from "/" one component at a time with
//                O_NOFOLLOW on held descriptors: a link anywhere on the path (the working
//                directory's ancestors included), also one raced in during the operation, is
//                refused by the lookup that does the work. Contents cross as raw bytes on the
//                exec's stdin/stdout. See docs/backends/gvisor.md.
//   egress       `allowlist`: still --network=none. The backend owns ONE EgressProxy (egress.hpp,
//                started by the first allowlisted acquire) listening on a unix socket per
//                sandbox, <state_dir>/gvisor/egress/<id>/egress.sock, owned by uid_base (0600).
//                That directory is bound read-only at /.airlock-egress, runsc runs with
//                --host-uds=open so the guest may connect to it, and the keeper relays
//                127.0.0.1:3128 inside to it; HTTP(S)_PROXY point there. The listener is made at
//                create and again at every adopt (the proxy lives in the acquiring process), and
//                closed, its directory removed, at dispose and purge. A sandbox adopted by no
//                live process has no proxy: its guest's connects fail (closed, never open).
//   snapshots    the keeper's connections to the host are closed and its socket's name set
//                aside (gVisor cannot save a guest connection to a host socket), runsc saves the
//                sandbox with --leave-running into <state_dir>/gvisor/snapshots/<snap-id>/
//                (root's, 0600), and the name comes back. A resume restores it into a new
//                container of the resuming key (the snapshot's image, helper and shape; the
//                spec's egress), whose keeper dials its own socket. Every sandbox binds its egress
//                directory and runs the bridge, so a snapshot resumes under either posture.
//   durable      <state_dir>/gvisor/sandboxes/<id>/record.json (hashed labels, instance id,
//     state      image, creation time) plus `runsc list` of the private root. Another process
//                adopts, lists, disposes and purges from these alone.
//
// ---- Hazards a host should know ----
//   - Needs root (runsc creates namespaces and cgroups) and an image store owned with a shifted
//     map whose base is `uid_base` (the default when the store is made as root).
//   - What a guest stores is memory (its storage tmpfs, charged to its memory cgroup): a guest
//     that fills disk_bytes has that much less for its processes.
//   - Every exec and file operation costs one `runsc exec` (tens of milliseconds); a cold
//     acquire costs a container start (hundreds of milliseconds).
//   - One helper process per sandbox stays on the host (the shepherd: it reaps the runsc
//     processes and holds the image pin).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "airlock/backend.hpp"
#include "airlock/egress.hpp"
#include "airlock/json.hpp"
#include "airlock/records.hpp"

namespace airlock {

// The gVisor platforms this backend knows, in the order `auto` tries them.
enum class GvisorPlatform : std::uint8_t { systrap, ptrace };
std::string_view to_string(GvisorPlatform platform) noexcept;

struct GvisorBackendConfig {
  // Records, bundles, overlay file stores and runsc's own state. Empty: default_state_dir().
  std::filesystem::path state_dir;
  // The runsc binary. Empty: the first `runsc` on PATH, else /usr/bin/runsc.
  std::filesystem::path runsc_path;
  // nullopt ("auto"): probe systrap, then ptrace, once per process and runsc binary, at
  // construction. A platform named here is used as given (the first create says if it fails).
  std::optional<GvisorPlatform> platform;
  // The image store. Empty: <state_dir>/images (default_image_store_root()).
  std::filesystem::path image_store;
  // The image of a spec that names none.
  std::string default_image = "busybox";
  // Guest ids 0..65535 are host uid_base..uid_base+65535; must equal the store's ownership base.
  std::uint32_t uid_base = 1'000'000'000;
  // Limits for a spec whose `resources` leave a leg unset; nullopt = no limit on that leg
  // (disk_bytes cannot be unlimited: everything a guest writes lives in one bounded store).
  ResourceLimits default_resources{std::uint64_t{2} << 30, 512, std::nullopt,
                                   std::uint64_t{1} << 30};
  // Added to the host pids backstop: the Sentry's and Gofer's own threads count there.
  std::uint64_t pids_overhead = 256;
  // Ceiling on one exec's combined output when the caller sets none: past it the command's tree
  // is killed and ExecOutputLimitExceeded raised, so no guest can exhaust host memory.
  std::uint64_t output_ceiling_bytes = std::uint64_t{256} << 20;
  // Commands running at once per sandbox; more wait their turn (QueuedTimeout past the deadline).
  std::uint32_t max_concurrent_commands = 16;
  // Transfer ceilings this backend declares (and enforces on write_file's size).
  SandboxLimits limits{TransferLimits{std::uint64_t{64} << 20, std::uint64_t{256} << 20, 1024},
                       TransferLimits{std::uint64_t{64} << 20, std::uint64_t{256} << 20, 1024}};
  // Bound on each runsc lifecycle call (create, delete, list…), not on exec.
  std::chrono::milliseconds runsc_timeout{60'000};
  // The guest helper (airlock-gvisor-guest, static). Empty: $AIRLOCK_GVISOR_GUEST, else next to
  // libairlock (build tree), else <libdir>/../libexec/airlock/, else the install prefix.
  std::filesystem::path guest_helper_path;
  // allowlist: the proxy's policy for every allowlisted sandbox, whose host patterns are the
  // spec's egress_allow; every other field (ports, bounds, the test-only
  // allow_nonglobal_for_tests) is taken from here.
  EgressPolicy egress_policy;
  // Called (on the proxy's event-loop thread) with every egress decision of this backend's
  // sandboxes; may be empty. Decisions are logged either way.
  EgressDecisionCallback egress_decisions;
};

// Config keys (JSON, as given to make_backend("gvisor", …)): state_dir, runsc_path, platform
// ("auto", "systrap", "ptrace"), image_store, default_image, uid_base, memory_bytes, pids,
// cpu_millis (each a number, or null for no limit), disk_bytes (a number), pids_overhead,
// output_ceiling_bytes, max_concurrent_commands, limits ({files_in, files_out}),
// runsc_timeout_ms, guest_helper_path, egress_ports (default [443]),
// egress_allow_nonglobal_for_tests (CIDR ranges; WEAKENS the boundary, see egress.hpp). Unknown
// keys are refused naming the key.
GvisorBackendConfig parse_gvisor_backend_config(const json::Json& config, std::string_view where);

// Throws BackendError when runsc is missing or no platform works (naming each platform tried
// and why it failed), InvalidArgument for an inconsistent configuration (e.g. the image store's
// ownership map does not match uid_base), NotSupported when not running as root.
std::shared_ptr<SandboxBackend> make_gvisor_backend(GvisorBackendConfig config = {});

// What the platform probe found for a runsc binary: the platform that works, or every
// platform's failure. Cached per process and binary; `probe_milliseconds` is what it cost.
struct GvisorPlatformProbe {
  std::optional<GvisorPlatform> working;
  std::vector<std::string> failures;  // "systrap: <runsc's words>", …
  double probe_milliseconds = 0;
};
GvisorPlatformProbe probe_gvisor_platform(const std::filesystem::path& runsc_path,
                                          const std::filesystem::path& guest_helper_path = {});

}  // namespace airlock
