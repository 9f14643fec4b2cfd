// The microvm backend's SandboxBackend: disk images and snapshot templates per shape, one
// jailed VM per (key, kind, egress posture), durable records for other processes.
#pragma once

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

// A VM this process made, and what it holds on the host.
struct Instance {
  Record record;
  std::unique_ptr<VirtualMachine> vm;
  std::mutex mutex;  // guards vm's teardown against a concurrent command's kill
};

class MicrovmSandbox final : public backend_kit::ChannelSandbox {
 public:
  MicrovmSandbox(std::shared_ptr<Instance> instance, backend_kit::ChannelSandboxSettings settings,
                 SandboxKey key);
  ExecResult exec(const Command& command, const ExecOptions& options) override;
  ExecResult run_code(std::string_view code, Milliseconds timeout) override;
  const std::shared_ptr<Instance>& instance() const noexcept { return instance_; }

 private:
  template <typename Call>
  ExecResult guarded(Call call);
  std::shared_ptr<Instance> instance_;
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

  const MicrovmAccelProbe& accel() const noexcept { return accel_; }

 private:
  struct Shape {
    std::string image_id;
    std::filesystem::path rootfs;
    std::uint64_t disk_bytes = 0;
    std::uint64_t memory_bytes = 0;
    unsigned vcpus = 1;
    // Hashed, a directory name; `guest` names the kernel, initramfs and QEMU it runs on.
    std::string key(const std::string& guest) const;
  };

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
  std::shared_ptr<Instance> create(const std::string& id, const SandboxKey& key,
                                   const SandboxSpec& spec);
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
  backend_kit::IdentityCache<MicrovmSandbox> identities_;
  backend_kit::EgressListeners egress_;
  std::mutex live_mutex_;
  std::map<std::string, std::shared_ptr<Instance>> live_;
  std::mutex shapes_mutex_;  // one template or disk image built at a time in this process
};

}  // namespace airlock::microvm_backend
