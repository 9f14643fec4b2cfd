// The microvm backend's SandboxBackend: disk images and snapshot templates per shape, one
// jailed VM per (key, kind, egress posture), durable records for other processes.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "airlock/backends/microvm.hpp"
#include "airlock/images.hpp"
#include "backends/kit/cgroups.hpp"
#include "backends/kit/channel_sandbox.hpp"
#include "backends/kit/egress_listeners.hpp"
#include "backends/kit/identity_cache.hpp"
#include "backends/microvm/vm.hpp"

namespace airlock::microvm_backend {

struct Record {
  std::string id;
  std::string instance_id;
  std::string kind;
  std::map<std::string, std::string> labels;
  std::string egress_posture;
  std::string image;
  std::string work_dir;
  std::int64_t created_at_ms = 0;
  std::int64_t owner_pid = 0;
  std::string owner_start;  // the owner's start time (/proc/<pid>/stat), against pid reuse
};

// What a VM is made of, besides its own layer: the image, the disk size, the RAM and vCPUs a
// memory image was saved with (a restore needs the same), and the files it restores from.
struct Shape {
  std::string image_id;
  std::filesystem::path rootfs;
  std::uint64_t disk_bytes = 0;
  std::uint64_t memory_bytes = 0;
  unsigned vcpus = 1;
  // Hashed, a directory name; `guest` names the kernel, initramfs and QEMU it runs on.
  std::string key(const std::string& guest) const;
};

// A VM this process made, and what it holds on the host.
struct Instance {
  Record record;
  Shape shape;
  // What its disk layer is a copy-on-write layer over: the template's disk.qcow2, or the
  // image's raw disk when VMs boot cold. A snapshot's disk is a layer over the same.
  std::filesystem::path base_disk;
  std::string base_format;  // "qcow2" or "raw"
  std::unique_ptr<VirtualMachine> vm;
  std::mutex mutex;  // guards vm's teardown against a concurrent command's kill, and snapshots
};

// What a sandbox needs to save a snapshot of itself, shared with the backend that made it.
struct SnapshotPlace {
  std::filesystem::path directory;  // <state>/microvm/snapshots
  std::filesystem::path qemu_img;
  std::string guest_identity;
  std::chrono::milliseconds timeout{60'000};
};

class MicrovmSandbox final : public backend_kit::ChannelSandbox {
 public:
  MicrovmSandbox(std::shared_ptr<Instance> instance, backend_kit::ChannelSandboxSettings settings,
                 SandboxKey key, std::shared_ptr<const SnapshotPlace> snapshots);
  ExecResult exec(const Command& command, const ExecOptions& options) override;
  ExecResult run_code(std::string_view code, Milliseconds timeout) override;
  SnapshotRecord snapshot() override;
  const std::shared_ptr<Instance>& instance() const noexcept { return instance_; }

 private:
  template <typename Call>
  ExecResult guarded(Call call);
  std::shared_ptr<Instance> instance_;
  std::shared_ptr<const SnapshotPlace> snapshots_;
};

class MicrovmBackend final : public SandboxBackend {
 public:
  explicit MicrovmBackend(MicrovmBackendConfig config);
  ~MicrovmBackend() override;

  std::string name() const override { return "microvm"; }
  Isolation isolation() const override;
  std::optional<EgressSet> egress_modes() const override;
  std::optional<CapabilitySet> capabilities() const override;
  std::optional<SandboxLimits> limits() const override { return config_.limits; }
  std::optional<OsFamilySet> os_families() const override;
  std::vector<std::string> stated_residuals() const override;

  std::shared_ptr<Sandbox> acquire(const SandboxKey& key, const SandboxSpec& spec) override;
  void dispose(const SandboxKey& key) noexcept override;
  bool dispose_kind(const SandboxKey& key, std::string_view kind,
                    std::optional<std::string_view> instance_id) noexcept override;
  int dispose_scope(std::string_view scope,
                    std::optional<std::string_view> thread_id) noexcept override;
  std::vector<SandboxRecord> list_sandboxes() override;
  int purge_all() noexcept override;

  std::optional<SnapshotContent> snapshot_content() const override {
    return SnapshotContent::filesystem_and_memory;
  }
  std::shared_ptr<Sandbox> acquire_from_snapshot(const SandboxKey& key, const SandboxSpec& spec,
                                                 const SnapshotRecord& snapshot) override;
  std::optional<SnapshotRecord> find_snapshot(std::string_view id) override;
  std::vector<SnapshotRecord> list_snapshots() override;
  bool delete_snapshot(std::string_view id) noexcept override;

  const MicrovmAccelProbe& accel() const noexcept { return accel_; }

 private:
  std::filesystem::path base() const { return state_ / "microvm"; }
  std::filesystem::path sandbox_dir(const std::string& id) const;
  std::optional<Record> read_record(const std::string& id) const;
  void write_record(const Record& record) const;
  std::vector<std::string> ids() const;
  bool owner_alive(const Record& record) const;

  std::filesystem::path ensure_disk_image(const Shape& shape);
  std::filesystem::path ensure_template(const Shape& shape, const std::filesystem::path& disk_image);
  // A VM's cgroups (one per hierarchy carrying a controller): made with the shape's limits,
  // or only named (the same directories whatever the shape).
  ResourceLimits vm_limits(const Shape& shape) const;
  std::vector<std::string> make_cgroups(const std::string& name, const Shape& shape);
  std::vector<std::string> cgroups_for(const std::string& name) const;
  std::vector<std::string> cgroup_names() const;  // every VM cgroup of this state directory
  VmPlan plan_for(const Shape& shape, const std::filesystem::path& directory,
                  std::vector<std::string> cgroups) const;
  // A new VM for `id`: from the template of spec's shape, or — `from` given — from a snapshot
  // (its shape, its disk's contents copied into the new layer, its memory).
  std::shared_ptr<Instance> create(const std::string& id, const SandboxKey& key,
                                   const SandboxSpec& spec, const SnapshotRecord* from = nullptr);
  // Get-or-create's common part, under the identity's locks: the live sandbox (unless `from`
  // is given: a resume replaces it), else a new one.
  std::shared_ptr<Sandbox> obtain(const SandboxKey& key, const SandboxSpec& spec,
                                  const SnapshotRecord* from);
  std::filesystem::path snapshot_dir(const std::string& id) const;
  // A snapshot's record.json, whole (its backend part included); BackendError when unreadable.
  json::Json read_snapshot_json(const std::string& id) const;
  std::shared_ptr<MicrovmSandbox> handle(const std::shared_ptr<Instance>& instance,
                                         const SandboxKey& key) const;
  // Ends `id` wherever it runs (its VM killed through its cgroup when another process owns it)
  // and removes everything of it. True when nothing is left.
  bool teardown(const std::string& id) noexcept;
  void reclaim_dead_owners() noexcept;

  MicrovmBackendConfig config_;
  std::filesystem::path state_;
  backend_kit::CgroupLayout cgroups_;
  std::string cgroup_prefix_;
  images::ImageStore images_;
  MicrovmAccelProbe accel_;
  std::string tsc_khz_;
  std::string guest_identity_;
  backend_kit::ChannelSandboxSettings settings_;
  std::shared_ptr<SnapshotPlace> snapshot_place_;
  backend_kit::IdentityCache<MicrovmSandbox> identities_;
  backend_kit::EgressListeners egress_;
  std::mutex live_mutex_;
  std::map<std::string, std::shared_ptr<Instance>> live_;
  std::mutex shapes_mutex_;  // one template or disk image built at a time in this process
};

}  // namespace airlock::microvm_backend
