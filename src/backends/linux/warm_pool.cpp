#include "backends/linux/warm_pool.hpp"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>

#include "airlock/errors.hpp"

namespace airlock::linux_backend {
namespace {

using Clock = std::chrono::steady_clock;

// How often ready members are looked at when nothing else wakes the pool: a member killed
// from outside (a purge by another process) is replaced within this.
constexpr auto kLivenessInterval = std::chrono::seconds(5);

// How long after a take the pool stays quiet before it builds again. A build is a clone into
// six namespaces, mounts and cgroup directories: it takes the same kernel locks as the claim
// and the conversation's first command (the command's cgroup leaf, its clone), and on a small
// machine it competes with them for the CPU too. Measured here: a refill started at once made
// the hit's acquire + first exec 1.4x slower. Work off the acquire path stays off it.
constexpr auto kQuietAfterTake = std::chrono::milliseconds(25);

std::string optional_text(const std::optional<std::uint64_t>& value) {
  return value ? std::to_string(*value) : std::string("-");
}

}  // namespace

std::string PoolShape::key() const {
  // NUL cannot occur in any of the parts: one shape, one key.
  std::string key;
  for (const std::string& part :
       {image_reference, image_identity, work_dir, optional_text(resources.memory_bytes),
        optional_text(resources.pids), optional_text(resources.cpu_millis),
        optional_text(resources.disk_bytes), std::string(egress_bridge ? "bridge" : "closed")}) {
    key += part;
    key.push_back('\0');
  }
  return key;
}

bool PoolMember::usable() const noexcept {
  if (!leash || !init_is_alive(record)) return false;
  struct pollfd hangup {leash.get(), POLLIN, 0};
  // The init never writes on its leash: anything readable is end of stream.
  return ::poll(&hangup, 1, 0) == 0;
}

bool PoolMember::release() noexcept {
  if (!leash) return false;
  const char claimed = 'c';
  const bool sent = ::send(leash.get(), &claimed, 1, MSG_NOSIGNAL) == 1;
  leash.reset();
  return sent;
}

WarmPool::WarmPool(LinuxPoolConfig config, Build build, Discard discard)
    : config_(config), build_(std::move(build)), discard_(std::move(discard)) {
  worker_ = std::thread([this] { loop(); });
}

WarmPool::~WarmPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wakeup_.notify_all();
  if (worker_.joinable()) worker_.join();
  for (auto& [key, state] : shapes_) {
    for (auto& member : state.ready) discard_(member);
  }
}

void WarmPool::mark_wanted(const PoolShape& shape, Clock::time_point now) {
  const std::string key = shape.key();
  auto found = shapes_.find(key);
  if (found == shapes_.end()) {
    if (shapes_.size() >= config_.max_shapes) {
      // The least recently wanted shape makes room; its members go on the next pass.
      auto oldest = std::min_element(shapes_.begin(), shapes_.end(), [](auto& a, auto& b) {
        return a.second.last_wanted < b.second.last_wanted;
      });
      oldest->second.last_wanted = Clock::time_point::min();
    }
    found = shapes_.emplace(key, ShapeState{shape, {}, now, now, 0}).first;
  }
  found->second.last_wanted = now;
}

std::optional<PoolMember> WarmPool::take(const PoolShape& shape) {
  std::optional<PoolMember> taken;
  std::vector<PoolMember> dead;
  {
    std::lock_guard lock(mutex_);
    const auto now = Clock::now();
    mark_wanted(shape, now);
    quiet_until_ = now + kQuietAfterTake;
    auto& ready = shapes_.at(shape.key()).ready;
    while (!ready.empty() && !taken) {
      PoolMember member = std::move(ready.front());
      ready.pop_front();
      if (member.usable()) {
        taken = std::move(member);
      } else {
        dead.push_back(std::move(member));
      }
    }
  }
  wakeup_.notify_all();
  for (auto& member : dead) discard_(member);
  return taken;
}

void WarmPool::want(const PoolShape& shape) {
  {
    std::lock_guard lock(mutex_);
    mark_wanted(shape, Clock::now());
  }
  wakeup_.notify_all();
}

void WarmPool::clear() {
  std::vector<PoolMember> discarded;
  {
    std::unique_lock lock(mutex_);
    for (auto& [key, state] : shapes_) {
      for (auto& member : state.ready) discarded.push_back(std::move(member));
    }
    shapes_.clear();
    // A member in the making finds its shape gone and is discarded before building_ drops.
    wakeup_.wait(lock, [&] { return !building_; });
  }
  for (auto& member : discarded) discard_(member);
}

std::vector<std::string> WarmPool::ready_ids() {
  std::lock_guard lock(mutex_);
  std::vector<std::string> ids;
  for (auto& [key, state] : shapes_) {
    for (auto& member : state.ready) ids.push_back(member.record.id);
  }
  return ids;
}

std::uint64_t WarmPool::held_bytes() const {
  std::uint64_t held = 0;
  for (const auto& [key, state] : shapes_) {
    for (const auto& member : state.ready) held += member.memory_bytes;
  }
  return held;
}

// One member at a time: building is a spawn and a clone, and an idle machine is not made busy
// by a pool filling several shapes at once.
void WarmPool::loop() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    const auto now = Clock::now();
    std::vector<PoolMember> discarded;
    // Shapes nobody wanted lately go, with their members; dead members go too.
    for (auto it = shapes_.begin(); it != shapes_.end();) {
      auto& state = it->second;
      const bool idle = state.last_wanted == Clock::time_point::min() ||
                        now - state.last_wanted >= config_.idle_timeout;
      for (auto member = state.ready.begin(); member != state.ready.end();) {
        if (idle || !member->usable()) {
          discarded.push_back(std::move(*member));
          member = state.ready.erase(member);
        } else {
          ++member;
        }
      }
      it = idle ? shapes_.erase(it) : std::next(it);
    }
    if (!discarded.empty()) {
      lock.unlock();
      for (auto& member : discarded) discard_(member);
      lock.lock();
      continue;
    }
    // The emptiest wanted shape that may be built now, within the memory ceiling.
    ShapeState* next = nullptr;
    auto wake_at = now + kLivenessInterval;
    const bool room =
        held_bytes() + last_member_bytes_ < config_.memory_ceiling_bytes || held_bytes() == 0;
    for (auto& [key, state] : shapes_) {
      wake_at = std::min(wake_at, state.last_wanted + config_.idle_timeout);
      if (state.ready.size() >= config_.size || !room) continue;
      if (state.retry_at > now) {
        wake_at = std::min(wake_at, state.retry_at);
        continue;
      }
      if (next == nullptr || state.ready.size() < next->ready.size()) next = &state;
    }
    if (next != nullptr && now < quiet_until_) {
      next = nullptr;
      wake_at = std::min(wake_at, quiet_until_);
    }
    if (next == nullptr) {
      wakeup_.wait_until(lock, wake_at);
      continue;
    }
    const PoolShape shape = next->shape;
    const std::string key = shape.key();
    building_ = true;
    lock.unlock();
    std::optional<PoolMember> built;
    std::optional<std::string> failure;
    try {
      built = build_(shape);
    } catch (const std::exception& error) {
      failure = error_detail(error);
    } catch (...) {
      failure = "unknown error";
    }
    lock.lock();
    auto found = shapes_.find(key);
    if (built && (found == shapes_.end() || stopping_)) {
      lock.unlock();
      discard_(*built);
      lock.lock();
      built.reset();
      found = shapes_.end();
    }
    building_ = false;
    wakeup_.notify_all();
    if (!built) {
      if (found != shapes_.end() && failure) {
        auto& state = found->second;
        ++state.failures;
        // 1 s, 2 s, 4 s … at most a minute between attempts: a shape that cannot be built (the
        // image was removed, the host is out of ids) does not spin, and acquires of it still
        // work, or fail with the same error, the ordinary way.
        const auto pause = std::chrono::seconds(1LL << std::min(state.failures - 1, 6));
        state.retry_at = Clock::now() + std::min<Clock::duration>(pause, std::chrono::minutes(1));
        spdlog::warn("linux: the warm pool could not build a sandbox (attempt {}): {}",
                     state.failures, *failure);
      }
      continue;
    }
    last_member_bytes_ = built->memory_bytes;
    found->second.failures = 0;
    found->second.ready.push_back(std::move(*built));
  }
}

}  // namespace airlock::linux_backend
