// Commands: argv fidelity, timeouts that kill whole trees, bounded output, reaping, queueing.
#include <thread>

#include "airlock/errors.hpp"
#include "linux/fixture.hpp"

namespace airlock::linux_backend::testing {
namespace {

using Clock = std::chrono::steady_clock;

class ExecTest : public LinuxBackendTest {
 protected:
  void SetUp() override {
    LinuxBackendTest::SetUp();
    if (IsSkipped()) return;
    sandbox_ = acquire(spec());
  }
  void TearDown() override {
    sandbox_.reset();
    LinuxBackendTest::TearDown();
  }
  ExecOptions options(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    ExecOptions result;
    result.working_directory = kWork;
    result.timeout = timeout;
    return result;
  }
  std::shared_ptr<LinuxSandbox> sandbox_;
};

TEST_F(ExecTest, AnArgvIsNeverInterpretedByAShell) {
  const std::string hostile = "a b$(echo injected)c;`id`'\"\n*";
  const ExecResult result = sandbox_->exec(
      Command::argv({"sh", "-c", "printf '%s' \"$1\"", "probe", hostile}), options());
  EXPECT_EQ(result.stdout_bytes, hostile);
  const ExecResult direct = sandbox_->exec(Command::argv({"printf", "%s", "$HOME;*"}), options());
  EXPECT_EQ(direct.stdout_bytes, "$HOME;*");
}

TEST_F(ExecTest, AShellStringRunsThroughSh) {
  const ExecResult result = sandbox_->exec(Command::shell("echo one; exit 7"), options());
  EXPECT_EQ(result.exit_code, 7);
  EXPECT_EQ(result.stdout_bytes, "one\n");
}

TEST_F(ExecTest, TheWorkingDirectoryIsHonoured) {
  EXPECT_EQ(sandbox_->exec(Command::argv({"pwd"}), options()).stdout_bytes,
            std::string(kWork) + "\n");
  ExecOptions in_tmp = options();
  in_tmp.working_directory = "/tmp";
  EXPECT_EQ(sandbox_->exec(Command::argv({"pwd"}), in_tmp).stdout_bytes, "/tmp\n");
  ExecOptions missing = options();
  missing.working_directory = "/no/such/place";
  EXPECT_THROW(sandbox_->exec(Command::argv({"pwd"}), missing), NotFound);
}

TEST_F(ExecTest, AMissingProgramExitsLikeAShellWould) {
  const ExecResult result =
      sandbox_->exec(Command::argv({"definitely-not-a-program"}), options());
  EXPECT_EQ(result.exit_code, 127);
  EXPECT_NE(result.stderr_bytes.find("definitely-not-a-program"), std::string::npos);
}

TEST_F(ExecTest, StdinAndEnvironmentReachTheCommand) {
  ExecOptions with_input = options();
  with_input.stdin_bytes = std::string("line one\nline two\n") + std::string(200000, 'z');
  with_input.environment = {{"AIRLOCK_PROBE", "value with spaces"}, {"HOME", "/elsewhere"}};
  const ExecResult result = sandbox_->exec(
      Command::shell("wc -c; echo \"$AIRLOCK_PROBE|$HOME|$PATH\""), with_input);
  EXPECT_EQ(result.stdout_bytes,
            std::to_string(with_input.stdin_bytes.size()) +
                "\nvalue with spaces|/elsewhere|/usr/local/sbin:/usr/local/bin:/usr/sbin:"
                "/usr/bin:/sbin:/bin\n");
}

TEST_F(ExecTest, ATimeoutRaisesTimeoutAndConfirmsTheKill) {
  const auto started = Clock::now();
  try {
    sandbox_->exec(Command::argv({"sleep", "30"}), options(std::chrono::seconds(1)));
    FAIL() << "no timeout";
  } catch (const QueuedTimeout&) {
    FAIL() << "the command was running, not queued";
  } catch (const Timeout& timeout) {
    ASSERT_TRUE(timeout.kill_confirmed().has_value());
    EXPECT_TRUE(*timeout.kill_confirmed());
  }
  const auto elapsed = Clock::now() - started;
  EXPECT_GE(elapsed, std::chrono::milliseconds(500));
  EXPECT_LE(elapsed, std::chrono::seconds(4));
  // The sandbox is still good.
  EXPECT_EQ(sh(*sandbox_, "echo alive").stdout_bytes, "alive\n");
}

TEST_F(ExecTest, CommandsAfterAKillAreNotKilledOnArrival) {
  // Each kill takes a command's cgroup with it; what runs next must start clean (a reused,
  // killed cgroup would kill every later command as it arrived).
  for (int round = 0; round < 3; ++round) {
    EXPECT_THROW(sandbox_->exec(Command::argv({"sleep", "30"}), options(std::chrono::milliseconds(300))),
                 Timeout);
    for (int i = 0; i < 3; ++i) {
      const ExecResult result = sh(*sandbox_, "echo fine");
      EXPECT_EQ(result.exit_code, 0);
      EXPECT_EQ(result.stdout_bytes, "fine\n");
    }
  }
}

TEST_F(ExecTest, ATimedOutCommandsChildrenAreKilledEvenOutsideItsProcessGroup) {
  const std::string escaper = install_testcase(*sandbox_, "setsid_escaper");
  // A background child in the group, a grandchild that left for its own session, and the
  // command itself: a timeout must take all three.
  try {
    sandbox_->exec(Command::shell("sleep 1000 & echo bg=$! > pids; " + escaper + " > escaper.out"),
                   options(std::chrono::milliseconds(1500)));
    FAIL() << "no timeout";
  } catch (const Timeout& timeout) {
    EXPECT_EQ(timeout.kill_confirmed(), std::optional<bool>(true));
  }
  const std::string pids = sh(*sandbox_, "cat pids escaper.out").stdout_bytes;
  ASSERT_NE(pids.find("bg="), std::string::npos) << pids;
  ASSERT_NE(pids.find("escaper="), std::string::npos) << pids;
  const ExecResult survivors = sh(
      *sandbox_, "for p in $(sed 's/[a-z]*=//g' pids escaper.out); do kill -0 $p 2>/dev/null && "
                 "echo alive $p; done; true");
  EXPECT_EQ(survivors.stdout_bytes, "") << pids;
}

TEST_F(ExecTest, ZombiesAreReaped) {
  const std::string maker = install_testcase(*sandbox_, "zombie_maker");
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(sh(*sandbox_, maker + " 30").exit_code, 0);
  }
  // Give the orphans their 20 ms to exit; then nothing in the sandbox may be a zombie.
  const auto give_up = Clock::now() + std::chrono::seconds(5);
  std::string zombies;
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    zombies = sh(*sandbox_, "grep -l '^State:.Z' /proc/[0-9]*/status 2>/dev/null || true")
                  .stdout_bytes;
  } while (!zombies.empty() && Clock::now() < give_up);
  EXPECT_EQ(zombies, "");
  const ExecResult count = sh(*sandbox_, "ls /proc | grep -c '^[0-9]'");
  EXPECT_LE(std::stoi(count.stdout_bytes), 4) << "orphans were not reaped";
}

TEST_F(ExecTest, AnOutputFloodIsRefusedAsItStreams) {
  const std::string flood = install_testcase(*sandbox_, "output_flood");
  const auto started = Clock::now();
  try {
    sandbox_->exec_bounded(Command::argv({flood}), kWork, std::chrono::seconds(30), 1 << 20);
    FAIL() << "the flood was not refused";
  } catch (const ExecOutputLimitExceeded& refused) {
    EXPECT_EQ(refused.limit(), 1u << 20);
    EXPECT_EQ(refused.kill_confirmed(), std::optional<bool>(true));
  }
  EXPECT_LT(Clock::now() - started, std::chrono::seconds(10));
  // Through stderr too: the ceiling is on both streams together.
  EXPECT_THROW(sandbox_->exec_bounded(Command::argv({flood, "stderr"}), kWork,
                                      std::chrono::seconds(30), 1 << 20),
               ExecOutputLimitExceeded);
}

TEST_F(ExecTest, TruncationKeepsTheHeadAndLetsTheCommandFinish) {
  ExecOptions truncating = options();
  truncating.max_output_bytes = 1000;
  truncating.overflow = OutputOverflow::truncate;
  const ExecResult result = sandbox_->exec(
      Command::shell("head -c 5000 /dev/zero | tr '\\0' a; echo; exit 3"), truncating);
  EXPECT_TRUE(result.truncated);
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_EQ(result.stdout_bytes, std::string(1000, 'a'));
}

TEST_F(ExecTest, AnUnboundedExecStillHasTheBackendsCeiling) {
  auto backend = make_backend(
      [](LinuxBackendConfig& config) { config.output_ceiling_bytes = 256 * 1024; });
  auto sandbox = acquire(spec("ceiling"), std::nullopt, backend.get());
  const std::string flood = install_testcase(*sandbox, "output_flood");
  EXPECT_THROW(sandbox->exec(Command::argv({flood}), options()), ExecOutputLimitExceeded);
  backend->purge_all();
}

TEST_F(ExecTest, CancellationKillsTheCommand) {
  std::stop_source stop;
  ExecOptions cancellable = options();
  cancellable.stop = stop.get_token();
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stop.request_stop();
  });
  const auto started = Clock::now();
  try {
    sandbox_->exec(Command::shell("echo started; sleep 100"), cancellable);
    FAIL() << "not cancelled";
  } catch (const Timeout& timeout) {
    EXPECT_EQ(timeout.message(), "cancelled");
    EXPECT_EQ(timeout.kill_confirmed(), std::optional<bool>(true));
    EXPECT_EQ(timeout.partial_stdout(), "started\n");
  }
  canceller.join();
  EXPECT_LT(Clock::now() - started, std::chrono::seconds(5));
  EXPECT_EQ(sh(*sandbox_, "pgrep -x sleep || echo none").stdout_bytes, "none\n");
}

TEST_F(ExecTest, ABackgroundProcessHoldingTheOutputDoesNotHoldTheCall) {
  const auto started = Clock::now();
  const ExecResult result = sh(*sandbox_, "sleep 30 & echo done");
  EXPECT_EQ(result.stdout_bytes, "done\n");
  EXPECT_LT(Clock::now() - started, std::chrono::seconds(5));
}

TEST_F(ExecTest, RunCodeRunsPythonInTheWorkDir) {
  const ExecResult result = sandbox_->run_code(
      "import os, sys\nprint(os.getcwd())\nprint('err', file=sys.stderr)\nsys.exit(4)\n",
      std::chrono::seconds(30));
  EXPECT_EQ(result.stdout_bytes, std::string(kWork) + "\n");
  EXPECT_EQ(result.stderr_bytes, "err\n");
  EXPECT_EQ(result.exit_code, 4);
}

TEST_F(ExecTest, RunCodeWaitingPastItsDeadlineIsAQueuedTimeout) {
  std::thread first([&] {
    EXPECT_THROW(sandbox_->run_code("import time\ntime.sleep(3)\n", std::chrono::seconds(2)),
                 Timeout);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto started = Clock::now();
  EXPECT_THROW(sandbox_->run_code("print('never')\n", std::chrono::milliseconds(700)),
               QueuedTimeout);
  EXPECT_LT(Clock::now() - started, std::chrono::seconds(3));
  first.join();
  // A plain exec is not serialised behind run_code.
  EXPECT_EQ(sh(*sandbox_, "echo free").stdout_bytes, "free\n");
}

TEST_F(ExecTest, CommandsPastTheSlotsQueueAndTimeOutQueued) {
  auto backend = make_backend([](LinuxBackendConfig& config) { config.max_concurrent_commands = 1; });
  auto sandbox = acquire(spec("one-slot"), std::nullopt, backend.get());
  std::thread holder([&] {
    try {
      sandbox->exec(Command::argv({"sleep", "2"}), options(std::chrono::seconds(10)));
    } catch (...) {
      ADD_FAILURE() << "the first command failed";
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_THROW(sandbox->exec(Command::argv({"true"}), options(std::chrono::milliseconds(500))),
               QueuedTimeout);
  // With enough time the queued command runs once the slot frees.
  EXPECT_EQ(sandbox->exec(Command::argv({"echo", "ran"}), options(std::chrono::seconds(10)))
                .stdout_bytes,
            "ran\n");
  holder.join();
  backend->purge_all();
}

TEST_F(ExecTest, ManyConcurrentCommandsAllComplete) {
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int i = 0; i < 24; ++i) {
    threads.emplace_back([&, i] {
      const ExecResult result = sh(*sandbox_, "echo " + std::to_string(i));
      if (result.stdout_bytes == std::to_string(i) + "\n") ++good;
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(good.load(), 24);
}

TEST_F(ExecTest, BadInputIsRefusedClearly) {
  ExecOptions relative = options();
  relative.working_directory = "relative/dir";
  EXPECT_THROW(sandbox_->exec(Command::argv({"true"}), relative), InvalidArgument);
  EXPECT_THROW(sandbox_->exec(Command::argv({"true"}), options(std::chrono::milliseconds(0))),
               InvalidArgument);
  ExecOptions bad_environment = options();
  bad_environment.environment = {{"A=B", "x"}};
  EXPECT_THROW(sandbox_->exec(Command::argv({"true"}), bad_environment), InvalidArgument);
  // A large argv (beyond one control message: it travels in a memfd) arrives intact.
  const std::string big(100000, 'q');
  const ExecResult echoed =
      sandbox_->exec(Command::argv({"printf", "%s%s", big, big}), options());
  EXPECT_EQ(echoed.exit_code, 0) << echoed.stderr_bytes;
  EXPECT_EQ(echoed.stdout_bytes.size(), 2 * big.size());
  EXPECT_EQ(echoed.stdout_bytes, big + big);
}

}  // namespace
}  // namespace airlock::linux_backend::testing
