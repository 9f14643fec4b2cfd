// The egress proxy a backend runs in the acquiring process, and one listener per sandbox on it.
// The proxy starts with the first allowlist sandbox; a sandbox's listener is replaced when it is
// adopted again (the socket file another process bound serves no one here) and closed when the
// sandbox goes. Shared by every backend whose guest reaches the proxy over a unix socket.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "airlock/egress.hpp"

namespace airlock::backend_kit {

class EgressListeners {
 public:
  explicit EgressListeners(EgressDecisionCallback on_decision = {})
      : on_decision_(std::move(on_decision)) {}
  EgressListeners(const EgressListeners&) = delete;
  EgressListeners& operator=(const EgressListeners&) = delete;
  ~EgressListeners() { stop_all(); }

  // Binds `socket_path` for sandbox `id` under `policy`, closing any listener `id` had first.
  void listen(const std::string& id, const std::filesystem::path& socket_path, EgressPolicy policy,
              const std::string& instance_id, UnixSocketOptions socket = {});
  // Closes `id`'s listener, if any (waits for the proxy's loop to let go of it).
  void stop(const std::string& id) noexcept;
  void stop_all() noexcept;

  bool listening(const std::string& id) const;

 private:
  EgressDecisionCallback on_decision_;
  mutable std::mutex mutex_;
  std::unique_ptr<EgressProxy> proxy_;
  std::map<std::string, EgressListener> listeners_;
};

}  // namespace airlock::backend_kit
