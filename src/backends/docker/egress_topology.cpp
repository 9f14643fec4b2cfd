#include "backends/docker/egress_topology.hpp"

#include "airlock/errors.hpp"
#include "backends/docker/containers.hpp"

namespace airlock::docker {

std::string egress_network_name(const std::string& container_name) {
  return container_name + "-net";
}

std::string egress_proxy_name(const std::string& container_name) {
  return container_name + "-proxy";
}

EgressTopology ensure_egress(EngineContext&, const std::string&, const SandboxSpec&,
                             const std::map<std::string, std::string>&, bool) {
  throw NotSupported("allowlist egress is not wired into the docker backend yet");
}

void remove_egress(EngineContext& engine, const std::string& container_name) noexcept {
  remove_container(*engine.client, egress_proxy_name(container_name));
  remove_network(*engine.client, egress_network_name(container_name));
}

}  // namespace airlock::docker
