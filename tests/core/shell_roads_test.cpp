// The shell roads against the in-process emulator: whole-or-nothing writes, probes that
// classify refusals, caps before any byte moves, and unknown ends said so.
#include "airlock/shell_roads.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "airlock/backend_factory.hpp"
#include "airlock/errors.hpp"
#include "airlock/testing.hpp"
#include "core/sandbox_doubles.hpp"
#include "support/host_sandbox.hpp"

namespace airlock {
namespace {

constexpr Milliseconds kTimeout{10'000};

ExecOptions in_root() {
  ExecOptions options;
  options.working_directory = "/";
  options.timeout = Milliseconds(1000);
  return options;
}

struct Roads {
  Roads() {
    memory->seed_directory("/work");
    memory->seed_directory("/tmp");
  }
  std::shared_ptr<testing::InProcessSandbox> memory = std::make_shared<testing::InProcessSandbox>();
  test::ForwardingSandbox sandbox{memory};

  void write(const std::string& path, std::string_view content,
             std::optional<TransferLimits> limits = std::nullopt, ShellRoadOptions options = {}) {
    write_file_over_exec(sandbox, path, content, "/work", kTimeout, limits, options);
  }
  std::string read(const std::string& path, std::uint64_t max_bytes = 1 << 20) {
    return read_file_over_exec(sandbox, path, "/work", kTimeout, max_bytes);
  }
};

std::string binary_payload(std::size_t size) {
  std::string out;
  for (std::size_t i = 0; i < size; ++i) out += static_cast<char>((i * 131 + 7) & 0xFF);
  return out;
}

FileRefusal refusal_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const FileRefused& refused) {
    return refused.refusal();
  }
  ADD_FAILURE() << "expected FileRefused";
  return FileRefusal::not_found;
}

TEST(ShellRoads, AWriteOutsideTheWorkDirectoryLandsAndReadsBack) {
  Roads roads;
  const std::string payload = binary_payload(1000);
  roads.write("/conversation_history/session/log.bin", payload);
  EXPECT_EQ(roads.memory->contents("/conversation_history/session/log.bin"), payload);
  EXPECT_EQ(roads.read("/conversation_history/session/log.bin"), payload);
  roads.write("relative.txt", "relative to the working directory");
  EXPECT_EQ(roads.memory->contents("/work/relative.txt"), "relative to the working directory");
  roads.write("/tmp/empty", "");
  EXPECT_EQ(roads.memory->contents("/tmp/empty"), "");
  EXPECT_EQ(roads.read("/tmp/empty"), "");
}

TEST(ShellRoads, AWriteIsChunkedStagedAndMovedIntoPlaceWhole) {
  Roads roads;
  roads.memory->seed_file("/tmp/target.txt", "old content");
  const std::string payload = binary_payload(10'000);
  std::vector<std::string> lines;
  bool target_changed_early = false;
  roads.sandbox.on_exec = [&](const Command& command, const ExecOptions& options) {
    lines.push_back(command.line());
    EXPECT_TRUE(options.max_output_bytes.has_value()) << "a road command was not bounded";
    const bool moving = command.line().rfind("mv -f -- ", 0) == 0;
    if (!moving && roads.memory->contents("/tmp/target.txt") != "old content") {
      target_changed_early = true;
    }
    return roads.memory->exec(command, options);
  };
  ShellRoadOptions options;
  options.chunk_bytes = 1000;
  roads.write("/tmp/target.txt", payload, std::nullopt, options);
  EXPECT_FALSE(target_changed_early) << "the target changed before the staged file was whole";
  EXPECT_EQ(roads.memory->contents("/tmp/target.txt"), payload);
  // probe + 10 chunks + count + move
  EXPECT_EQ(lines.size(), 13u);
  EXPECT_NE(lines[1].find(".airlock-stage-"), std::string::npos);
  EXPECT_EQ(lines.back().rfind("mv -f -- '/tmp/.airlock-stage-", 0), 0u) << lines.back();
  // No staging file is left behind.
  EXPECT_EQ(roads.memory->exec(Command::argv({"ls", "-A", "/tmp"}), in_root()).stdout_bytes,
            "target.txt\n");
}

TEST(ShellRoads, TwoCallsStageInSiblingsOfTheirOwn) {
  Roads roads;
  std::set<std::string> staging;
  roads.sandbox.on_exec = [&](const Command& command, const ExecOptions& options) {
    const auto at = command.line().find(".airlock-stage-");
    if (at != std::string::npos) staging.insert(command.line().substr(at, 27));
    return roads.memory->exec(command, options);
  };
  roads.write("/tmp/a.txt", "one");
  roads.write("/tmp/a.txt", "two");
  EXPECT_EQ(staging.size(), 2u);
  EXPECT_EQ(roads.memory->contents("/tmp/a.txt"), "two");
}

TEST(ShellRoads, ALinkInThePathIsAnInvalidPath) {
  Roads roads;
  roads.memory->seed_directory("/outside");
  roads.memory->seed_file("/outside/secret.txt", "secret");
  roads.memory->seed_symlink("/tmp/linked", "/outside");
  roads.memory->seed_symlink("/tmp/link-file", "/outside/secret.txt");
  EXPECT_EQ(refusal_of([&] { roads.write("/tmp/linked/new.txt", "x"); }),
            FileRefusal::invalid_path);
  EXPECT_EQ(refusal_of([&] { roads.write("/tmp/link-file", "x"); }), FileRefusal::invalid_path);
  EXPECT_EQ(refusal_of([&] { roads.read("/tmp/linked/secret.txt"); }), FileRefusal::invalid_path);
  EXPECT_EQ(refusal_of([&] { roads.read("/tmp/link-file"); }), FileRefusal::invalid_path);
  EXPECT_EQ(roads.memory->contents("/outside/secret.txt"), "secret");
  EXPECT_FALSE(roads.memory->exists("/outside/new.txt"));
}

TEST(ShellRoads, AFileStandingAsAParentIsAnInvalidPath) {
  Roads roads;
  roads.memory->seed_file("/tmp/plain", "x");
  EXPECT_EQ(refusal_of([&] { roads.write("/tmp/plain/child", "x"); }), FileRefusal::invalid_path);
  EXPECT_EQ(refusal_of([&] { roads.read("/tmp/plain/child"); }), FileRefusal::invalid_path);
}

TEST(ShellRoads, AMissingFileIsToldFromAnUnsearchableParent) {
  Roads roads;
  EXPECT_EQ(refusal_of([&] { roads.read("/tmp/absent.txt"); }), FileRefusal::not_found);
  EXPECT_EQ(refusal_of([&] { roads.read("/nowhere/absent.txt"); }), FileRefusal::not_found);
  roads.memory->seed_file("/tmp/locked/present.txt", "hidden");
  roads.memory->set_mode("/tmp/locked", 0600);  // readable, not searchable
  EXPECT_EQ(refusal_of([&] { roads.read("/tmp/locked/present.txt"); }),
            FileRefusal::permission_denied);
  EXPECT_EQ(refusal_of([&] { roads.read("/tmp/locked/absent.txt"); }),
            FileRefusal::permission_denied);
  EXPECT_EQ(refusal_of([&] { roads.write("/tmp/locked/new.txt", "x"); }),
            FileRefusal::permission_denied);
}

TEST(ShellRoads, PermissionsOnTheTargetAndItsDirectoryAreClassified) {
  Roads roads;
  roads.memory->seed_file("/tmp/unreadable.txt", "x");
  roads.memory->set_mode("/tmp/unreadable.txt", 0200);
  EXPECT_EQ(refusal_of([&] { roads.read("/tmp/unreadable.txt"); }), FileRefusal::permission_denied);
  roads.memory->seed_file("/tmp/readonly.txt", "keep");
  roads.memory->set_mode("/tmp/readonly.txt", 0444);
  EXPECT_EQ(refusal_of([&] { roads.write("/tmp/readonly.txt", "x"); }),
            FileRefusal::permission_denied);
  EXPECT_EQ(roads.memory->contents("/tmp/readonly.txt"), "keep");
  roads.memory->seed_directory("/sealed");
  roads.memory->set_mode("/sealed", 0555);
  EXPECT_EQ(refusal_of([&] { roads.write("/sealed/new/deeper.txt", "x"); }),
            FileRefusal::permission_denied);
}

TEST(ShellRoads, ADirectoryTargetIsIsDirectory) {
  Roads roads;
  EXPECT_EQ(refusal_of([&] { roads.write("/tmp", "x"); }), FileRefusal::is_directory);
  EXPECT_EQ(refusal_of([&] { roads.read("/tmp"); }), FileRefusal::is_directory);
  EXPECT_EQ(refusal_of([&] { roads.read("/"); }), FileRefusal::is_directory);
}

TEST(ShellRoads, ANonRegularTargetIsRefusedWithoutReadingIt) {
  Roads roads;
  ASSERT_EQ(roads.memory->exec(Command::argv({"mkfifo", "/tmp/fifo"}), in_root()).exit_code, 0);
  EXPECT_EQ(refusal_of([&] { roads.read("/tmp/fifo"); }), FileRefusal::invalid_path);
  EXPECT_EQ(refusal_of([&] { roads.write("/tmp/fifo", "x"); }), FileRefusal::invalid_path);
}

TEST(ShellRoads, PathsNoGuestCouldNameAreRefusedWithoutAnyCommand) {
  Roads roads;
  EXPECT_EQ(refusal_of([&] { roads.write(std::string("/tmp/a\0b", 8), "x"); }),
            FileRefusal::invalid_path);
  EXPECT_EQ(refusal_of([&] { roads.read(std::string(300, 'n')); }), FileRefusal::invalid_path);
  std::string long_path = "/tmp";
  while (long_path.size() < 4100) long_path += "/" + std::string(200, 'p');
  EXPECT_EQ(refusal_of([&] { roads.write(long_path, "x"); }), FileRefusal::invalid_path);
  EXPECT_EQ(refusal_of([&] { roads.read("a\\b"); }), FileRefusal::invalid_path);
  EXPECT_EQ(roads.sandbox.execs, 0);
  EXPECT_THROW(read_file_over_exec(roads.sandbox, "x", "relative", kTimeout, 10), InvalidArgument);
}

TEST(ShellRoads, CapsAreAppliedBeforeAnyByteMoves) {
  Roads roads;
  const auto cap_of = [&](const std::function<void()>& call) {
    try {
      call();
    } catch (const TransferCapExceeded& refused) {
      return refused.cap();
    }
    ADD_FAILURE() << "expected TransferCapExceeded";
    return std::string();
  };
  EXPECT_EQ(cap_of([&] {
              roads.write("/tmp/big", std::string(11, 'x'), TransferLimits{10, 100, 1});
            }),
            "files_in.max_bytes_per_file");
  EXPECT_EQ(cap_of([&] {
              roads.write("/tmp/big", std::string(11, 'x'), TransferLimits{100, 10, 1});
            }),
            "files_in.max_total_bytes");
  EXPECT_EQ(cap_of([&] {
              roads.write("/tmp/big", "x", TransferLimits{100, 100, 0});
            }),
            "files_in.max_files");
  EXPECT_EQ(roads.sandbox.execs, 0) << "a command ran before the caps were applied";
  roads.memory->seed_file("/tmp/large.txt", std::string(100, 'l'));
  EXPECT_EQ(cap_of([&] { roads.read("/tmp/large.txt", 99); }), "max_bytes");
  EXPECT_EQ(roads.sandbox.execs, 1) << "only the probe may run before a read is refused";
  EXPECT_EQ(roads.read("/tmp/large.txt", 100), std::string(100, 'l'));
}

TEST(ShellRoads, AReadWhoseFileGrowsPastItsBudgetIsUnfinishedAndOverCap) {
  Roads roads;
  roads.memory->seed_file("/tmp/growing.txt", "small");
  roads.sandbox.on_exec = [&](const Command& command, const ExecOptions& options) {
    if (command.line().rfind("base64 <", 0) == 0) {
      roads.memory->seed_file("/tmp/growing.txt", std::string(64 * 1024, 'g'));  // grew
    }
    return roads.memory->exec(command, options);
  };
  try {
    roads.read("/tmp/growing.txt", 1000);
    FAIL() << "a read past its budget returned";
  } catch (const ShellTransferUnfinished& unfinished) {
    EXPECT_TRUE(unfinished.over_cap());
  }
}

TEST(ShellRoads, ATimeoutMidTransferIsUnfinishedNotOverCap) {
  Roads roads;
  int commands = 0;
  roads.sandbox.on_exec = [&](const Command& command, const ExecOptions& options) -> ExecResult {
    if (++commands == 3) throw Timeout("the exec timed out");
    return roads.memory->exec(command, options);
  };
  ShellRoadOptions options;
  options.chunk_bytes = 10;
  try {
    roads.write("/tmp/t.txt", std::string(100, 't'), std::nullopt, options);
    FAIL();
  } catch (const ShellTransferUnfinished& unfinished) {
    EXPECT_FALSE(unfinished.over_cap());
  }
  EXPECT_FALSE(roads.memory->exists("/tmp/t.txt")) << "a partial file was moved into place";
}

TEST(ShellRoads, AnOverflowOrATransportFailureIsUnfinished) {
  Roads roads;
  roads.sandbox.on_exec = [](const Command&, const ExecOptions& options) -> ExecResult {
    throw ExecOutputLimitExceeded(*options.max_output_bytes, true);
  };
  EXPECT_THROW(roads.write("/tmp/x", "x"), ShellTransferUnfinished);
  roads.sandbox.on_exec = [](const Command&, const ExecOptions&) -> ExecResult {
    throw BackendError("connection reset", "tcp://10.0.0.1:2375 reset by peer");
  };
  try {
    roads.read("/tmp/x");
    FAIL();
  } catch (const ShellTransferUnfinished& unfinished) {
    EXPECT_EQ(std::string(unfinished.what()).find("10.0.0.1"), std::string::npos)
        << "provider detail leaked into a model-visible message";
  }
}

TEST(ShellRoads, ATransferThatRunsOutOfTimeIsUnfinished) {
  Roads roads;
  roads.sandbox.on_exec = [&](const Command& command, const ExecOptions& options) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    return roads.memory->exec(command, options);
  };
  ShellRoadOptions options;
  options.chunk_bytes = 1;
  EXPECT_THROW(write_file_over_exec(roads.sandbox, "/tmp/slow", std::string(50, 's'), "/work",
                                    Milliseconds(100), std::nullopt, options),
               ShellTransferUnfinished);
  EXPECT_FALSE(roads.memory->exists("/tmp/slow"));
}

TEST(ShellRoads, ACommandThatEndedBadlyIsFailedAndCleansUp) {
  Roads roads;
  int commands = 0;
  roads.sandbox.on_exec = [&](const Command& command, const ExecOptions& options) {
    ++commands;
    ExecResult result = roads.memory->exec(command, options);
    if (command.line().find("| base64 -d >>") != std::string::npos) {
      result.exit_code = 1;  // e.g. the disk filled
      result.stderr_bytes = "base64: write error: No space left on device\n";
    }
    return result;
  };
  ShellRoadOptions options;
  options.chunk_bytes = 10;
  try {
    roads.write("/tmp/full.txt", std::string(30, 'f'), std::nullopt, options);
    FAIL();
  } catch (const ShellTransferFailed& failed) {
    EXPECT_NE(std::string(failed.what()).find("No space left"), std::string::npos);
  }
  EXPECT_FALSE(roads.memory->exists("/tmp/full.txt"));
  EXPECT_EQ(roads.memory->exec(Command::argv({"ls", "-A", "/tmp"}), in_root()).stdout_bytes, "")
      << "the staging file was left behind";
}

TEST(ShellRoads, AShortStagedFileIsNeverMovedIntoPlace) {
  Roads roads;
  roads.sandbox.on_exec = [&](const Command& command, const ExecOptions& options) {
    ExecResult result = roads.memory->exec(command, options);
    if (command.line().rfind("wc -c <", 0) == 0) result.stdout_bytes = "3\n";  // lost bytes
    return result;
  };
  EXPECT_THROW(roads.write("/tmp/short.txt", "four"), ShellTransferFailed);
  EXPECT_FALSE(roads.memory->exists("/tmp/short.txt"));
}

TEST(ShellRoads, AGuestWithoutTheUtilitiesFailsCleanly) {
  // The scripted fake answers every command with exit 0 and no output: the probe's answer is
  // cut short, which must be a failure, never a guess.
  testing::InProcessSandboxOptions scripted;
  scripted.emulate_commands = false;
  testing::InProcessSandbox sandbox(scripted);
  EXPECT_THROW(write_file_over_exec(sandbox, "/tmp/x", "x", "/", kTimeout), ShellTransferFailed);
  EXPECT_THROW(read_file_over_exec(sandbox, "/tmp/x", "/", kTimeout, 10), ShellTransferFailed);
}

TEST(FileRefusals, PlaneErrorsAndEntriesMapToDeepagentsCodes) {
  EXPECT_EQ(file_refusal(NotFound("x")), FileRefusal::not_found);
  EXPECT_EQ(file_refusal(IsADirectory("x")), FileRefusal::is_directory);
  EXPECT_EQ(file_refusal(ConfinementError("x")), FileRefusal::invalid_path);
  EXPECT_EQ(file_refusal(NotADirectory("x")), FileRefusal::invalid_path);
  EXPECT_EQ(file_refusal(SystemError("x", 13)), FileRefusal::permission_denied);
  EXPECT_EQ(file_refusal(Timeout("x")), std::nullopt);
  EXPECT_EQ(file_refusal(BackendError("x")), std::nullopt);
  EXPECT_EQ(entry_refusal(std::nullopt), FileRefusal::not_found);
  EXPECT_EQ(entry_refusal(SandboxEntry{"d", EntryKind::directory, std::nullopt}),
            FileRefusal::is_directory);
  EXPECT_EQ(entry_refusal(SandboxEntry{"l", EntryKind::symlink, std::nullopt}),
            FileRefusal::invalid_path);
  EXPECT_EQ(entry_refusal(SandboxEntry{"f", EntryKind::file, 1}), std::nullopt);
}

}  // namespace
}  // namespace airlock

// ---- the same roads through a real dash and coreutils --------------------------------------

namespace airlock {
namespace {

class RealShellRoads : public ::testing::Test {
 protected:
  std::string at(const std::string& relative) const { return scratch_.path() + "/" + relative; }

  test_support::TempDir scratch_;
  test_support::HostSandbox shell_;
};

TEST_F(RealShellRoads, BinaryBytesRoundTripThroughRealUtilities) {
  std::string payload;
  for (int i = 0; i < 200'000; ++i) payload += static_cast<char>((i * 131 + 7) & 0xFF);
  ShellRoadOptions options;
  options.chunk_bytes = 30'000;
  write_file_over_exec(shell_, at("deep/er/file.bin"), payload, "/", kTimeout, std::nullopt,
                       options);
  EXPECT_EQ(read_file_over_exec(shell_, at("deep/er/file.bin"), "/", kTimeout, payload.size()),
            payload);
  std::size_t entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(at("deep/er"))) {
    (void)entry;
    ++entries;
  }
  EXPECT_EQ(entries, 1u) << "a staging file was left behind";
  write_file_over_exec(shell_, at("empty"), "", "/", kTimeout);
  EXPECT_EQ(read_file_over_exec(shell_, at("empty"), "/", kTimeout, 0), "");
  EXPECT_THROW(read_file_over_exec(shell_, at("deep/er/file.bin"), "/", kTimeout, 10),
               TransferCapExceeded);
}

TEST_F(RealShellRoads, RealLinksFifosAndDirectoriesAreClassified) {
  std::filesystem::create_directories(at("outside"));
  { std::ofstream(at("outside/secret.txt")) << "secret"; }
  std::filesystem::create_directory_symlink(at("outside"), at("linked"));
  ASSERT_EQ(::mkfifo(at("fifo").c_str(), 0600), 0);
  EXPECT_EQ(refusal_of([&] { write_file_over_exec(shell_, at("linked/x"), "x", "/", kTimeout); }),
            FileRefusal::invalid_path);
  EXPECT_EQ(
      refusal_of([&] { read_file_over_exec(shell_, at("linked/secret.txt"), "/", kTimeout, 100); }),
      FileRefusal::invalid_path);
  EXPECT_EQ(refusal_of([&] { read_file_over_exec(shell_, at("fifo"), "/", kTimeout, 100); }),
            FileRefusal::invalid_path);
  EXPECT_EQ(refusal_of([&] { read_file_over_exec(shell_, at("outside"), "/", kTimeout, 100); }),
            FileRefusal::is_directory);
  EXPECT_EQ(refusal_of([&] { read_file_over_exec(shell_, at("absent"), "/", kTimeout, 100); }),
            FileRefusal::not_found);
  EXPECT_FALSE(std::filesystem::exists(at("outside/x")));
}

}  // namespace
}  // namespace airlock

// ---- the same roads against the linux backend, for paths outside the work directory ---------

namespace airlock {
namespace {

// Reaches the linux backend through the factory by name (core's tests include no backend), and
// skips loudly when it is not in this tree or cannot run here.
class ShellRoadsOnLinux : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "SKIPPED: the linux backend needs root here";
    try {
      backend_ = make_backend("linux", json::Json{{"state_dir", state_.path()}}, "backend");
    } catch (const InvalidArgument& refused) {
      if (refused.message().find("no backend named") == std::string::npos) throw;
      GTEST_SKIP() << "SKIPPED: the linux backend is not in this tree (" << refused.message()
                   << ")";
    }
    SandboxSpec::Fields fields;
    fields.kind = "shell-roads";
    sandbox_ = backend_->acquire(key_, SandboxSpec(fields));
  }
  void TearDown() override {
    sandbox_.reset();
    if (backend_) {
      backend_->dispose(key_);
      backend_->purge_all();
    }
  }
  ExecResult sh(const std::string& line) {
    ExecOptions options;
    options.working_directory = "/";
    options.timeout = kTimeout;
    return sandbox_->exec(Command::shell(line), options);
  }

  test_support::TempDir state_;
  SandboxKey key_{"shell-roads", "linux", "test"};
  std::shared_ptr<SandboxBackend> backend_;
  std::shared_ptr<Sandbox> sandbox_;
};

TEST_F(ShellRoadsOnLinux, AWriteOutsideTheWorkDirectoryLandsWholeAndReadsBack) {
  std::string payload;
  for (int i = 0; i < 300'000; ++i) payload += static_cast<char>((i * 131 + 7) & 0xFF);
  write_file_over_exec(*sandbox_, "/tmp/roads/deep/file.bin", payload, kDefaultWorkDir, kTimeout);
  EXPECT_EQ(read_file_over_exec(*sandbox_, "/tmp/roads/deep/file.bin", kDefaultWorkDir, kTimeout,
                                payload.size()),
            payload);
  EXPECT_EQ(sh("ls -A /tmp/roads/deep").stdout_bytes, "file.bin\n") << "a staging file was left";
  EXPECT_EQ(sh("wc -c < /tmp/roads/deep/file.bin").stdout_text().find("300000"), 0u);
}

TEST_F(ShellRoadsOnLinux, ALinkPlantedByTheGuestIsAnInvalidPath) {
  ASSERT_EQ(sh("mkdir -p /tmp/outside && printf secret > /tmp/outside/secret.txt && "
               "ln -s /tmp/outside /tmp/linked")
                .exit_code,
            0);
  EXPECT_EQ(refusal_of([&] {
              write_file_over_exec(*sandbox_, "/tmp/linked/new.txt", "x", "/", kTimeout);
            }),
            FileRefusal::invalid_path);
  EXPECT_EQ(refusal_of([&] {
              read_file_over_exec(*sandbox_, "/tmp/linked/secret.txt", "/", kTimeout, 100);
            }),
            FileRefusal::invalid_path);
  EXPECT_NE(sh("test -e /tmp/outside/new.txt").exit_code, 0);
}

TEST_F(ShellRoadsOnLinux, AFifoMissingFilesAndDirectoriesAreClassifiedWithoutHanging) {
  ASSERT_EQ(sh("mkfifo /tmp/fifo").exit_code, 0);
  EXPECT_EQ(refusal_of([&] { read_file_over_exec(*sandbox_, "/tmp/fifo", "/", kTimeout, 100); }),
            FileRefusal::invalid_path);
  EXPECT_EQ(refusal_of([&] { read_file_over_exec(*sandbox_, "/tmp/absent", "/", kTimeout, 100); }),
            FileRefusal::not_found);
  EXPECT_EQ(refusal_of([&] { read_file_over_exec(*sandbox_, "/tmp", "/", kTimeout, 100); }),
            FileRefusal::is_directory);
}

TEST_F(ShellRoadsOnLinux, TheReadOnlyHostRootIsPermissionDeniedAndStaysUntouched) {
  // The host root is mounted read-only in the guest: the probe sees it cannot write there.
  EXPECT_EQ(refusal_of([&] {
              write_file_over_exec(*sandbox_, "/etc/airlock-roads-probe", "x", "/", kTimeout);
            }),
            FileRefusal::permission_denied);
  EXPECT_FALSE(std::filesystem::exists("/etc/airlock-roads-probe"));
  const ExecResult hostname = sh("cat /etc/hostname");
  if (hostname.exit_code == 0) {
    EXPECT_EQ(read_file_over_exec(*sandbox_, "/etc/hostname", "/", kTimeout, 4096),
              hostname.stdout_bytes);
  }
}

TEST_F(ShellRoadsOnLinux, CapsAreAppliedBeforeAnyCommand) {
  EXPECT_THROW(write_file_over_exec(*sandbox_, "/tmp/big", std::string(11, 'x'), "/", kTimeout,
                                    TransferLimits{10, 100, 1}),
               TransferCapExceeded);
  EXPECT_NE(sh("test -e /tmp/big").exit_code, 0);
  ASSERT_EQ(sh("head -c 5000 /dev/zero > /tmp/large").exit_code, 0);
  EXPECT_THROW(read_file_over_exec(*sandbox_, "/tmp/large", "/", kTimeout, 4999),
               TransferCapExceeded);
}

}  // namespace
}  // namespace airlock
