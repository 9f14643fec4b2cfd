// Resource limits: attacks on the host's resources are stopped by the sandbox's cgroups.
#include <fstream>
#include <sstream>

#include "airlock/errors.hpp"
#include "linux/fixture.hpp"

namespace airlock::linux_backend::testing {
namespace {

using LimitsTest = LinuxBackendTest;

TEST_F(LimitsTest, AForkBombIsStoppedByThePidsLimit) {
  auto sandbox =
      acquire(spec("forks", [](SandboxSpec::Fields& fields) { fields.resources.pids = 64; }));
  const std::string bomb = install_testcase(*sandbox, "fork_bomb");
  try {
    const ExecResult result =
        sandbox->exec_bounded(Command::argv({bomb}), kWork, std::chrono::seconds(3), 1 << 16);
    ADD_FAILURE() << "the bomb ended by itself: " << result.stdout_bytes;
  } catch (const Timeout& timeout) {
    // It hit the wall, said so, and was killed with all its children when the deadline came.
    EXPECT_NE(timeout.partial_stdout().find("error=Resource temporarily unavailable"),
              std::string::npos)
        << timeout.partial_stdout();
    std::istringstream reported(timeout.partial_stdout().substr(6));
    long forks = 0;
    reported >> forks;
    EXPECT_LT(forks, 64);
    EXPECT_GT(forks, 10);
    EXPECT_EQ(timeout.kill_confirmed(), std::optional<bool>(true));
  }
  // Nothing of the bomb survives, and the sandbox still serves.
  EXPECT_LE(std::stoi(sh(*sandbox, "ls /proc | grep -c '^[0-9]'").stdout_bytes), 5);
  EXPECT_EQ(sh(*sandbox, "echo alive").stdout_bytes, "alive\n");
  for (const auto& cgroup : sandbox->record().cgroups) {
    if (cgroup.find("/pids/") != std::string::npos) {
      EXPECT_EQ(read_text(cgroup + "/pids.max"), "64\n");
      EXPECT_NE(read_text(cgroup + "/pids.events"), "max 0\n");
    }
  }
}

TEST_F(LimitsTest, AMemoryBombIsKilledByTheMemoryLimit) {
  auto sandbox = acquire(spec("memory", [](SandboxSpec::Fields& fields) {
    fields.resources.memory_bytes = std::uint64_t{64} << 20;
  }));
  const std::string bomb = install_testcase(*sandbox, "memory_bomb");
  const ExecResult result = sandbox->exec(Command::argv({bomb, "1024"}), [] {
    ExecOptions options;
    options.working_directory = kWork;
    options.timeout = std::chrono::seconds(30);
    return options;
  }());
  EXPECT_EQ(result.term_signal, std::optional<int>(9)) << result.stdout_bytes;
  EXPECT_EQ(result.exit_code, 137);
  EXPECT_EQ(result.stdout_bytes.find("without being stopped"), std::string::npos);
  // The init survived (the command is the OOM killer's first choice) and still serves.
  EXPECT_EQ(sh(*sandbox, "echo alive").stdout_bytes, "alive\n");
}

TEST_F(LimitsTest, ACpuLimitThrottles) {
  auto sandbox = acquire(spec("cpu", [](SandboxSpec::Fields& fields) {
    fields.resources.cpu_millis = 100;  // a tenth of one CPU
  }));
  const ExecResult result = sh(*sandbox,
                               "python3 -c \"import time\n"
                               "end = time.monotonic() + 2\n"
                               "while time.monotonic() < end: pass\n"
                               "print(round(time.process_time(), 2))\"");
  ASSERT_EQ(result.exit_code, 0) << result.stderr_bytes;
  EXPECT_LT(std::stod(result.stdout_bytes), 0.6) << "2 s of wall time got this much CPU";
}

TEST_F(LimitsTest, DefaultLimitsApplyWhenTheSpecSetsNone) {
  auto sandbox = acquire(spec());
  bool saw_pids = false;
  bool saw_memory = false;
  for (const auto& cgroup : sandbox->record().cgroups) {
    if (cgroup.find("/pids/") != std::string::npos) {
      saw_pids = true;
      EXPECT_EQ(read_text(cgroup + "/pids.max"), "512\n");
    }
    if (cgroup.find("/memory/") != std::string::npos) {
      saw_memory = true;
      EXPECT_EQ(read_text(cgroup + "/memory.limit_in_bytes"),
                std::to_string(std::uint64_t{2} << 30) + "\n");
    }
  }
  EXPECT_TRUE(saw_pids);
  EXPECT_TRUE(saw_memory);
}

TEST_F(LimitsTest, NonsenseLimitsAreRefused) {
  EXPECT_THROW(acquire(spec("bad", [](SandboxSpec::Fields& fields) { fields.resources.pids = 1; })),
               InvalidArgument);
  EXPECT_THROW(
      acquire(
          spec("bad2", [](SandboxSpec::Fields& fields) { fields.resources.memory_bytes = 1024; })),
      InvalidArgument);
}

}  // namespace
}  // namespace airlock::linux_backend::testing
