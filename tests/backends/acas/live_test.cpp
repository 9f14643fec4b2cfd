// The acas backend against a live Azure Container Apps Sandboxes group: opt-in, never on CI.
//
//   AIRLOCK_ACAS_LIVE_CONFIG=/path/live.json  build/dev/tests/backends/acas/acas_live_tests
//
// live.json is the backend's configuration object ({"endpoint": …, "subscription_id": …,
// "resource_group": …, "sandbox_group": …, "default_image": "<a prebuilt image name>"}); the
// credential is the default chain's (environment, workload identity, managed identity, az).
// Every sandbox it makes is labelled with a scope of its own and purged by that scope at the end.
// Without the variable each test says SKIPPED and why.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "airlock/backends/acas.hpp"
#include "airlock/errors.hpp"
#include "backends/acas/capture.hpp"

namespace airlock::acas {
namespace {

using namespace std::chrono_literals;

class AcasLive : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* path = std::getenv("AIRLOCK_ACAS_LIVE_CONFIG");
    if (path == nullptr || *path == '\0') {
      GTEST_SKIP() << "SKIPPED: the live acas tests need a sandbox group and credentials: set "
                      "AIRLOCK_ACAS_LIVE_CONFIG to the backend's JSON configuration (and Azure "
                      "credentials the default chain finds)";
    }
    std::ifstream file(path);
    const auto config = nlohmann::json::parse(file, nullptr, false);
    ASSERT_TRUE(config.is_object()) << path << " is not a JSON object";
    backend_ = std::make_shared<AcasBackend>(parse_acas_config(config, "live"));
    scope_ = "airlock-live-" + capture::fresh_token().substr(0, 12);
  }
  void TearDown() override {
    if (backend_) {
      EXPECT_GE(backend_->dispose_scope(scope_, std::nullopt), 0);
    }
  }
  SandboxSpec spec() const {
    SandboxSpec::Fields fields;
    fields.kind = "live";
    fields.work_dir = "/tmp/airlock-live";
    fields.required_capabilities = {Capability::exec, Capability::files_in, Capability::files_out,
                                    Capability::files_list, Capability::files_delete};
    return SandboxSpec(std::move(fields));
  }

  std::shared_ptr<AcasBackend> backend_;
  std::string scope_;
};

TEST_F(AcasLive, CommandsFilesAndDisposalWorkAgainstTheService) {
  const SandboxKey key{scope_, "thread", "agent"};
  const auto sandbox = backend_->acquire(key, spec());
  ExecOptions options;
  options.working_directory = "/tmp/airlock-live";
  options.timeout = 120s;
  const ExecResult result = sandbox->exec(Command::shell("printf '\\377ok'; exit 5"), options);
  EXPECT_EQ(result.stdout_bytes, "\xffok");
  EXPECT_EQ(result.exit_code, 5);
  sandbox->write_file("dir/data", std::string("bytes\0\x80", 7), "/tmp/airlock-live");
  EXPECT_EQ(sandbox->read_file("dir/data", "/tmp/airlock-live", 1024), std::string("bytes\0\x80", 7));
  EXPECT_EQ(sandbox->list_dir("dir", "/tmp/airlock-live").size(), 1u);
  (void)sandbox->exec(Command::shell("mkfifo pipe && ln -s /etc escape"), options);
  EXPECT_THROW((void)sandbox->read_file("pipe", "/tmp/airlock-live", 1024), SystemError);
  EXPECT_THROW((void)sandbox->read_file("escape/hostname", "/tmp/airlock-live", 1024),
               ConfinementError);
  sandbox->remove("dir", "/tmp/airlock-live", true);
  EXPECT_FALSE(sandbox->stat_file("dir", "/tmp/airlock-live"));
  EXPECT_EQ(backend_->acquire(key, spec())->instance_id(), sandbox->instance_id()) << "warm";
  EXPECT_EQ(backend_->dispose_scope(scope_, std::nullopt), 1);
}

TEST_F(AcasLive, ATimeoutDisposesTheSandbox) {
  const auto sandbox = backend_->acquire({scope_, "timeout", "agent"}, spec());
  ExecOptions options;
  options.working_directory = "/tmp/airlock-live";
  options.timeout = 5s;
  EXPECT_THROW((void)sandbox->exec(Command::shell("sleep 60"), options), Timeout);
  EXPECT_THROW((void)sandbox->exec(Command::shell("true"), options), SandboxInvalidated);
}

}  // namespace
}  // namespace airlock::acas
