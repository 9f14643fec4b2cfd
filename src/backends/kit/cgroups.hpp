// Resource limits for a sandbox through cgroups: v1 controllers (memory, pids, cpu) where they
// are mounted, cgroup v2 where the unified hierarchy carries them, and — either way — a v2
// directory delegated to the sandbox's init for per-command leaves when one can be made.
//
// Everything lives in a subtree of our own, `<hierarchy>/<subtree>/<instance id>` (the subtree
// is the backend's: `airlock` for linux, `airlock-microvm` for microvm): nothing outside it is
// created, limited, moved or removed. Shared by the backends that make cgroups themselves.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "airlock/records.hpp"

namespace airlock::backend_kit {

inline constexpr const char* kDefaultCgroupSubtree = "airlock";

struct CgroupLayout {
  std::optional<std::string> memory_v1;  // mount points of v1 hierarchies carrying the controller
  std::optional<std::string> pids_v1;
  std::optional<std::string> cpu_v1;
  std::optional<std::string> unified;  // the cgroup2 mount point, if any
  bool unified_memory = false;         // controllers available in cgroup2
  bool unified_pids = false;
  bool unified_cpu = false;
  // Where instance cgroups are made in each hierarchy: <mount>/<subtree> by default, or a
  // directory delegated to this user (see detect).
  std::string memory_parent, pids_parent, cpu_parent, unified_parent;
  std::string subtree = kDefaultCgroupSubtree;

  // From /proc/self/mountinfo and cgroup.controllers. With `delegated` (absolute cgroup
  // directories, one per hierarchy, that this user may create cgroups in), instance cgroups are
  // made directly in those, and a hierarchy none of them is in is not used at all. Throws
  // InvalidArgument naming a directory that is in no cgroup hierarchy, not a directory, or not
  // this user's to create cgroups in.
  static CgroupLayout detect(const std::vector<std::string>& delegated = {},
                             const std::string& subtree = kDefaultCgroupSubtree);

  std::string parent_for(const std::string& mount_point) const;
  bool can_limit_memory() const { return memory_v1 || unified_memory; }
  bool can_limit_pids() const { return pids_v1 || unified_pids; }
  bool can_limit_cpu() const { return cpu_v1 || unified_cpu; }
};

struct InstanceCgroups {
  std::vector<std::string> directories;  // every cgroup directory created (for removal)
  std::vector<std::string> procs_files;  // cgroup.procs files the sandbox's monitor joins
  std::string command_parent;            // delegated v2 directory for per-command leaves, or ""
};

// The cgroup directories an instance *will* have, so they can be recorded before any exists
// (a crash between creating them and recording them would otherwise leak them).
InstanceCgroups plan_instance_cgroups(const CgroupLayout& layout, const std::string& instance_id,
                                      const ResourceLimits& limits, bool per_command);

// Creates the planned cgroups and writes the limits. Throws BackendError (after removing what it
// made) on failure.
void create_instance_cgroups(const CgroupLayout& layout, const InstanceCgroups& planned,
                             const ResourceLimits& limits);

// Hands the v2 directory for per-command leaves (when planned) to `guest_root`: the init, as the
// guest's root, makes and fills the leaves there. Throws BackendError.
void delegate_instance_cgroups(const InstanceCgroups& planned, uid_t guest_root);

// Writes `limits` into cgroups made by create_instance_cgroups (for a set of limits that plans
// the same directories). Throws BackendError.
void apply_instance_limits(const CgroupLayout& layout, const InstanceCgroups& planned,
                           const ResourceLimits& limits);

// Whether two plans name the same hierarchies (so one's cgroups can carry the other's limits).
bool same_hierarchies(const InstanceCgroups& a, const InstanceCgroups& b);

// Kills every process in `directories` (and their v2 sub-cgroups), waits up to `patience` for
// them to be gone, and removes the directories. True when nothing is left. Never throws.
bool destroy_cgroups(const std::vector<std::string>& directories,
                     std::chrono::milliseconds patience);

// What the processes in `directories` are charged for in memory, as the first of them with a
// memory controller counts it (memory.current, or v1's memory.usage_in_bytes). nullopt when none
// has one.
std::optional<std::uint64_t> memory_usage(const std::vector<std::string>& directories);

}  // namespace airlock::backend_kit
