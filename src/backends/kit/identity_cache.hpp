// The in-process half of get-or-create and adopt: per sandbox identity, one mutex (the
// cross-process half is lock_identity) and the sandbox this process holds, weakly — a handle the
// host dropped is not kept alive here, and one whose sandbox ended is not handed out again.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace airlock::backend_kit {

template <typename Sandbox>
class IdentityCache {
 public:
  // The identity's mutex, the same object for as long as the backend lives.
  std::shared_ptr<std::mutex> mutex_for(const std::string& id) {
    std::lock_guard lock(mutex_);
    auto& slot = mutexes_[id];
    if (!slot) slot = std::make_shared<std::mutex>();
    return slot;
  }

  // The sandbox held for `id`, when `still_good(sandbox)` says it may be handed out again.
  template <typename StillGood>
  std::shared_ptr<Sandbox> find(const std::string& id, StillGood still_good) {
    std::lock_guard lock(mutex_);
    const auto found = live_.find(id);
    if (found == live_.end()) return nullptr;
    auto held = found->second.lock();
    return held && still_good(*held) ? held : nullptr;
  }

  void remember(const std::string& id, const std::shared_ptr<Sandbox>& sandbox) {
    std::lock_guard lock(mutex_);
    live_[id] = sandbox;
  }

  // Forgets `id`; returns the sandbox that was still held for it, if any (to mark it disposed).
  std::shared_ptr<Sandbox> forget(const std::string& id) {
    std::lock_guard lock(mutex_);
    const auto found = live_.find(id);
    if (found == live_.end()) return nullptr;
    auto held = found->second.lock();
    live_.erase(found);
    return held;
  }

 private:
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<std::mutex>> mutexes_;
  std::map<std::string, std::weak_ptr<Sandbox>> live_;
};

}  // namespace airlock::backend_kit
