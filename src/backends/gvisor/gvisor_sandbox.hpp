// The Sandbox handle of one gvisor container: the kit's channel sandbox over the keeper's
// command channel (guest_channel.hpp), and the container it is.
#pragma once

#include <memory>
#include <string>

#include "airlock/backends/gvisor.hpp"
#include "backends/gvisor/guest_channel.hpp"
#include "backends/kit/channel_sandbox.hpp"

namespace airlock::gvisor_backend {

class GvisorBackend;

class GvisorSandbox final : public backend_kit::ChannelSandbox {
 public:
  // `allowlist`: every command also gets the proxy's variables (a sandbox resumed under
  // allowlist from a closed snapshot has a keeper whose own environment lacks them).
  GvisorSandbox(std::shared_ptr<GuestChannel> channel,
                const std::shared_ptr<const GvisorBackendConfig>& config, std::string container_id,
                std::string instance_id, SandboxKey key, std::string kind, std::string work_dir,
                bool allowlist, std::weak_ptr<GvisorBackend> backend);

  const std::string& container_id() const noexcept { return container_id_; }
  GuestChannel& guest_channel() const noexcept { return *guest_; }

  // The backend that made this handle saves it (GvisorBackend::take_snapshot).
  SnapshotRecord snapshot() override;

 private:
  std::string container_id_;
  std::shared_ptr<GuestChannel> guest_;
  std::weak_ptr<GvisorBackend> backend_;
};

}  // namespace airlock::gvisor_backend
