// Allowlist egress for a docker sandbox, enforced by topology: the sandbox sits alone on an
// internal network of its own ("<name>-net"), whose only other member is a proxy container
// ("<name>-proxy") running airlock-egress-proxy with the spec's allowlist; the proxy alone also
// joins the configured outbound network. The proxy variables the sandbox gets are advisory — the
// network is what enforces.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "airlock/records.hpp"
#include "backends/docker/containers.hpp"
#include "backends/docker/engine_context.hpp"

namespace airlock::docker {

struct EgressTopology {
  std::string network;                                           // the sandbox's network mode
  std::vector<std::pair<std::string, std::string>> environment;  // HTTPS_PROXY, HTTP_PROXY, …
};

std::string egress_network_name(const std::string& container_name);
std::string egress_proxy_name(const std::string& container_name);

// Ensure the network and a running, ready proxy for `spec`'s allowlist. `fresh` says the sandbox
// container does not exist yet: when a step fails then, what was made here is removed again.
// Throws BackendError (naming the step) on any failure: a proxy without its outbound leg would
// quietly turn an allowlist into a closed sandbox.
EgressTopology ensure_egress(EngineContext& engine, const std::string& container_name,
                             const SandboxSpec& spec,
                             const std::map<std::string, std::string>& labels, bool fresh,
                             EngineFlavour flavour);

// Remove the proxy and the network of a sandbox (by its container name). Never throws.
void remove_egress(EngineContext& engine, const std::string& container_name) noexcept;

}  // namespace airlock::docker
