// The gvisor backend's SandboxBackend: acquire (get-or-create per identity), disposal and purge
// from durable state. See include/airlock/backends/gvisor.hpp for the contract.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "airlock/backends/gvisor.hpp"
#include "airlock/images.hpp"
#include "backends/kit/egress_listeners.hpp"
#include "backends/kit/identity_cache.hpp"
#include "backends/gvisor/gvisor_sandbox.hpp"
#include "backends/gvisor/runsc.hpp"
#include "backends/gvisor/state_store.hpp"

namespace airlock::gvisor_backend {

class GvisorBackend final : public SandboxBackend,
                            public std::enable_shared_from_this<GvisorBackend> {
 public:
  explicit GvisorBackend(GvisorBackendConfig config);

  std::string name() const override { return "gvisor"; }
  Isolation isolation() const override { return Isolation::hardened_container; }
  std::optional<EgressSet> egress_modes() const override;
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

  // Snapshots (snapshots.cpp): runsc's checkpoint of the whole sandbox — its processes, its
  // memory and everything its guest wrote (the overlay's file stores live in the Sentry's
  // memory file) — restored into a new container.
  std::optional<SnapshotContent> snapshot_content() const override {
    return SnapshotContent::filesystem_and_memory;
  }
  std::shared_ptr<Sandbox> acquire_from_snapshot(const SandboxKey& key, const SandboxSpec& spec,
                                                 const SnapshotRecord& snapshot) override;
  std::optional<SnapshotRecord> find_snapshot(std::string_view id) override;
  std::vector<SnapshotRecord> list_snapshots() override;
  bool delete_snapshot(std::string_view id) noexcept override;
  // GvisorSandbox::snapshot(): saves the running sandbox `sandbox` is a handle of.
  SnapshotRecord take_snapshot(GvisorSandbox& sandbox);

  GvisorPlatform platform() const noexcept { return platform_; }
  const StateStore& state() const noexcept { return store_; }

 private:
  std::string container_id(const SandboxKey& key, std::string_view kind,
                           std::string_view posture) const;
  // What a restore needs of a snapshot: its record.json (with its "gvisor" part) and its id.
  struct Restore {
    std::string snapshot_id;
    json::Json saved;
  };
  // A new container for `id`: started from the spec's image, or — `from` given — restored from
  // a snapshot (its image, helper, shape and token; the spec's egress).
  std::shared_ptr<GvisorSandbox> create(const std::string& id, const SandboxKey& key,
                                        const SandboxSpec& spec, const Restore* from = nullptr);
  std::shared_ptr<GvisorSandbox> adopt(const Record& record, const SandboxKey& key);
  // The sandbox's egress directory (bound at /.airlock-egress in every sandbox, empty under
  // `closed`), the Gofer's uid's alone.
  std::filesystem::path prepare_egress_directory(const std::string& id) const;
  // ---- snapshots (snapshots.cpp) ----
  std::filesystem::path snapshot_dir(const std::string& id) const;
  // A snapshot's record.json, whole; NotFound when there is none, BackendError when unreadable.
  json::Json read_snapshot_json(const std::string& id) const;
  // `runsc --version`'s first line (asked once): a checkpoint is restored only by the runsc
  // that made it.
  std::string runsc_version() const;
  // Staging directories of snapshots whose process died half-way.
  void reclaim_snapshot_staging() noexcept;
  // resources.disk_bytes, else the config's: the size of the sandbox's storage tmpfs.
  std::uint64_t storage_bytes(const SandboxSpec& spec) const;
  // Kills, deletes and reclaims everything of `id`, then drops its state. Takes the locks.
  bool teardown(const std::string& id) noexcept;
  bool teardown_locked(const std::string& id) noexcept;
  std::filesystem::path install_helper() const;
  // allowlist: (re)binds the sandbox's egress socket to this backend's proxy with the spec's
  // egress_allow as the host patterns over config_->egress_policy.
  void listen_for_egress(const std::string& id, const SandboxSpec& spec,
                         const std::string& instance_id);
  void stop_egress(const std::string& id) noexcept;

  std::shared_ptr<const GvisorBackendConfig> config_;
  StateStore store_;
  std::shared_ptr<const Runsc> runsc_;
  std::filesystem::path helper_source_;
  std::filesystem::path helper_directory_;
  images::ImageStore images_;
  GvisorPlatform platform_ = GvisorPlatform::systrap;
  std::string state_tag_;  // 8 hex of the state directory, in every container id

  // One proxy per backend, started by the first allowlisted acquire.
  backend_kit::EgressListeners egress_;

  backend_kit::IdentityCache<GvisorSandbox> live_;

  mutable std::mutex version_mutex_;
  mutable std::string runsc_version_;
};

}  // namespace airlock::gvisor_backend
