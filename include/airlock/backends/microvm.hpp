// The `microvm` backend: every sandbox is a virtual machine of its own — QEMU's `microvm`
// machine booting Debian's cloud kernel, with airlock's agent as the guest's /init — and QEMU
// itself runs jailed.
//
// Declares: isolation `microvm` when the guest runs under KVM, `hardened_container` under TCG
// (see "The rung" below); egress `closed` (the VM has no network device at all) and
// `allowlist` (the guest's 127.0.0.1:3128 bridged over the control port to the host's egress
// proxy); capabilities exec, run_code, files_in, files_out, files_list, files_delete,
// host_tools; os family posix; transfer ceilings from `MicrovmBackendConfig::limits`.
//
// ---- The rung ----
//   QEMU's own security policy treats only hardware virtualization (KVM) as a security
//   boundary: a bug reachable only under TCG (the software emulator) is not a security issue
//   upstream. So a guest under TCG is a guest kernel inside a jailed emulator, gVisor-class, and
//   the backend declares `hardened_container`; only a guest that really runs under KVM declares
//   `microvm`. `accel: auto` probes KVM by booting the guest under it once (not by /dev/kvm
//   existing) and falls back to TCG saying why; `accel: kvm` asked for and unusable is refused at
//   construction, never downgraded.
//
// ---- What a sandbox is made of ----
//   VM           one QEMU `microvm` per (key, kind, egress posture): the cloud kernel, an
//                initramfs holding the agent and the virtio modules, one virtio-blk disk, one
//                virtio-serial port ("airlock.ctl") and nothing else (-nodefaults: no NIC, no
//                display, no USB, no default devices).
//   disk         the image's rootfs as an ext4 image built once per (image id, disk size) —
//                the file system's size is the disk limit: a full disk is ENOSPC in the guest —
//                under a qcow2 layer per sandbox, the only file of it QEMU may write,
//                preallocated whole (reserve_disk) so a guest filling its disk drains nothing
//                more of the host's. Two sandboxes never share a writable layer.
//   snapshot     booting costs seconds under TCG, so the first acquire per (image, disk,
//                memory, vCPUs) boots a template VM to the agent's hello, saves its memory
//                and disk (QEMU migration to a file), and every later acquire restores from it
//                onto a fresh qcow2 layer over the template's disk; the host then sets the
//                guest's clock and credits fresh randomness to its kernel before any command
//                runs (two restored VMs never draw the same bytes).
//   jail         QEMU runs under airlock-microvm-jail: its own mount, pid, network, ipc, uts
//                and cgroup namespaces, a root holding only /usr, the kernel, the initramfs, the
//                template and the sandbox's own directory; an unprivileged uid with no
//                capabilities and no_new_privs; QEMU's seccomp (-sandbox on, with obsolete,
//                elevateprivileges, spawn and resourcecontrol denied); a cgroup per VM bounding
//                memory (guest RAM plus QEMU's own), pids and CPU (v1 or v2 hierarchies). Its
//                monitor (QMP) and control port are socketpairs passed as descriptors: QEMU
//                binds no socket. The jail dies with the process that made it (a leash
//                descriptor), and takes QEMU with it.
//   commands     the agent serves the kit's command channel over the port's multiplexer: each
//                command is a session leader with every capability set emptied before exec,
//                and its handler the subreaper of its tree, killed
//                whole on a timeout, an output overflow or a cancellation. A guest whose kernel
//                stops answering is killed with its VM when a kill cannot be confirmed.
//   file plane   the agent's own binary, read-only at /.airlock in the guest, walking every
//                path one component at a time with O_NOFOLLOW (as the gvisor helper does).
//   durable      <state_dir>/microvm/sandboxes/<id>/record.json: labels, instance id, owner
//     state      process. Another process lists and purges from these; a sandbox lives as long
//                as the process that made it (its jail's leash), and the next backend made on
//                the state directory reclaims what a dead owner left.
//
// ---- Hazards a host should know ----
//   - Needs root (the jail makes namespaces and cgroups), qemu-system-x86, qemu-utils,
//     e2fsprogs and linux-image-cloud-amd64 (scripts/bootstrap installs them).
//   - Under TCG the guest runs about ten times slower than the host: good for light work and
//     strong isolation, not for compilers.
//   - A sandbox does not outlive the process that made it: a host that wants sandboxes across
//     its restarts runs airlockd.
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

// How QEMU runs the guest. `automatic` probes KVM with a real boot and uses TCG when it fails.
enum class MicrovmAccel : std::uint8_t { automatic, kvm, tcg };
std::string_view to_string(MicrovmAccel accel) noexcept;

struct MicrovmBackendConfig {
  // Records, disk images, templates and the VMs' own directories. Empty: default_state_dir().
  std::filesystem::path state_dir;
  // The image store, the one the linux and gvisor backends use (host ids uid_base + guest id).
  // A disk image is built from it once per (image, disk size) with the image's own ids: the
  // guest has a kernel of its own. Empty: <state_dir>/images.
  std::filesystem::path image_store;
  std::uint32_t uid_base = 1'000'000'000;
  std::string default_image = "busybox";
  MicrovmAccel accel = MicrovmAccel::automatic;
  // Programs and guest files. Empty: qemu-system-x86_64 and qemu-img on PATH (else /usr/bin);
  // the kernel, initramfs and jail next to libairlock (build tree), else libexec/airlock.
  std::filesystem::path qemu_path;
  std::filesystem::path qemu_img_path;
  std::filesystem::path kernel_path;
  std::filesystem::path initramfs_path;
  std::filesystem::path jail_path;
  // Limits of a spec whose `resources` leave a leg unset. memory_bytes is the guest's RAM (the
  // VM's cgroup allows qemu_overhead_bytes more for QEMU itself); cpu_millis rounds up to whole
  // vCPUs; disk_bytes is the size of the guest's root file system.
  ResourceLimits default_resources{std::uint64_t{256} << 20, 512, std::nullopt,
                                   std::uint64_t{1} << 30};
  std::uint64_t qemu_overhead_bytes = std::uint64_t{256} << 20;
  // The host uid and gid QEMU runs as inside its jail (never 0; owns nothing on the host).
  std::uint32_t jail_uid = 1'999'999'999;
  // Restore every acquire from a per-shape snapshot (true), or boot each VM cold (false).
  bool snapshots = true;
  // Reserve each sandbox's whole disk (disk_bytes) on the host when it is made (true), so a
  // guest filling its disk drains nothing of the host's; false makes the layer grow as the
  // guest writes, up to disk_bytes.
  bool reserve_disk = true;
  std::uint64_t output_ceiling_bytes = std::uint64_t{256} << 20;
  std::uint32_t max_concurrent_commands = 16;
  SandboxLimits limits{TransferLimits{std::uint64_t{64} << 20, std::uint64_t{256} << 20, 1024},
                       TransferLimits{std::uint64_t{64} << 20, std::uint64_t{256} << 20, 1024}};
  // Bound on a boot (to the agent's hello) and on a restore (to its ready).
  std::chrono::milliseconds boot_timeout{60'000};
  // The KVM probe's bound on one boot (automatic and kvm only).
  std::chrono::milliseconds kvm_probe_timeout{15'000};
  EgressPolicy egress_policy;
  EgressDecisionCallback egress_decisions;
};

// Config keys (JSON, as given to make_backend("microvm", …)): state_dir, image_store,
// uid_base, default_image, accel ("auto", "kvm", "tcg"), qemu_path, qemu_img_path, kernel_path,
// initramfs_path, jail_path, memory_bytes, pids, cpu_millis, disk_bytes, qemu_overhead_bytes,
// jail_uid, snapshots, reserve_disk, output_ceiling_bytes, max_concurrent_commands, limits,
// boot_timeout_ms, kvm_probe_timeout_ms, egress_ports, egress_allow_nonglobal_for_tests. Unknown
// keys are refused naming the key.
MicrovmBackendConfig parse_microvm_backend_config(const json::Json& config, std::string_view where);

// Throws NotSupported when not root, BackendError when QEMU, the kernel, the initramfs or the
// jail is missing or the accelerator asked for cannot run the guest (naming why).
std::shared_ptr<SandboxBackend> make_microvm_backend(MicrovmBackendConfig config = {});

// Which accelerator a backend would use, and why (for `airlock check`).
struct MicrovmAccelProbe {
  MicrovmAccel chosen = MicrovmAccel::tcg;
  std::string reason;
  double probe_milliseconds = 0;
};

}  // namespace airlock
