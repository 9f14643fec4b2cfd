// Shared fixture for the linux backend's tests: a private state directory, a backend on it, the
// guest test programs, and a leak audit run after every test (descriptors, init processes,
// cgroups, mounts and state left behind are failures).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "airlock/backends/linux.hpp"
#include "airlock/sandbox.hpp"
#include "backends/linux/linux_sandbox.hpp"

namespace airlock::linux_backend::testing {

// Skips (loudly) unless the process is root: the backend's boundary needs root here (CI is).
#define AIRLOCK_REQUIRE_ROOT()                                                                \
  do {                                                                                        \
    if (::geteuid() != 0) {                                                                   \
      GTEST_SKIP() << "SKIPPED: the linux backend's tests need root (user namespaces with a " \
                      "full uid range, cgroups, mounts)";                                     \
    }                                                                                         \
  } while (0)

inline constexpr const char* kWork = "/maf-sandbox/work";

// A directory under /tmp, removed (without following links) when it goes.
class TemporaryDirectory {
 public:
  explicit TemporaryDirectory(const std::string& prefix = "airlock-linux-test");
  ~TemporaryDirectory();
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

// A directory in a host directory that image "host" shows the guest (/opt, else /etc), removed
// (without following links) when it goes: for tests that need a host path the guest can see.
class VisibleHostDirectory {
 public:
  explicit VisibleHostDirectory(const std::string& prefix);
  ~VisibleHostDirectory();
  VisibleHostDirectory(const VisibleHostDirectory&) = delete;
  VisibleHostDirectory& operator=(const VisibleHostDirectory&) = delete;
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

// What a test may leave behind, counted before and checked after.
class LeakAudit {
 public:
  LeakAudit();
  // Instances the test touched (their init pids, cgroups and records are checked at the end).
  void track(const RecordFile& record);
  // Every tracked init gone, every tracked cgroup removed, no mount under `state_dir`, the
  // state directory holding no sandbox, and this process's descriptors back to where they were.
  void expect_clean(const std::filesystem::path& state_dir) const;

 private:
  std::size_t descriptors_ = 0;
  std::vector<RecordFile> tracked_;
};

// The whole file ("" when it cannot be read).
std::string read_text(const std::string& path);

std::size_t open_descriptor_count();
bool process_alive(long pid, std::uint64_t start_time);

// A busybox root filesystem (every applet linked, root-owned by the guest root) under `where`.
// Empty when busybox-static is not installed (callers skip with the reason).
std::optional<std::filesystem::path> make_busybox_rootfs(const std::filesystem::path& where,
                                                         std::uint32_t uid_base);

// The static guest programs (tests/testcases), by name: their bytes, to put in a sandbox.
std::string testcase_bytes(const std::string& name);

class LinuxBackendTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // A backend on this test's state directory; `adjust` may change the config first.
  std::shared_ptr<SandboxBackend> make_backend(
      const std::function<void(LinuxBackendConfig&)>& adjust = {});
  // Acquire through `backend_` (or `backend`), and track what came back for the audit.
  std::shared_ptr<LinuxSandbox> acquire(const SandboxSpec& spec,
                                        std::optional<SandboxKey> key = std::nullopt,
                                        SandboxBackend* backend = nullptr);
  static SandboxSpec spec(const std::string& kind = "test",
                          const std::function<void(SandboxSpec::Fields&)>& adjust = {});
  // Runs `line` through sh -c in the work dir (timeout 30 s).
  static ExecResult sh(Sandbox& sandbox, const std::string& line,
                       std::chrono::milliseconds timeout = std::chrono::seconds(30));
  // Writes the named testcase into the work dir as an executable and returns its guest path.
  static std::string install_testcase(Sandbox& sandbox, const std::string& name);

  SandboxKey key_;
  std::unique_ptr<TemporaryDirectory> state_;
  std::shared_ptr<SandboxBackend> backend_;
  LeakAudit audit_;
  bool root_ = false;
};

}  // namespace airlock::linux_backend::testing
