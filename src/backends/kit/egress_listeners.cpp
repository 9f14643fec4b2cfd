#include "backends/kit/egress_listeners.hpp"

namespace airlock::backend_kit {

void EgressListeners::listen(const std::string& id, const std::filesystem::path& socket_path,
                             EgressPolicy policy, const std::string& instance_id,
                             UnixSocketOptions socket) {
  // An older listener for this sandbox serves no one: it goes before the new bind.
  stop(id);
  std::lock_guard lock(mutex_);
  if (!proxy_) {
    EgressProxy::Options options;
    options.on_decision = on_decision_;
    proxy_ = std::make_unique<EgressProxy>(std::move(options));
  }
  listeners_[id] = proxy_->listen(socket_path, std::move(policy), instance_id, socket);
}

void EgressListeners::stop(const std::string& id) noexcept {
  EgressListener closing;
  {
    std::lock_guard lock(mutex_);
    auto found = listeners_.find(id);
    if (found == listeners_.end()) return;
    closing = std::move(found->second);
    listeners_.erase(found);
  }
  closing.close();  // outside the lock: it waits for the event loop
}

void EgressListeners::stop_all() noexcept {
  std::map<std::string, EgressListener> closing;
  {
    std::lock_guard lock(mutex_);
    closing.swap(listeners_);
  }
  for (auto& [id, listener] : closing) listener.close();
}

bool EgressListeners::listening(const std::string& id) const {
  std::lock_guard lock(mutex_);
  return listeners_.count(id) != 0;
}

}  // namespace airlock::backend_kit
