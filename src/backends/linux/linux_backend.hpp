// The linux backend: get-or-create per (key, kind, egress posture) across threads and processes,
// and disposal found from durable state.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "airlock/backends/linux.hpp"
#include "backends/kit/egress_listeners.hpp"
#include "backends/kit/identity_cache.hpp"
#include "backends/kit/cgroups.hpp"
#include "backends/linux/image_source.hpp"
#include "backends/linux/linux_sandbox.hpp"
#include "backends/linux/snapshots.hpp"
#include "backends/linux/standby.hpp"
#include "backends/linux/state_store.hpp"
#include "backends/linux/warm_pool.hpp"

namespace airlock::linux_backend {

// The calling user's subordinate ids, as newuidmap/newgidmap will grant them: the first range
// of at least 65536 in /etc/subuid and in /etc/subgid (keyed by the user's name or uid), and the
// two setuid helpers. nullopt when the host has no such range or no helper.
struct SubordinateIds {
  std::uint32_t uid_start = 0;
  std::uint32_t gid_start = 0;
  std::string uid_mapper;
  std::string gid_mapper;
};
std::optional<SubordinateIds> find_subordinate_ids(
    const std::filesystem::path& subuid = "/etc/subuid",
    const std::filesystem::path& subgid = "/etc/subgid");

// Refuses (InvalidArgument naming resources.memory_bytes and the sysctl to raise) a memory limit
// under which one sandbox could keep more than half of the host's file table (`file_max`) open.
void check_file_table_share(std::optional<std::uint64_t> memory_bytes, std::uint64_t file_max);

class LinuxBackend final : public SandboxBackend {
 public:
  explicit LinuxBackend(LinuxBackendConfig config);
  ~LinuxBackend() override;

  std::string name() const override { return "linux"; }
  Isolation isolation() const override { return Isolation::container; }
  std::optional<EgressSet> egress_modes() const override {
    return EgressSet{Egress::closed, Egress::allowlist};
  }
  std::optional<CapabilitySet> capabilities() const override;
  std::optional<SandboxLimits> limits() const override { return config_->limits; }
  std::optional<OsFamilySet> os_families() const override { return OsFamilySet{OsFamily::posix}; }

  std::shared_ptr<Sandbox> acquire(const SandboxKey& key, const SandboxSpec& spec) override;
  void dispose(const SandboxKey& key) noexcept override;
  bool dispose_kind(const SandboxKey& key, std::string_view kind,
                    std::optional<std::string_view> instance_id) noexcept override;
  int dispose_scope(std::string_view scope,
                    std::optional<std::string_view> thread_id) noexcept override;
  std::vector<SandboxRecord> list_sandboxes() override;
  int purge_all() noexcept override;

  // Snapshots (root only): the guest's writable storage, taken frozen (snapshots.hpp).
  std::optional<SnapshotContent> snapshot_content() const override;
  std::shared_ptr<Sandbox> acquire_from_snapshot(const SandboxKey& key, const SandboxSpec& spec,
                                                 const SnapshotRecord& snapshot) override;
  std::optional<SnapshotRecord> find_snapshot(std::string_view id) override;
  std::vector<SnapshotRecord> list_snapshots() override;
  bool delete_snapshot(std::string_view id) noexcept override;

  const LinuxBackendConfig& config() const noexcept { return *config_; }
  // The instance id of the standby monitor waiting to be claimed, or "" (for tests and metrics).
  std::string ready_standby();
  // The record ids of the warm pool's ready sandboxes (for tests and metrics).
  std::vector<std::string> pooled_ids();
  const StateStore& store() const noexcept { return store_; }
  bool privileged() const noexcept { return privileged_; }

 private:
  // `snapshot`: the stream the new sandbox's storage starts as (a resume).
  std::shared_ptr<LinuxSandbox> create(const std::string& id, const SandboxKey& key,
                                       const SandboxSpec& spec, const ResourceLimits& resources,
                                       const ResolvedImage& image,
                                       std::optional<int> snapshot = std::nullopt);
  // Builds and starts one sandbox for `record` (id, kind, labels, posture and work dir set by
  // the caller; the rest filled in here) and returns a pidfd of its init. `leash`: a warm-pool
  // member, held on it (and built without the standby), recorded as "pooled". `snapshot`: a
  // resume's stream, restored into the storage by a monitor started for it. Removes what it
  // made when it fails.
  base::UniqueFd build_instance(RecordFile& record, const ResourceLimits& resources,
                                const ResolvedImage& image, bool egress_bridge,
                                std::optional<int> leash,
                                std::optional<int> snapshot = std::nullopt);
  SpawnConfig spawn_config(const RecordFile& record, const std::string& secret,
                           bool egress_bridge, const ResourceLimits& resources,
                           const ResolvedImage& image, const InstanceCgroups& cgroups);
  ResolvedImage resolve(const std::string& reference) const;
  PoolShape pool_shape(const std::string& image_reference, const ResolvedImage& image,
                       const SandboxSpec& spec, const ResourceLimits& resources) const;
  // The warm pool's builder and discarder (its thread).
  PoolMember build_pool_member(const PoolShape& shape);
  void discard_pool_member(PoolMember& member) noexcept;
  // Makes a ready pool member the sandbox of `id`: renames its state to the identity's,
  // records the conversation, lets go of the leash. nullptr (the member removed) when it cannot.
  std::shared_ptr<LinuxSandbox> claim_pooled(PoolMember member, const std::string& id,
                                             const SandboxKey& key, const SandboxSpec& spec);
  // Pooled sandboxes whose owning process is gone: killed and removed (once per backend).
  void reclaim_orphaned_pool() noexcept;
  std::shared_ptr<LinuxSandbox> adopt(const RecordFile& record, const SandboxKey& key);
  ResourceLimits effective_resources(const SandboxSpec& spec) const;
  std::shared_ptr<std::mutex> identity_mutex(const std::string& id);
  // Kills, reclaims and forgets one sandbox. Takes the identity's locks. Never throws.
  bool destroy_identity(const std::string& id,
                        const std::function<bool(const RecordFile&)>& matches) noexcept;
  void destroy_locked(const std::string& id, const std::optional<RecordFile>& record) noexcept;
  // The standby monitor, when one is ready and its cgroups suit `planned`; asks the worker for
  // the next one either way.
  std::unique_ptr<StandbyMonitor> take_standby(const InstanceCgroups& planned);
  void standby_loop();
  const std::string& seccomp_filter();
  const std::filesystem::path& init_path();
  template <typename Match>
  int destroy_matching(Match match) noexcept;
  // allowlist: (re)binds the sandbox's egress socket to this backend's proxy, with the spec's
  // policy. Replaces any listener this backend already had for `id`.
  void listen_for_egress(const std::string& id, const SandboxSpec& spec, const RecordFile& record);
  void stop_egress(const std::string& id) noexcept;

  std::shared_ptr<const LinuxBackendConfig> config_;
  StateStore store_;
  SnapshotStore snapshots_;
  bool privileged_;
  bool cgroups_ = false;                       // root, or cgroups delegated to this user
  std::optional<SubordinateIds> subordinate_;  // unprivileged, and the host grants them
  CgroupLayout layout_;
  std::once_flag seccomp_once_;
  std::string seccomp_;
  std::once_flag init_once_;
  std::once_flag orphans_once_;
  std::atomic<bool> layout_checked_{false};
  std::once_flag id_slots_once_;
  base::UniqueFd id_slots_;  // /run/airlock/id-slots, opened once
  std::filesystem::path init_path_;
  backend_kit::IdentityCache<LinuxSandbox> cache_;

  std::mutex standby_mutex_;
  std::condition_variable standby_wakeup_;
  std::unique_ptr<StandbyMonitor> standby_;
  std::thread standby_worker_;
  bool standby_wanted_ = false;
  bool standby_stopping_ = false;
  int standby_failures_ = 0;
  std::chrono::steady_clock::time_point standby_quiet_until_;  // no standby made before

  // One proxy per backend, started by the first allowlisted acquire.
  backend_kit::EgressListeners egress_;

  // Last: its thread builds through this backend, and stops first.
  std::unique_ptr<WarmPool> pool_;
};

}  // namespace airlock::linux_backend
