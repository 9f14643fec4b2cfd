// What runsc leaves behind when a create fails or a sandbox dies badly, and how we reclaim it:
// its cgroups (one directory per hierarchy), its processes (runsc-sandbox, runsc-gofer, and our
// shepherd), and its entry in runsc's state root.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace airlock::gvisor_backend {

// The parent of every cgroup this backend creates, in every hierarchy.
inline constexpr const char* kCgroupParent = "airlock-gvisor";

// Every cgroup hierarchy's mount point on this host (v1 controllers and the v2 unified tree).
std::vector<std::filesystem::path> cgroup_mounts();

// Existing directories <mount>/airlock-gvisor/<id> across hierarchies.
std::vector<std::filesystem::path> leftover_cgroups(const std::string& id);

// Host processes whose command line names `bundle_directory` (the sandbox's runsc processes and
// its shepherd all do).
std::vector<long> processes_of_bundle(const std::filesystem::path& bundle_directory);

// SIGKILLs every process above and every process in the id's cgroups, then removes the cgroups.
// Returns what could not be reclaimed (empty: nothing is left). Never throws.
std::vector<std::string> reclaim_leftovers(const std::string& id,
                                           const std::filesystem::path& bundle_directory);

}  // namespace airlock::gvisor_backend
