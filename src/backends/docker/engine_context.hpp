// What the backend and every sandbox handle it gave out share: the configuration and the client.
// Handles hold it by shared_ptr, so a handle stays usable (and fails cleanly) after the backend
// object is gone.
#pragma once

#include <memory>

#include "airlock/backends/docker.hpp"
#include "backends/docker/engine_client.hpp"

namespace airlock::docker {

struct EngineContext {
  DockerConfig config;
  std::shared_ptr<EngineClient> client;
};

}  // namespace airlock::docker
