// Exec through the Engine API: fidelity, bounds that hold while the output streams, and
// timeouts that leave nothing running.
#include <fcntl.h>
#include <unistd.h>

#include <iostream>
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

// A daemon planted by the command — double-forked, in a session of its own, appending to a file
// for ever. After the error, either the kill is confirmed and the daemon is provably gone (the
// file stops growing, no such process is left), or the kill is not claimed.
constexpr const char* kPlantDaemon =
    "(setsid sh -c 'while :; do echo x >> /tmp/planted.log; sleep 0.05; done' "
    "</dev/null >/dev/null 2>&1 &); "
    "while [ ! -s /tmp/planted.log ]; do sleep 0.02; done; ";

class PlantedDaemon : public EngineTest {
 protected:
  // A file the conversation wrote before the bad command: a kept instance still holds it.
  void write_keepsake(Sandbox& sandbox) {
    ASSERT_EQ(sh(sandbox, "echo kept > /tmp/notes.md").exit_code, 0);
  }
  void expect_gone(Sandbox& sandbox, std::optional<bool> confirmed) {
    ASSERT_EQ(confirmed, std::optional<bool>(true)) << "the keeper's kill was not confirmed";
    const std::string size = "wc -c < /tmp/planted.log 2>/dev/null || echo none";
    const std::string first = sh(sandbox, size).stdout_bytes;
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    EXPECT_EQ(sh(sandbox, size).stdout_bytes, first)
        << "the planted daemon kept writing after a confirmed kill";
    EXPECT_EQ(sh(sandbox, "ps -o args | grep -c '[p]lanted.log'").stdout_bytes, "0\n");
    EXPECT_EQ(sh(sandbox, "cat /tmp/notes.md").stdout_bytes, "kept\n")
        << "a confirmed kill must leave the conversation's files";
  }
};

TEST_F(PlantedDaemon, IsGoneWhenATimeoutConfirmsTheKill) {
  auto sandbox = acquire();
  write_keepsake(*sandbox);
  std::optional<bool> confirmed;
  try {
    sandbox->exec(Command::shell(std::string(kPlantDaemon) + "sleep 300"),
                  at("/", std::chrono::seconds(3)));
    ADD_FAILURE() << "the command outlived its timeout";
  } catch (const Timeout& error) {
    confirmed = error.kill_confirmed();
  }
  EXPECT_EQ(confirmed, std::optional<bool>(true));
  expect_gone(*sandbox, confirmed);
}

TEST_F(PlantedDaemon, IsGoneWhenAnOutputFloodConfirmsTheKill) {
  auto sandbox = acquire();
  write_keepsake(*sandbox);
  ExecOptions options = at("/");
  options.max_output_bytes = 64 * 1024;
  std::optional<bool> confirmed;
  try {
    sandbox->exec(Command::shell(std::string(kPlantDaemon) + "yes flood"), options);
    ADD_FAILURE() << "the flood was not refused";
  } catch (const ExecOutputLimitExceeded& error) {
    confirmed = error.kill_confirmed();
  }
  EXPECT_EQ(confirmed, std::optional<bool>(true));
  expect_gone(*sandbox, confirmed);
}

// Without the engine's init nothing would reap what the keeper kills, so the stop cannot be
// confirmed in place: the container goes and the answer says so, never a silently emptied one.
TEST_F(PlantedDaemon, AnUnconfirmableStopRemovesTheContainerAndSaysSo) {
  DockerConfig config = test_config();
  config.init = false;
  auto backend = make_backend(config);
  auto sandbox = backend->acquire(key("thread-noinit"), spec());
  const std::string id = sandbox->instance_id();
  std::optional<bool> confirmed;
  try {
    sandbox->exec(Command::shell(std::string(kPlantDaemon) + "sleep 300"),
                  at("/", std::chrono::seconds(2)));
    ADD_FAILURE() << "the command outlived its timeout";
  } catch (const Timeout& error) {
    confirmed = error.kill_confirmed();
  }
  EXPECT_EQ(confirmed, std::optional<bool>(false));
  EXPECT_FALSE(inspect(id).has_value()) << "an unconfirmed stop must remove the container";
}

TEST_F(EngineTest, OutputStreamsAndStdinIsForwardedLive) {
  auto sandbox = acquire();
  ExecOptions streaming = at("/");
  std::string out;
  std::optional<Clock::time_point> first;
  streaming.on_output = [&](OutputStream, std::string_view bytes) {
    if (!first) first = Clock::now();
    out += bytes;
  };
  const auto streamed = sandbox->exec(Command::shell("echo a; sleep 1; echo b"), streaming);
  const auto ended = Clock::now();
  ASSERT_TRUE(first.has_value());
  EXPECT_GE(ended - *first, std::chrono::milliseconds(700));
  EXPECT_EQ(out, "a\nb\n");
  EXPECT_EQ(streamed.stdout_bytes, "");

  int ends[2];
  ASSERT_EQ(::pipe2(ends, O_CLOEXEC), 0);
  std::thread writer([&] {
    for (const std::string_view line : {"one\n", "two\n"}) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      (void)!::write(ends[1], line.data(), line.size());
    }
    ::close(ends[1]);
  });
  ExecOptions live = at("/");
  live.stdin_fd = ends[0];
  const auto echoed = sandbox->exec(Command::shell("cat; echo end"), live);
  writer.join();
  ::close(ends[0]);
  EXPECT_EQ(echoed.stdout_bytes, "one\ntwo\nend\n");
}

TEST_F(EngineTest, ATerminalOrSignalsAreRefusedBeforeAnythingRuns) {
  auto sandbox = acquire();
  ExecOptions terminal = at("/");
  terminal.terminal = WindowSize{24, 80};
  EXPECT_THROW(sandbox->exec(Command::shell("touch /tmp/ran"), terminal), NotSupported);
  ExecOptions controlled = at("/");
  controlled.control = std::make_shared<ExecControl>();
  EXPECT_THROW(sandbox->exec(Command::shell("touch /tmp/ran"), controlled), NotSupported);
  EXPECT_EQ(sh(*sandbox, "[ -e /tmp/ran ] && echo ran; true").stdout_bytes, "");
}

}  // namespace
}  // namespace airlock::docker::test
