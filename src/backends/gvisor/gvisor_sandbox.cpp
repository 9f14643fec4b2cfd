#include "backends/gvisor/gvisor_sandbox.hpp"

#include "airlock/errors.hpp"
#include "backends/gvisor/bundle.hpp"
#include "backends/gvisor/guest_protocol.hpp"
#include "backends/gvisor/gvisor_backend.hpp"

namespace airlock::gvisor_backend {
namespace {

backend_kit::ChannelSandboxSettings settings_of(const GvisorBackendConfig& config, bool allowlist) {
  backend_kit::ChannelSandboxSettings settings;
  settings.backend = "gvisor";
  settings.helper_path = gvisor_guest::kGuestHelperPath;
  settings.output_ceiling_bytes = config.output_ceiling_bytes;
  settings.max_bytes_per_file_in = config.limits.files_in.max_bytes_per_file;
  settings.max_concurrent_commands = config.max_concurrent_commands;
  // The keeper socket's directory (channel_test.cpp proves what a guest can do with it).
  settings.socket_directories = {kControlGuestDirectory};
  settings.no_terminal_reason = "its keeper allocates no pseudo-terminal in the guest";
  if (allowlist) settings.base_environment = egress_proxy_environment();
  return settings;
}

}  // namespace

GvisorSandbox::GvisorSandbox(std::shared_ptr<GuestChannel> channel,
                             const std::shared_ptr<const GvisorBackendConfig>& config,
                             std::string container_id, std::string instance_id, SandboxKey key,
                             std::string kind, std::string work_dir, bool allowlist,
                             std::weak_ptr<GvisorBackend> backend)
    : ChannelSandbox(channel, settings_of(*config, allowlist), std::move(instance_id),
                     std::move(key), std::move(kind), std::move(work_dir)),
      container_id_(std::move(container_id)),
      guest_(std::move(channel)),
      backend_(std::move(backend)) {}

SnapshotRecord GvisorSandbox::snapshot() {
  const auto backend = backend_.lock();
  if (!backend) {
    throw BackendError("the gvisor backend that made this sandbox is gone",
                       "snapshot of " + container_id_ + ": acquire the sandbox again");
  }
  return backend->take_snapshot(*this);
}

}  // namespace airlock::gvisor_backend
