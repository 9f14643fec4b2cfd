// The warm pool: sandboxes built ahead of need, so that a cold acquire costs a rename and a
// record write instead of a spawn, namespaces, mounts and cgroup joins.
//
// A pool member is a whole sandbox — its init running as PID 1 of its namespaces, its root
// mounted, its storage empty, its cgroups made and joined, its filter ready — built for one
// *shape* (image, work dir, limits, egress posture) and recorded under <state>/linux/pool-<…>/
// with state "pooled" and no labels. It has never been handed out: a claim takes it out of the
// pool for good, and it serves that one conversation until it is disposed of, like any other
// sandbox. Nothing is ever returned to the pool.
//
// Shapes are learned: an acquire of a shape makes it wanted, and the pool keeps `size` members
// of every shape wanted within `idle_timeout` (at most `max_shapes` of them), refilled on the
// pool's own thread, never on the acquire path. `memory_ceiling_bytes` bounds what the ready
// members hold in all, as their cgroups count it.
//
// Ownership: every member is held on a leash (spawn_config.hpp, kPoolLeashFd) whose other end
// only this pool holds. The process dies, or the pool discards the member: the leash ends, and
// so does the member's init. Its record and cgroups stay for whoever comes next — the next
// backend on the state directory reclaims pooled records whose owner is gone, and purge_all
// reclaims everything.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "airlock/backends/linux.hpp"
#include "airlock/records.hpp"
#include "backends/linux/state_store.hpp"
#include "base/unique_fd.hpp"

namespace airlock::linux_backend {

// What a pool member is built for: everything of a sandbox but its conversation.
struct PoolShape {
  std::string image_reference;  // as the spec named it ("host", a path, a store reference)
  std::string image_identity;   // what it resolved to (the rootfs), so a moved tag is a new shape
  std::string work_dir;
  ResourceLimits resources;
  bool egress_bridge = false;  // allowlist (the proxy's policy is bound at claim)
  std::string key() const;
};

struct PoolMember {
  RecordFile record;     // state "pooled", id "pool-<instance id>"
  base::UniqueFd leash;  // this pool's end
  std::uint64_t memory_bytes = 0;  // what its cgroup held once it was ready

  // Its init is still running and still on the leash.
  bool usable() const noexcept;
  // Lets go of it for good: 'c' on the leash (the init stops watching it), then closes it.
  // False when the init is already gone.
  bool release() noexcept;
};

class WarmPool {
 public:
  // Builds one member of a shape (throws on failure); discards one (kills it and removes what
  // it left; never throws). Both run on the pool's thread, outside its lock.
  using Build = std::function<PoolMember(const PoolShape&)>;
  using Discard = std::function<void(PoolMember&)>;

  WarmPool(LinuxPoolConfig config, Build build, Discard discard);
  ~WarmPool();  // stops the thread and discards every ready member
  WarmPool(const WarmPool&) = delete;
  WarmPool& operator=(const WarmPool&) = delete;

  // A ready member of `shape` (the caller now owns it), or nullopt. Either way the shape counts
  // as wanted from now on, and the pool refills it.
  std::optional<PoolMember> take(const PoolShape& shape);
  // Makes `shape` wanted without taking anything (prewarm).
  void want(const PoolShape& shape);
  // Discards every ready member and forgets every shape (nothing is refilled until the next
  // take or want); returns once a member being built as it is called is discarded too.
  void clear();
  // The ready members' record ids (tests, metrics).
  std::vector<std::string> ready_ids();

 private:
  struct ShapeState {
    PoolShape shape;
    std::deque<PoolMember> ready;
    std::chrono::steady_clock::time_point last_wanted;
    std::chrono::steady_clock::time_point retry_at;
    int failures = 0;
  };
  void loop();
  void mark_wanted(const PoolShape& shape, std::chrono::steady_clock::time_point now);
  std::uint64_t held_bytes() const;

  const LinuxPoolConfig config_;
  const Build build_;
  const Discard discard_;
  std::mutex mutex_;
  std::condition_variable wakeup_;
  std::map<std::string, ShapeState> shapes_;  // by PoolShape::key
  std::uint64_t last_member_bytes_ = 0;       // what the newest member held (the next's guess)
  bool stopping_ = false;
  bool building_ = false;  // a member is being built (outside the lock)
  std::chrono::steady_clock::time_point quiet_until_;  // no build before (warm_pool.cpp)
  std::thread worker_;
};

}  // namespace airlock::linux_backend
