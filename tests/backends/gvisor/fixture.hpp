// Shared fixture for the gvisor backend's tests: a real runsc, a private state directory per
// test, and one image store per test program holding busybox (built here from the host's
// busybox-static, so no prepared images are needed) and, when AIRLOCK_TEST_IMAGES points at the
// output of scripts/build-test-images, python. After every test, the state directory must hold
// no sandbox, runsc must know no container and no cgroup or runsc process may be left.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "airlock/backends/gvisor.hpp"
#include "airlock/records.hpp"
#include "airlock/sandbox.hpp"

namespace airlock::gvisor_backend::testing {

inline constexpr const char* kWork = "/maf-sandbox/work";

// Why the gvisor tests cannot run here, or nullopt when they can (root, runsc, busybox-static).
std::optional<std::string> gvisor_unavailable();

#define AIRLOCK_REQUIRE_GVISOR()                                                     \
  do {                                                                               \
    if (const auto why = ::airlock::gvisor_backend::testing::gvisor_unavailable()) { \
      GTEST_SKIP() << "SKIPPED: " << *why;                                           \
    }                                                                                \
  } while (0)

// A directory under /tmp, removed when it goes.
class TemporaryDirectory {
 public:
  explicit TemporaryDirectory(const std::string& prefix);
  ~TemporaryDirectory();
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

// A busybox tree as an image describes it (root-owned), from the host's busybox-static.
void make_busybox_rootfs(const std::filesystem::path& root);

// Runs `body` in a child process as uid and gid 65534 with no groups — an unprivileged local
// user — and returns its exit code (255 when it could not become that user).
int as_unprivileged_user(const std::function<int()>& body);

// The image store shared by one test program ("busybox" always; "python" and "curl" when
// available).
const std::filesystem::path& shared_image_store();
bool python_image_available();
// "curl": busybox plus the host's /usr/bin/curl and its libraries (false when the host has none).
bool curl_image_available();

// Processes whose command line mentions `needle` (runsc-sandbox, runsc-gofer… of one state dir).
std::vector<long> processes_mentioning(const std::string& needle);

class GvisorBackendTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  GvisorBackendConfig config() const;
  std::shared_ptr<SandboxBackend> make_backend(
      const std::function<void(GvisorBackendConfig&)>& adjust = {});
  std::shared_ptr<Sandbox> acquire(const SandboxSpec& spec,
                                   std::optional<SandboxKey> key = std::nullopt);
  static SandboxSpec spec(const std::string& kind = "test",
                          const std::function<void(SandboxSpec::Fields&)>& adjust = {});
  static ExecResult sh(Sandbox& sandbox, const std::string& line,
                       std::chrono::milliseconds timeout = std::chrono::seconds(30));

  // Cgroups of this test's containers (their names carry a tag of the state directory).
  std::vector<std::filesystem::path> cgroups_of_this_state() const;

  SandboxKey key_;
  std::unique_ptr<TemporaryDirectory> state_;
  std::shared_ptr<SandboxBackend> backend_;
  bool ready_ = false;
};

}  // namespace airlock::gvisor_backend::testing
