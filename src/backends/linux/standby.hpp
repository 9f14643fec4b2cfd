// A standby monitor: airlock-init started ahead of need, already inside a fresh instance's
// cgroups, waiting for a sandbox to be asked for. Claiming it skips the two slowest steps of a
// cold start — the spawn of the helper and the first cgroup migration (which waits for a grace
// period of the kernel's cgroup lock) — so a cold acquire costs little more than the clone.
//
// Durability: a standby is recorded in <state>/linux/standby/<instance>.json (its cgroups and
// pid) before its cgroups exist, so a host that dies leaves nothing purge_all cannot reclaim;
// the standby itself dies with the thread that started it (PR_SET_PDEATHSIG).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "airlock/records.hpp"
#include "backends/kit/cgroups.hpp"
#include "backends/linux/launcher.hpp"
#include "backends/linux/state_store.hpp"
#include "base/unique_fd.hpp"

namespace airlock::linux_backend {

// The cgroup layer is the kit's, shared with the microvm backend.
using backend_kit::CgroupLayout;
using backend_kit::InstanceCgroups;

class StandbyMonitor {
 public:
  struct Options {
    std::filesystem::path init_path;
    const StateStore* store = nullptr;
    const CgroupLayout* layout = nullptr;  // null: no cgroups (unprivileged)
    ResourceLimits limits;                  // the profile its cgroups are made with
    bool per_command_cgroups = true;
    uid_t guest_root = 0;
    std::chrono::milliseconds timeout{10'000};
  };

  // Records, makes the cgroups, spawns and waits until the standby has joined them. Throws
  // BackendError (after removing what it made).
  static std::unique_ptr<StandbyMonitor> prepare(const Options& options);

  ~StandbyMonitor();
  StandbyMonitor(const StandbyMonitor&) = delete;
  StandbyMonitor& operator=(const StandbyMonitor&) = delete;

  const std::string& instance_id() const noexcept { return instance_id_; }
  const InstanceCgroups& cgroups() const noexcept { return cgroups_; }
  // Still waiting (not claimed, not dead).
  bool usable() const noexcept;

  // Hands the standby a sandbox: from here on it is that sandbox's monitor. Its standby record
  // is removed once the caller's sandbox record names its cgroups (call after writing it).
  // Throws BackendError when the standby is gone (the caller then starts one the usual way).
  LaunchedInit claim(const SpawnConfig& config, const InitDescriptors& descriptors,
                     std::chrono::milliseconds timeout);
  // The standby record is no longer needed (the sandbox's record owns the cgroups).
  void forget_record() noexcept;

  // Every standby record in `store` (each one, whoever owns it): kill what remains, remove its
  // cgroups and the record. Returns how many were reclaimed. For purge_all.
  static int reclaim_all(const StateStore& store) noexcept;
  // Only the standbys no one will ever claim — their process is gone, or it never started and
  // the process that recorded it is gone — and records cut short while being written. Safe while
  // other processes use the same state directory. Returns how many were reclaimed.
  static int reclaim_orphans(const StateStore& store) noexcept;

 private:
  StandbyMonitor() = default;
  void discard() noexcept;

  const StateStore* store_ = nullptr;
  std::string instance_id_;
  InstanceCgroups cgroups_;
  pid_t pid_ = -1;
  base::UniqueFd channel_;
  bool claimed_ = false;
};

}  // namespace airlock::linux_backend
