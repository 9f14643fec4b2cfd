// A second process for the cross-process tests: it shares nothing with the test process but the
// engine, so what it finds it can only have found by label.
//
//   docker_sandbox_helper create SCOPE N   acquire N sandboxes under SCOPE and exit without
//                                          disposing them (a host that crashed); prints their ids
//   docker_sandbox_helper purge SCOPE      dispose_scope(SCOPE); prints how many went
//
// The engine is DOCKER_HOST; the image is AIRLOCK_DOCKER_TEST_IMAGE.
#include <cstdlib>
#include <iostream>
#include <string>

#include "airlock/backends/docker.hpp"

int main(int argc, char** argv) {
  using namespace airlock;
  if (argc < 3) {
    std::cerr << "usage: docker_sandbox_helper create SCOPE N | purge SCOPE\n";
    return 2;
  }
  const std::string command = argv[1];
  const std::string scope = argv[2];
  try {
    docker::DockerConfig config;
    const char* image = std::getenv("AIRLOCK_DOCKER_TEST_IMAGE");
    config.default_image = image && *image ? image : "airlock-test/busybox:latest";
    config.pull_missing_images = false;
    docker::DockerBackend backend(config);
    if (command == "create" && argc == 4) {
      const int count = std::stoi(argv[3]);
      for (int i = 0; i < count; ++i) {
        auto sandbox = backend.acquire(SandboxKey{scope, "thread-" + std::to_string(i), "/a"},
                                       SandboxSpec({.kind = "helper"}));
        std::cout << sandbox->instance_id() << "\n";
      }
      return 0;
    }
    if (command == "purge") {
      std::cout << backend.dispose_scope(scope, std::nullopt) << "\n";
      return 0;
    }
  } catch (const std::exception& error) {
    std::cerr << "docker_sandbox_helper: " << error.what() << "\n";
    return 1;
  }
  std::cerr << "docker_sandbox_helper: unknown command " << command << "\n";
  return 2;
}
