#include "engine_fixture.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>

namespace airlock::docker::test {

std::string environment(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value && *value ? value : fallback;
}

std::string test_image() {
  return environment("AIRLOCK_DOCKER_TEST_IMAGE", "airlock-test/busybox:latest");
}

DockerConfig test_config() {
  DockerConfig config;
  config.host = environment("DOCKER_HOST");
  config.default_image = test_image();
  config.pull_missing_images = false;  // the tests' images are imported, never pulled
  return config;
}

std::optional<std::string> engine_unavailable() {
  if (environment("DOCKER_HOST").empty() && !std::filesystem::exists("/var/run/docker.sock")) {
    return "no container engine: DOCKER_HOST is unset and /var/run/docker.sock is absent "
           "(scripts/engines/dockerd start prints a DOCKER_HOST)";
  }
  return std::nullopt;
}

void EngineTest::SetUp() {
  if (auto reason = engine_unavailable()) GTEST_SKIP() << "SKIPPED: " << *reason;
  static std::atomic<int> counter{0};
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  scope_ = std::string("airlock-test-") + info->name() + "-" + std::to_string(::getpid()) + "-" +
           std::to_string(counter++);
  backend_ = std::make_shared<DockerBackend>(test_config());
  DockerConfig config = backend_->config();
  client_ =
      std::make_shared<EngineClient>(parse_engine_host(config.host, false, "DOCKER_HOST"),
                                     TlsSettings{}, kMaximumApiVersion, std::chrono::seconds(60));
  // An engine that is named but does not answer is a failure, not a skip.
  ASSERT_NO_THROW(backend_->api_version()) << "DOCKER_HOST is set but the engine does not answer";
}

void EngineTest::TearDown() {
  if (backend_) backend_->dispose_scope(scope_, std::nullopt);
}

std::shared_ptr<DockerBackend> EngineTest::make_backend(DockerConfig config) {
  return std::make_shared<DockerBackend>(std::move(config));
}

SandboxKey EngineTest::key(const std::string& thread, const std::string& agent) {
  return SandboxKey{scope_, thread, agent};
}

SandboxSpec EngineTest::spec(const std::string& kind, ResourceLimits resources) {
  return SandboxSpec({.kind = kind, .work_dir = kWork, .resources = resources});
}

std::shared_ptr<Sandbox> EngineTest::acquire(const std::string& thread) {
  return backend_->acquire(key(thread), spec());
}

ExecResult EngineTest::sh(Sandbox& sandbox, const std::string& line,
                          const std::string& working_directory) {
  ExecOptions options;
  options.working_directory = working_directory;
  options.timeout = std::chrono::seconds(60);
  return sandbox.exec(Command::shell(line), options);
}

bool EngineTest::podman() {
  return client_->call("GET", "/info").body.find("\"BuildahVersion\"") != std::string::npos;
}

std::optional<ContainerInfo> EngineTest::inspect(const std::string& name_or_id) {
  return inspect_container(*client_, name_or_id);
}

void EngineTest::make_work(Sandbox& sandbox) {
  sandbox.write_file(".keep", "", kWork);
}

}  // namespace airlock::docker::test
