#include "backends/docker/egress_topology.hpp"

#include <nlohmann/json.hpp>
#include <thread>

#include "airlock/errors.hpp"
#include "backends/docker/containers.hpp"
#include "backends/docker/seccomp_profile.hpp"

namespace airlock::docker {
namespace {

using nlohmann::json;

constexpr int kProxyPort = 3128;
// What airlock-egress-proxy prints once every listener is open (see src/egress/proxy_main.cpp).
constexpr const char* kReadinessLine = "listening on ";

struct ProxyState {
  bool running = false;
  std::string address;  // on the sandbox's network; empty until the engine assigned one
};

std::optional<ProxyState> proxy_state(EngineClient& client, const std::string& proxy,
                                      const std::string& network) {
  const std::string path = "/containers/" + url_encode(proxy) + "/json";
  const EngineResponse response = client.call("GET", path);
  if (response.status == 404) return std::nullopt;
  if (response.status != 200) {
    EngineClient::fail("the container engine could not inspect the egress proxy", "GET", path,
                       response);
  }
  const json parsed = json::parse(response.body, nullptr, false);
  ProxyState state;
  if (!parsed.is_object()) return state;
  state.running = parsed.value("/State/Running"_json_pointer, false);
  const json::json_pointer where("/NetworkSettings/Networks/" + network + "/IPAddress");
  if (parsed.contains(where) && parsed.at(where).is_string()) {
    state.address = parsed.at(where).get<std::string>();
  }
  return state;
}

std::string proxy_logs(EngineClient& client, const std::string& proxy) {
  const std::string path = "/containers/" + url_encode(proxy) + "/logs?stdout=1&stderr=1";
  const EngineResponse response = client.call("GET", path);
  return response.status == 200 ? response.body : std::string();
}

// Printable text of a (multiplexed) log body, bounded, for an error detail.
std::string printable_tail(const std::string& logs) {
  std::string out;
  for (const char c : logs) {
    if (c == '\n' || (c >= ' ' && c <= '~')) out += c;
  }
  return out.size() > 800 ? out.substr(out.size() - 800) : out;
}

// Wait, bounded by the configured readiness timeout, for the proxy's readiness line; a proxy
// that exits or never says it listens is a failed acquire, never a sandbox with no way out.
void await_ready(EngineClient& client, const std::string& proxy,
                 std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string logs;
  for (;;) {
    logs = proxy_logs(client, proxy);
    if (logs.find(kReadinessLine) != std::string::npos) return;
    const auto info = inspect_container(client, proxy);
    if (!info || !info->running) {
      throw BackendError("the sandbox's egress proxy did not start",
                         "container " + proxy + " exited: " + printable_tail(logs));
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw BackendError("the sandbox's egress proxy did not become ready",
                     "container " + proxy + " printed no readiness line within " +
                         std::to_string(timeout.count()) + " ms: " + printable_tail(logs));
}

std::vector<std::string> proxy_command(const DockerConfig& config, const SandboxSpec& spec,
                                       const std::string& sandbox_id) {
  std::vector<std::string> command{"/usr/local/bin/airlock-egress-proxy", "--listen",
                                   "0.0.0.0:" + std::to_string(kProxyPort), "--sandbox-id",
                                   sandbox_id};
  for (const auto& host : spec.egress_allow()) {
    command.push_back("--allow");
    command.push_back(host);
  }
  for (const auto port : config.proxy_allowed_ports) {
    command.push_back("--port");
    command.push_back(std::to_string(port));
  }
  for (const auto& range : config.proxy_allow_nonglobal_for_tests) {
    command.push_back("--allow-nonglobal-for-tests");
    command.push_back(range);
  }
  return command;
}

}  // namespace

std::string egress_network_name(const std::string& container_name) {
  return container_name + "-net";
}

std::string egress_proxy_name(const std::string& container_name) {
  return container_name + "-proxy";
}

EgressTopology ensure_egress(EngineContext& engine, const std::string& container_name,
                             const SandboxSpec& spec,
                             const std::map<std::string, std::string>& labels, bool fresh,
                             EngineFlavour flavour) {
  EngineClient& client = *engine.client;
  const DockerConfig& config = engine.config;
  const std::string network = egress_network_name(container_name);
  const std::string proxy = egress_proxy_name(container_name);
  try {
    auto network_labels = labels;
    network_labels[kRoleLabel] = kRoleNetwork;
    ensure_network(client, network, /*internal=*/true, network_labels);

    auto state = proxy_state(client, proxy, network);
    if (!state) {
      ensure_image(client, config.proxy_image, config.pull_missing_images, config.pull_timeout);
      auto proxy_labels = labels;
      proxy_labels[kRoleLabel] = kRoleProxy;
      ContainerRequest request;
      request.name = proxy;
      request.image = config.proxy_image;
      request.entrypoint = proxy_command(config, spec, container_name);
      request.labels = proxy_labels;
      request.network_mode = network;
      request.pids_limit = 256;
      request.init = false;
      // The proxy parses what the guest sends it, and holds the only way out: it runs under the
      // guest's seccomp policy too.
      request.flavour = flavour;
      const SeccompOption seccomp(flavour);
      request.seccomp = seccomp.value();
      const auto created = create_container(client, request);
      // A 409 means a parallel acquire created it: theirs is adopted below.
      if (created) connect_network(client, config.proxy_outbound_network, *created, {});
      state = ProxyState{};
    }
    if (!state->running) {
      const auto info = inspect_container(client, proxy);
      if (!info) throw BackendError("the sandbox's egress proxy vanished", "container " + proxy);
      if (!info->running) start_container(client, info->id);
    }
    await_ready(client, proxy, config.proxy_ready_timeout);
    state = proxy_state(client, proxy, network);
    if (!state || state->address.empty()) {
      throw BackendError("the sandbox's egress proxy has no address on the sandbox's network",
                         "container " + proxy + " on " + network);
    }
    const std::string url = "http://" + state->address + ":" + std::to_string(kProxyPort);
    EgressTopology topology;
    topology.network = network;
    topology.environment = {{"HTTPS_PROXY", url}, {"https_proxy", url}, {"HTTP_PROXY", url},
                            {"http_proxy", url},  {"ALL_PROXY", url},   {"all_proxy", url}};
    return topology;
  } catch (...) {
    if (fresh) remove_egress(engine, container_name);
    throw;
  }
}

void remove_egress(EngineContext& engine, const std::string& container_name) noexcept {
  remove_container(*engine.client, egress_proxy_name(container_name));
  remove_network(*engine.client, egress_network_name(container_name));
}

}  // namespace airlock::docker
