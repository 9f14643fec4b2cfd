// Exec through the Engine API: fidelity, bounds that hold while the output streams, and
// timeouts that leave nothing running.
#include <thread>

#include "engine_fixture.hpp"

namespace airlock::docker::test {
namespace {

ExecOptions at(const std::string& working_directory,
               std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  ExecOptions options;
  options.working_directory = working_directory;
  options.timeout = timeout;
  return options;
}

TEST_F(EngineTest, ExitCodesAndStreamsComeBackExactly) {
  auto sandbox = acquire();
  const auto result =
      sandbox->exec(Command::shell("printf 'out\\001\\377'; printf 'err' >&2; exit 7"), at("/"));
  EXPECT_EQ(result.exit_code, 7);
  EXPECT_EQ(result.stdout_bytes, "out\x01\xff");
  EXPECT_EQ(result.stderr_bytes, "err");
  EXPECT_FALSE(result.truncated);
}

TEST_F(EngineTest, AnArgvIsNeverInterpretedByAShell) {
  auto sandbox = acquire();
  const std::string hostile = "a b$(echo injected)c;`id` '\"";
  const auto result =
      sandbox->exec(Command::argv({"sh", "-c", "printf '%s' \"$1\"", "probe", hostile}), at("/"));
  EXPECT_EQ(result.stdout_bytes, hostile);
}

TEST_F(EngineTest, TheWorkingDirectoryIsHonouredAndAMissingOneIsNotFound) {
  auto sandbox = acquire();
  make_work(*sandbox);
  EXPECT_EQ(sandbox->exec(Command::argv({"pwd"}), at(kWork)).stdout_bytes, "/srv/work\n");
  EXPECT_THROW(sandbox->exec(Command::argv({"pwd"}), at("/srv/absent")), NotFound);
  // A command that does not exist is the command's failure, not the directory's.
  const auto missing = sandbox->exec(Command::argv({"no-such-command"}), at(kWork));
  EXPECT_TRUE(missing.exit_code == 126 || missing.exit_code == 127) << missing.exit_code;
}

TEST_F(EngineTest, StdinAndEnvironmentReachTheCommand) {
  auto sandbox = acquire();
  ExecOptions options = at("/");
  options.stdin_bytes = std::string(300000, 'i') + "\nend\n";
  options.environment = {{"AIRLOCK_PROBE", "v a l"}};
  const auto result =
      sandbox->exec(Command::shell("printf '%s|' \"$AIRLOCK_PROBE\"; wc -c; "), options);
  EXPECT_EQ(result.stdout_text(), "v a l|300005\n");
}

TEST_F(EngineTest, AnOutputFloodIsRefusedAndTheSandboxStillServes) {
  auto sandbox = acquire();
  sh(*sandbox, "echo kept > /tmp/state");
  try {
    sandbox->exec_bounded(Command::shell("yes flood"), "/", std::chrono::seconds(60), 1 << 20);
    ADD_FAILURE() << "an endless flood returned";
  } catch (const ExecOutputLimitExceeded& error) {
    EXPECT_EQ(error.limit(), 1u << 20);
    EXPECT_EQ(error.kill_confirmed(), true);
  }
  EXPECT_EQ(sh(*sandbox, "ps -o args | grep -c '^yes flood'").stdout_bytes, "0\n")
      << "the flooding command was left running";
  EXPECT_EQ(sh(*sandbox, "cat /tmp/state").stdout_bytes, "kept\n") << "the files did not survive";
  EXPECT_EQ(acquire()->instance_id(), sandbox->instance_id());
}

TEST_F(EngineTest, AFloodAskedToTruncateKeepsTheCeilingAndFinishes) {
  auto sandbox = acquire();
  ExecOptions options = at("/");
  options.max_output_bytes = 100000;
  options.overflow = OutputOverflow::truncate;
  const auto result = sandbox->exec(
      Command::shell("head -c 5000000 /dev/zero | tr '\\0' o; echo done >&2"), options);
  EXPECT_TRUE(result.truncated);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.stdout_bytes.size() + result.stderr_bytes.size(), 100000u);
  EXPECT_TRUE(inspect(sandbox->instance_id())->running);
}

TEST_F(EngineTest, AnUnboundedExecIsHeldToTheBackendsOwnCeiling) {
  DockerConfig config = test_config();
  config.max_exec_output_bytes = 256u << 10;
  auto backend = make_backend(config);
  auto sandbox = backend->acquire(key(), spec());
  EXPECT_THROW(sandbox->exec(Command::shell("yes"), at("/")), ExecOutputLimitExceeded);
}

TEST_F(EngineTest, ATimedOutCommandAndItsChildrenAreKilled) {
  auto sandbox = acquire();
  const auto started = Clock::now();
  try {
    // The child outlives its shell in the guest's eyes; it must not outlive the timeout.
    sandbox->exec(Command::shell("sleep 301 & sleep 302; echo never"),
                  at("/", std::chrono::seconds(1)));
    ADD_FAILURE() << "a 300 s command returned within a 1 s timeout";
  } catch (const Timeout& error) {
    EXPECT_EQ(error.kill_confirmed(), true) << error.what();
  }
  const auto elapsed = Clock::now() - started;
  EXPECT_GE(elapsed, std::chrono::seconds(1));
  EXPECT_LT(elapsed, std::chrono::seconds(30));
  const auto ps = sh(*sandbox, "ps -o args | grep -c '^sleep 30[12]'");
  EXPECT_EQ(ps.stdout_bytes, "0\n") << "the command or its child outlived the timeout";
}

TEST_F(EngineTest, ACancelledCommandIsStopped) {
  auto sandbox = acquire();
  std::stop_source stop;
  std::jthread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    stop.request_stop();
  });
  ExecOptions options = at("/");
  options.stop = stop.get_token();
  try {
    sandbox->exec(Command::argv({"sleep", "303"}), options);
    ADD_FAILURE() << "a cancelled command returned";
  } catch (const Timeout& error) {
    EXPECT_NE(std::string(error.what()).find("cancelled"), std::string::npos);
    EXPECT_EQ(error.kill_confirmed(), true);
  }
  EXPECT_EQ(sh(*sandbox, "ps -o args | grep -c '^sleep 303'").stdout_bytes, "0\n");
}

TEST_F(EngineTest, ABackgroundProcessOutlivesTheExecThatStartedIt) {
  // What declaring host_tools asserts: exec detaches.
  auto sandbox = acquire();
  sh(*sandbox, "sleep 60 >/dev/null 2>&1 &");
  const auto ps = sh(*sandbox, "ps -o args | grep -c '^sleep 60'");
  EXPECT_EQ(ps.stdout_bytes, "1\n");
}

}  // namespace
}  // namespace airlock::docker::test
