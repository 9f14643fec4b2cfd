// A real engine for the docker backend's attack tests. DOCKER_HOST names it (the test stage
// starts a private dockerd or Podman service); without one the tests SKIP loudly, and with one
// that does not answer they FAIL. Every test works under a scope of its own and disposes it.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>

#include "airlock/backends/docker.hpp"
#include "airlock/errors.hpp"
#include "backends/docker/containers.hpp"
#include "backends/docker/engine_client.hpp"

namespace airlock::docker::test {

// The image the tests run (AIRLOCK_DOCKER_TEST_IMAGE; default airlock-test/busybox:latest).
// The variable's value, or `fallback` when it is unset or empty.
std::string environment(const char* name, const char* fallback = "");

std::string test_image();
// The base configuration: DOCKER_HOST, the test image as default.
DockerConfig test_config();
// Why the engine tests cannot run here, or nullopt when they can.
std::optional<std::string> engine_unavailable();

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // A backend over the same engine with a changed configuration (disposed with the test scope).
  std::shared_ptr<DockerBackend> make_backend(DockerConfig config);

  SandboxKey key(const std::string& thread = "thread-1", const std::string& agent = "/agent");
  SandboxSpec spec(const std::string& kind = "attack", ResourceLimits resources = {});
  std::shared_ptr<Sandbox> acquire(const std::string& thread = "thread-1");

  // Run a shell line in `sandbox` at `working_directory` (timeout 60 s).
  ExecResult sh(Sandbox& sandbox, const std::string& line,
                const std::string& working_directory = "/");
  // Whether the engine is Podman's service (its /info carries BuildahVersion).
  bool podman();
  // The container behind a handle, straight from the engine.
  std::optional<ContainerInfo> inspect(const std::string& name_or_id);

  // The work directory the file tests use, created through the file plane.
  static constexpr const char* kWork = "/srv/work";
  void make_work(Sandbox& sandbox);

  std::string scope_;
  std::shared_ptr<DockerBackend> backend_;
  std::shared_ptr<EngineClient> client_;
};

}  // namespace airlock::docker::test
