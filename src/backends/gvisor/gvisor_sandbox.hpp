// The Sandbox handle of one gvisor container: the kit's channel sandbox over the keeper's
// command channel (guest_channel.hpp), and the container it is.
#pragma once

#include <memory>
#include <string>

#include "airlock/backends/gvisor.hpp"
#include "backends/gvisor/guest_channel.hpp"
#include "backends/kit/channel_sandbox.hpp"

namespace airlock::gvisor_backend {

class GvisorSandbox final : public backend_kit::ChannelSandbox {
 public:
  GvisorSandbox(std::shared_ptr<GuestChannel> channel,
                const std::shared_ptr<const GvisorBackendConfig>& config, std::string container_id,
                std::string instance_id, SandboxKey key, std::string kind, std::string work_dir);

  const std::string& container_id() const noexcept { return container_id_; }

 private:
  std::string container_id_;
};

}  // namespace airlock::gvisor_backend
