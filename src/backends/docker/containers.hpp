// Container, network and image calls the backend's lifecycle is made of. Each names the
// request in its error detail and keeps the model-facing message free of engine words.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backends/docker/engine_client.hpp"

namespace airlock::docker {

inline constexpr const char* kBackendLabel = "airlock.backend";
inline constexpr const char* kRoleLabel = "airlock.role";
inline constexpr const char* kRoleSandbox = "sandbox";
inline constexpr const char* kRoleProxy = "proxy";
inline constexpr const char* kRoleNetwork = "network";

struct ContainerInfo {
  std::string id;
  std::string name;  // without the leading '/'
  bool running = false;
  bool paused = false;  // inspect only
  int pid = 0;          // inspect only: the init's pid in the engine's pid namespace
  std::string runtime;  // inspect only
  std::string state;    // the engine's word ("running", "exited", …)
  std::map<std::string, std::string> labels;
  std::chrono::system_clock::time_point created_at{};
};

// What a sandbox (or proxy) container is made from.
struct ContainerRequest {
  std::string name;
  std::string image;
  std::vector<std::string> entrypoint;  // replaces the image's entrypoint; no Cmd is passed
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> environment;
  std::string network_mode = "none";
  std::optional<std::string> network_alias;  // on a user-defined network only
  std::uint64_t pids_limit = 512;
  std::optional<std::uint64_t> memory_bytes;
  std::optional<std::uint64_t> cpu_millis;
  bool read_only_rootfs = false;
  bool init = true;
  std::string runtime;
};

// The create body: CapDrop ALL, no-new-privileges, the limits, no binds, no published ports.
std::string container_create_body(const ContainerRequest& request);

// Label filter for /containers/json and /networks: {"label": ["k=v", …]}, URL-encoded.
std::string label_filter(const std::map<std::string, std::string>& labels);

std::optional<ContainerInfo> inspect_container(EngineClient& client, const std::string& name_or_id);
// Creates; returns nullopt when the name is taken (409) so the caller can adopt.
std::optional<std::string> create_container(EngineClient& client, const ContainerRequest& request);
void start_container(EngineClient& client, const std::string& id);
// SIGKILL then DELETE ?force=1. True when the container is confirmed gone (404 counts). Never
// throws.
bool remove_container(EngineClient& client, const std::string& name_or_id) noexcept;
std::vector<ContainerInfo> list_containers(EngineClient& client,
                                           const std::map<std::string, std::string>& labels);

struct NetworkInfo {
  std::string id;
  std::string name;
  std::map<std::string, std::string> labels;
};
// Creates an internal (or not) bridge network; an existing one of that name is adopted.
std::string ensure_network(EngineClient& client, const std::string& name, bool internal,
                           const std::map<std::string, std::string>& labels);
void connect_network(EngineClient& client, const std::string& network, const std::string& container,
                     const std::vector<std::string>& aliases);
std::vector<NetworkInfo> list_networks(EngineClient& client,
                                       const std::map<std::string, std::string>& labels);
// True when gone (404 counts). Never throws.
bool remove_network(EngineClient& client, const std::string& name_or_id) noexcept;

// Present locally, or pulled when `pull` (bounded by `pull_timeout`). Throws InvalidArgument
// when the image is absent and pulling is off, BackendError when the pull fails.
void ensure_image(EngineClient& client, const std::string& image, bool pull,
                  std::chrono::milliseconds pull_timeout);

// The runtimes the engine lists (GET /info) and lets a create choose: name → binary path. Empty
// for Podman's service, which lists runtimes it then ignores.
std::map<std::string, std::string> engine_runtimes(EngineClient& client);

}  // namespace airlock::docker
