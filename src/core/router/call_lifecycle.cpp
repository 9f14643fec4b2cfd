// The call lifecycle: admission per (key, kind), exclusive calls, and deletes queued by a call
// whose command's end is unknown, run when the last call in flight leaves.
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <thread>

#include "airlock/errors.hpp"
#include "airlock/router.hpp"
#include "core/router/background_worker.hpp"

namespace airlock {

struct SandboxRouter::Lane {
  std::condition_variable_any changed;
  int active = 0;  // admitted non-exclusive calls
  bool exclusive_active = false;
  int exclusive_waiting = 0;  // exclusive calls queued: later shared calls wait behind them
  int waiters = 0;            // anyone blocked in enter_call
  std::vector<QueuedDelete> pending;
  bool deleting = false;

  bool idle() const {
    return active == 0 && !exclusive_active && waiters == 0 && pending.empty() && !deleting;
  }
  bool blocked_by_cleanup() const { return !pending.empty() || deleting; }
};

SandboxRouter::~SandboxRouter() {
  background_.reset();  // drain deletes still queued on the worker
}

CallAdmission SandboxRouter::enter_call(const SandboxKey& key, const SandboxSpec& spec,
                                        const CallOptions& options) {
  return enter_call(key, std::make_shared<const SandboxSpec>(spec), options);
}

CallAdmission SandboxRouter::enter_call(const SandboxKey& key,
                                        std::shared_ptr<const SandboxSpec> shared_spec,
                                        const CallOptions& options) {
  if (!shared_spec) throw InvalidArgument("enter_call: no spec", "spec");
  const SandboxSpec& spec = *shared_spec;
  const LaneKey lane_key{key, spec.kind()};
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  std::unique_lock lock(lanes_mutex_);
  auto& slot = lanes_[lane_key];
  if (!slot) slot = std::make_shared<Lane>();
  std::shared_ptr<Lane> lane = slot;

  auto admissible = [&] {
    if (lane->exclusive_active || lane->blocked_by_cleanup()) return false;
    if (options.exclusive) return lane->active == 0;
    // Shared calls queue behind a waiting exclusive call, so a close is not starved.
    return lane->exclusive_waiting == 0;
  };

  ++lane->waiters;
  if (options.exclusive) ++lane->exclusive_waiting;
  const bool admitted = lane->changed.wait_until(lock, options.stop, deadline, admissible);
  --lane->waiters;
  if (options.exclusive) --lane->exclusive_waiting;
  if (!admitted) {
    lane->changed.notify_all();  // a shared call may have been waiting behind this exclusive one
    if (lane->idle()) lanes_.erase(lane_key);
    throw QueuedTimeout("the call over '" + spec.kind() +
                        "' was not admitted within " + std::to_string(options.timeout.count()) +
                        " ms: calls in flight or a queued delete held the sandbox");
  }
  if (options.exclusive) {
    lane->exclusive_active = true;
  } else {
    ++lane->active;
  }
  return CallAdmission(this, key, std::move(shared_spec), options.exclusive);
}

int SandboxRouter::calls_in_flight(const SandboxKey& key, std::string_view kind) const {
  std::lock_guard lock(lanes_mutex_);
  auto found = lanes_.find({key, std::string(kind)});
  if (found == lanes_.end()) return 0;
  return found->second->active + (found->second->exclusive_active ? 1 : 0);
}

void SandboxRouter::queue_delete(CallAdmission& admission) noexcept {
  try {
    std::lock_guard lock(lanes_mutex_);
    auto found = lanes_.find({admission.key_, admission.spec_->kind()});
    if (found == lanes_.end()) return;  // cannot happen while the admission is held
    auto& pending = found->second->pending;
    const std::string instance = admission.sandbox_->instance_id();
    for (const auto& queued : pending) {
      if (queued.instance_id == instance) return;
    }
    pending.push_back({admission.key_, admission.spec_->kind(), instance});
  } catch (const std::exception& error) {
    spdlog::error("could not queue the delete of a condemned sandbox: {}", error.what());
  }
}

void SandboxRouter::leave(CallAdmission& admission, bool in_background) noexcept {
  const LaneKey lane_key{admission.key_, admission.spec_->kind()};
  std::vector<QueuedDelete> deletes;
  {
    std::lock_guard lock(lanes_mutex_);
    auto found = lanes_.find(lane_key);
    if (found == lanes_.end()) return;
    Lane& lane = *found->second;
    if (admission.exclusive_) {
      lane.exclusive_active = false;
    } else {
      --lane.active;
    }
    if (lane.active == 0 && !lane.exclusive_active && !lane.pending.empty() && !lane.deleting) {
      deletes = std::move(lane.pending);
      lane.pending.clear();
      lane.deleting = true;
    } else {
      lane.changed.notify_all();
      if (lane.idle()) lanes_.erase(found);
      return;
    }
  }
  if (!in_background) {
    run_deletes(lane_key, std::move(deletes));
    return;
  }
  try {
    {
      std::lock_guard lock(lanes_mutex_);
      if (!background_) background_ = std::make_unique<BackgroundWorker>();
    }
    background_->post([this, lane_key, deletes = std::move(deletes)]() mutable {
      run_deletes(lane_key, std::move(deletes));
    });
  } catch (...) {
    // No worker thread could be started: do the work here rather than leave the lane blocked.
    run_deletes(lane_key, std::move(deletes));
  }
}

void SandboxRouter::run_deletes(const LaneKey& lane_key,
                                std::vector<QueuedDelete> deletes) noexcept {
  for (const auto& queued : deletes) {
    if (!dispose_kind(queued.key, queued.kind, queued.instance_id)) {
      spdlog::warn("the delete of condemned sandbox instance {} did not land; a later dispose "
                   "or purge must reach it",
                   queued.instance_id);
    }
  }
  std::lock_guard lock(lanes_mutex_);
  auto found = lanes_.find(lane_key);
  if (found == lanes_.end()) return;
  Lane& lane = *found->second;
  lane.deleting = false;
  lane.changed.notify_all();
  if (lane.idle()) lanes_.erase(found);
}

// ---- CallAdmission ---------------------------------------------------------------------------

CallAdmission::CallAdmission(SandboxRouter* router, SandboxKey key,
                             std::shared_ptr<const SandboxSpec> spec, bool exclusive)
    : router_(router),
      key_(std::move(key)),
      spec_(std::move(spec)),
      exclusive_(exclusive) {}

CallAdmission::CallAdmission(CallAdmission&& other) noexcept
    : router_(other.router_),
      key_(std::move(other.key_)),
      spec_(std::move(other.spec_)),
      exclusive_(other.exclusive_),
      released_(std::exchange(other.released_, true)),
      condemned_(other.condemned_),
      sandbox_(std::move(other.sandbox_)) {}

CallAdmission::~CallAdmission() { release(); }

std::shared_ptr<Sandbox> CallAdmission::acquire() {
  if (released_) throw InvalidArgument("acquire after the call was released", "call-lifecycle");
  sandbox_ = router_->acquire(key_, *spec_);
  return sandbox_;
}

void CallAdmission::condemn() noexcept {
  if (condemned_ || released_ || !sandbox_) return;
  condemned_ = true;
  router_->queue_delete(*this);
}

void CallAdmission::release(bool in_background) noexcept {
  if (released_) return;
  released_ = true;
  router_->leave(*this, in_background);
}

}  // namespace airlock
