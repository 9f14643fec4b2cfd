// The host file plane: when the engine runs on this host, a sandbox's files are reached from
// the host through the container init's /proc/<pid>/root, every path resolved with
// openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS) and every final
// component opened or stat-ed without following. The kernel resolves the whole path in one call,
// so a guest that swaps a checked directory for a link mid-operation gets a refusal, never a
// redirected operation: no walk-then-act race, which the archive endpoints cannot offer.
//
// It applies only where it is sound: a local engine (unix socket) whose container init is visible
// in our pid namespace (its cgroup names the container id), in our user namespace (so root here
// is root there), under a runc-family runtime (a gVisor sandbox's /proc root is not the guest's
// filesystem). The handle pins the init with a pidfd; a restart ends it and the plane re-attaches.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "airlock/records.hpp"
#include "base/unique_fd.hpp"

namespace airlock::docker {

// The container's root as seen from the host, pinned to the init process it belongs to.
class HostRoot {
 public:
  // nullopt (with `why` filled in) when the host plane does not apply to this container.
  static std::optional<HostRoot> attach(const std::string& container_id, int init_pid,
                                        const std::string& runtime, std::string& why);
  // Whether the pinned init still runs (a restart or removal ends it).
  bool alive() const noexcept;
  int fd() const noexcept { return root_.get(); }

 private:
  base::UniqueFd pidfd_;
  base::UniqueFd root_;
};

// The Sandbox file methods over a HostRoot. Each takes the absolute, lexically confined guest
// path (confine_guest_path) and raises what the Sandbox contract names: ConfinementError for a
// link in a parent, NotADirectory for a file as a parent, SystemError(ELOOP) for a final link
// that is read, SystemError(errno, guest path) for what the kernel refuses.
namespace host_plane {

std::optional<SandboxEntry> stat(int root, const std::string& absolute,
                                 std::string_view working_directory);
std::string read(int root, const std::string& absolute, std::string_view path,
                 std::uint64_t max_bytes);
void write(int root, const std::string& absolute, std::string_view path, std::string_view content);
std::vector<SandboxEntry> list(int root, const std::string& absolute,
                               std::string_view working_directory);
void remove(int root, const std::string& absolute, std::string_view path, bool recursive);

}  // namespace host_plane
}  // namespace airlock::docker
