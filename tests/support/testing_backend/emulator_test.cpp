// The in-process sandbox's command emulator: it must behave like a guest's shell over the same
// nodes the file plane serves, or the conformance suites run against it prove nothing.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <thread>

#include "airlock/backend_factory.hpp"
#include "airlock/errors.hpp"
#include "airlock/testing.hpp"

namespace airlock::testing {
namespace {

using namespace std::chrono_literals;

class Emulator : public ::testing::Test {
 protected:
  Emulator() { sandbox.seed_directory("/work"); }

  ExecResult sh(const std::string& line, std::string wd = "/work",
                Milliseconds timeout = Milliseconds(5000)) {
    ExecOptions options;
    options.working_directory = std::move(wd);
    options.timeout = timeout;
    return sandbox.exec(Command::shell(line), options);
  }
  ExecResult argv(std::vector<std::string> arguments, std::string wd = "/work") {
    ExecOptions options;
    options.working_directory = std::move(wd);
    return sandbox.exec(Command::argv(std::move(arguments)), options);
  }

  InProcessSandbox sandbox{
      InProcessSandboxOptions{{{"python3", ExecResult{.stdout_bytes = "scripted"}}},
                              nullptr,
                              "default",
                              "in-process-1",
                              true}};
};

TEST_F(Emulator, ArgvRunsAndExitCodesAreFaithful) {
  const auto ran = argv({"printf", "ok-ran"});
  EXPECT_EQ(ran.stdout_bytes, "ok-ran");
  EXPECT_EQ(ran.exit_code, 0);
  EXPECT_EQ(sh("exit 7").exit_code, 7);
  EXPECT_EQ(sh("false").exit_code, 1);
  EXPECT_EQ(sh("true && exit 3; exit 4").exit_code, 3);
  EXPECT_EQ(sh("false && exit 3; printf after").stdout_bytes, "after");
  EXPECT_EQ(sh("printf a; printf b\nprintf c").stdout_bytes, "abc");
}

TEST_F(Emulator, AnArgumentIsNeverReparsedByTheShell) {
  const auto result = argv({"sh", "-c", "printf '%s' \"$1\"", "probe", "a b$(echo injected)c"});
  EXPECT_EQ(result.stdout_bytes, "a b$(echo injected)c");
  EXPECT_EQ(argv({"sh", "-c", "printf '%s|' \"$0:$2\"", "zero", "a", "b"}).stdout_bytes, "zero:b|");
  // Expansions it does not emulate (field splitting, "$@", "$#") are not run at all.
  for (const std::string script : {"printf '%s|' \"$@\"", "printf '%s|' $1", "printf \"$#\""}) {
    EXPECT_EQ(argv({"sh", "-c", script, "zero", "x y", "z"}).stdout_bytes, "default") << script;
  }
}

TEST_F(Emulator, SyntaxOutsideTheSubsetIsNeverHalfRun) {
  // Each falls back to the scripted default; none of them may have written anything.
  const std::vector<std::string> lines = {"printf x > /work/f; echo $(id)",
                                          "printf x > /work/f; if true; then :; fi",
                                          "printf x > /work/f; ls *",
                                          "printf x > /work/f; python3 -c 1",
                                          "X=1 printf x > /work/f",
                                          "printf x > /work/f & wait",
                                          "printf x > /work/f; echo $HOME",
                                          "printf x > /work/f; `id`",
                                          "printf x > /work/f || true",
                                          "! printf x > /work/f",
                                          "printf x > /work/f; cat y 2>/dev/null",
                                          "printf x > /work/f # a comment",
                                          "printf x > /work/f; cd /tmp",
                                          "printf x > /work/f; [ -e f ]",
                                          "printf x > /work/f; sh -c true",
                                          "printf \\x > /work/f"};
  for (const auto& line : lines) {
    const auto result = sh(line);
    EXPECT_EQ(result.stdout_bytes,
              line.find("python3") != std::string::npos ? "scripted" : "default")
        << line;
    EXPECT_FALSE(sandbox.exists("/work/f")) << line;
  }
  EXPECT_EQ(sandbox.commands().size(), lines.size());
}

TEST_F(Emulator, EachExecHasAProcessIdOfItsOwn) {
  const std::string first = sh("printf \"$$\"").stdout_bytes;
  const std::string second = sh("printf \"$$\"").stdout_bytes;
  EXPECT_FALSE(first.empty());
  EXPECT_NE(first, second);
  EXPECT_EQ(sh("mkdir d && mv d \"d.$$\" && ls").stdout_bytes.rfind("d.", 0), 0u);
}

TEST(EmulatorFallback, UnemulatedCommandsCanFailLikeAGuestWithoutThem) {
  InProcessSandboxOptions options;
  options.unemulated_not_found = true;
  options.outputs = {{"python3", ExecResult{.stdout_bytes = "scripted"}}};
  InProcessSandbox sandbox(options);
  ExecOptions at_root;
  at_root.working_directory = "/";
  const auto missing = sandbox.exec(Command::shell("curl -s https://example.com/"), at_root);
  EXPECT_EQ(missing.exit_code, 127);
  EXPECT_NE(missing.stderr_text().find("not found"), std::string::npos);
  // A scripted marker still answers.
  EXPECT_EQ(sandbox.exec(Command::shell("python3 -c 1"), at_root).stdout_bytes, "scripted");
}

TEST(EmulatorFallback, TheFactoryChoosesHowUnemulatedCommandsAnswer) {
  const auto backend =
      make_backend("testing", json::Json{{"unemulated_commands", "not_found"}}, "backend");
  SandboxSpec::Fields fields;
  fields.kind = "k";
  const auto sandbox = backend->acquire(SandboxKey{"s", "t", "a"}, SandboxSpec(fields));
  ExecOptions at_root;
  at_root.working_directory = "/";
  EXPECT_EQ(sandbox->exec(Command::shell("curl x"), at_root).exit_code, 127);
  EXPECT_THROW(make_backend("testing", json::Json{{"unemulated_commands", "maybe"}}, "backend"),
               InvalidArgument);
}

TEST_F(Emulator, TheWorkingDirectoryIsHonouredAndMustExist) {
  sandbox.seed_directory("/work/sub");
  EXPECT_EQ(argv({"pwd"}, "/work/sub").stdout_bytes, "/work/sub\n");
  EXPECT_EQ(argv({"cat", "f.txt"}, "/work/sub").exit_code, 1);
  sandbox.seed_file("/work/sub/f.txt", "relative");
  EXPECT_EQ(argv({"cat", "f.txt"}, "/work/sub").stdout_bytes, "relative");
  EXPECT_THROW(argv({"pwd"}, "/missing"), NotFound);
}

TEST_F(Emulator, SleepHonoursTheTimeout) {
  const auto started = std::chrono::steady_clock::now();
  try {
    sh("printf partial; sleep 30", "/work", Milliseconds(300));
    FAIL() << "sleep 30 returned under a 300 ms timeout";
  } catch (const Timeout& timeout) {
    EXPECT_EQ(timeout.partial_stdout(), "partial");
  }
  const auto elapsed = std::chrono::steady_clock::now() - started;
  EXPECT_GE(elapsed, 250ms);
  EXPECT_LT(elapsed, 10s);
  EXPECT_EQ(sh("sleep 0.01; printf done").stdout_bytes, "done");
}

TEST_F(Emulator, ACancelledCommandStopsAndRaisesTimeout) {
  std::stop_source stop;
  ExecOptions options;
  options.working_directory = "/work";
  options.timeout = Milliseconds(60'000);
  options.stop = stop.get_token();
  std::thread canceller([&] {
    std::this_thread::sleep_for(100ms);
    stop.request_stop();
  });
  EXPECT_THROW(sandbox.exec(Command::argv({"sleep", "30"}), options), Timeout);
  canceller.join();
}

TEST_F(Emulator, CatOfALinkFollowsItInsideTheEmulatedFilesystem) {
  sandbox.seed_file("/outside/secret.txt", "secret");
  sandbox.seed_symlink("/work/link", "/outside/secret.txt");
  sandbox.seed_symlink("/work/relative", "../outside/secret.txt");
  EXPECT_EQ(argv({"cat", "link"}).stdout_bytes, "secret");
  EXPECT_EQ(argv({"cat", "relative"}).stdout_bytes, "secret");
  // The file plane never follows it.
  EXPECT_THROW(sandbox.read_file("link", "/work", 100), SystemError);
  EXPECT_EQ(sh("test -L link && test -f link && printf both").stdout_bytes, "both");
}

TEST_F(Emulator, LinksMadeByLnCarryTheirTargets) {
  sandbox.seed_file("/outside/a.txt", "A");
  sandbox.seed_directory("/outside/dir");
  EXPECT_EQ(argv({"ln", "-sfn", "/outside/a.txt", "/work/l"}).exit_code, 0);
  EXPECT_EQ(sandbox.stat_file("l", "/work")->kind, EntryKind::symlink);
  EXPECT_EQ(argv({"cat", "l"}).stdout_bytes, "A");
  // -n replaces a link to a directory instead of descending into it.
  ASSERT_EQ(argv({"ln", "-sfn", "/outside/dir", "/work/d"}).exit_code, 0);
  ASSERT_EQ(argv({"ln", "-sfn", "/outside/a.txt", "/work/d"}).exit_code, 0);
  EXPECT_EQ(argv({"cat", "d"}).stdout_bytes, "A");
  EXPECT_FALSE(sandbox.exists("/outside/dir/a.txt"));
  // Without -f an existing name is refused.
  const auto refused = argv({"ln", "-s", "/x", "/work/l"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.stderr_text().find("File exists"), std::string::npos);
  // A dangling link is a link, not nothing.
  ASSERT_EQ(argv({"ln", "-s", "/nowhere", "/work/dangling"}).exit_code, 0);
  EXPECT_EQ(argv({"test", "-L", "dangling"}).exit_code, 0);
  EXPECT_EQ(argv({"test", "-e", "dangling"}).exit_code, 1);
}

TEST_F(Emulator, RedirectionsWriteAppendReadAndDiscard) {
  EXPECT_EQ(sh("printf one > f.txt && printf two >> f.txt && cat < f.txt").stdout_bytes, "onetwo");
  EXPECT_EQ(*sandbox.contents("/work/f.txt"), "onetwo");
  EXPECT_EQ(sh("printf gone > /dev/null; printf after").stdout_bytes, "after");
  const auto missing = sh("cat missing");
  EXPECT_NE(missing.stderr_text().find("No such file or directory"), std::string::npos);
  EXPECT_TRUE(missing.stdout_bytes.empty());
  EXPECT_EQ(sh("printf err >&2").stderr_bytes, "err");
  // A redirection through a link writes where the link points, as in a guest.
  sandbox.seed_file("/outside/target.txt", "old");
  sandbox.seed_symlink("/work/via", "/outside/target.txt");
  sh("printf new > via");
  EXPECT_EQ(*sandbox.contents("/outside/target.txt"), "new");
}

TEST_F(Emulator, PipelinesAndBase64RoundTripBinary) {
  const auto encoded = sh("printf '\\000\\377\\001abc' | base64");
  EXPECT_EQ(encoded.stdout_bytes, "AP8BYWJj\n");
  const auto decoded = sh("printf '%s' AP8BYWJj | base64 -d > bin && wc -c < bin && cat bin");
  EXPECT_EQ(decoded.stdout_bytes, std::string("6\n\0\xff\x01"
                                              "abc",
                                              8));
  EXPECT_EQ(sh("printf '!!' | base64 -d").exit_code, 1);
  EXPECT_EQ(sh("printf abc | wc -c").stdout_bytes, "3\n");
}

TEST_F(Emulator, StdinBytesReachTheCommand) {
  ExecOptions options;
  options.working_directory = "/work";
  options.stdin_bytes = "from stdin";
  EXPECT_EQ(sandbox.exec(Command::argv({"cat"}), options).stdout_bytes, "from stdin");
}

TEST_F(Emulator, StdinFdIsReadToItsEndOfFileAndFed) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
  std::thread writer([&] {
    for (const std::string_view piece : {"slow", "ly ", "fed"}) {
      std::this_thread::sleep_for(30ms);
      ASSERT_EQ(::write(pipe_fds[1], piece.data(), piece.size()),
                static_cast<ssize_t>(piece.size()));
    }
    ::close(pipe_fds[1]);
  });
  ExecOptions options;
  options.working_directory = "/work";
  options.stdin_fd = pipe_fds[0];
  EXPECT_EQ(sandbox.exec(Command::argv({"cat"}), options).stdout_bytes, "slowly fed");
  writer.join();
  ::close(pipe_fds[0]);
}

TEST_F(Emulator, AStdinFdThatNeverClosesEndsInTimeout) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
  ExecOptions options;
  options.working_directory = "/work";
  options.timeout = Milliseconds(200);
  options.stdin_fd = pipe_fds[0];
  EXPECT_THROW(sandbox.exec(Command::argv({"cat"}), options), Timeout);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

TEST_F(Emulator, ContradictoryOptionsAndATerminalAreRefusedBeforeAnythingRuns) {
  const std::size_t before = sandbox.commands().size();
  ExecOptions both;
  both.working_directory = "/work";
  both.stdin_bytes = "x";
  both.stdin_fd = 0;
  EXPECT_THROW(sandbox.exec(Command::shell("printf ran > /work/ran"), both), InvalidArgument);
  ExecOptions terminal;
  terminal.working_directory = "/work";
  terminal.terminal = WindowSize{40, 120};
  EXPECT_THROW(sandbox.exec(Command::shell("printf ran > /work/ran"), terminal), NotSupported);
  EXPECT_FALSE(sandbox.exists("/work/ran"));
  EXPECT_EQ(sandbox.commands().size(), before);
}

TEST_F(Emulator, OnOutputReceivesTheOutputAndTheResultKeepsNone) {
  std::vector<std::pair<OutputStream, std::string>> chunks;
  ExecOptions options;
  options.working_directory = "/work";
  options.on_output = [&](OutputStream stream, std::string_view bytes) {
    chunks.emplace_back(stream, std::string(bytes));
  };
  const auto result = sandbox.exec(Command::shell("printf out; printf err >&2"), options);
  EXPECT_TRUE(result.stdout_bytes.empty());
  EXPECT_TRUE(result.stderr_bytes.empty());
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0], std::make_pair(OutputStream::stdout_stream, std::string("out")));
  EXPECT_EQ(chunks[1], std::make_pair(OutputStream::stderr_stream, std::string("err")));

  // A Timeout's partial output goes to the callback too; the error carries none.
  chunks.clear();
  options.timeout = Milliseconds(100);
  try {
    sandbox.exec(Command::shell("printf partial; sleep 30"), options);
    FAIL() << "sleep 30 returned under a 100 ms timeout";
  } catch (const Timeout& timeout) {
    EXPECT_TRUE(timeout.partial_stdout().empty());
  }
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0].second, "partial");
}

TEST_F(Emulator, AQueuedSignalEndsASleepWithItsStatus) {
  for (const int number : {SIGINT, SIGTERM}) {
    auto control = std::make_shared<ExecControl>();
    ExecOptions options;
    options.working_directory = "/work";
    options.timeout = Milliseconds(30'000);
    options.control = control;
    std::thread sender([&] {
      std::this_thread::sleep_for(100ms);
      control->resize(WindowSize{10, 10});  // taken and ignored: no terminal
      control->signal(SIGWINCH);            // ignored by default, as by a process
      control->signal(number);
    });
    const auto started = std::chrono::steady_clock::now();
    const auto result =
        sandbox.exec(Command::shell("printf before; sleep 30; printf after"), options);
    sender.join();
    EXPECT_LT(std::chrono::steady_clock::now() - started, 10s);
    EXPECT_EQ(result.exit_code, 128 + number);
    EXPECT_EQ(result.term_signal, number);
    EXPECT_EQ(result.stdout_bytes, "before");
  }
  // Queued before the command starts: it ends at its first command.
  auto control = std::make_shared<ExecControl>();
  control->signal(SIGTERM);
  ExecOptions options;
  options.working_directory = "/work";
  options.control = control;
  EXPECT_EQ(sandbox.exec(Command::shell("printf x > /work/late"), options).exit_code, 143);
  EXPECT_FALSE(sandbox.exists("/work/late"));
  // Without a signal, a control changes nothing.
  options.control = std::make_shared<ExecControl>();
  EXPECT_EQ(sandbox.exec(Command::shell("sleep 0.05; printf ok"), options).stdout_bytes, "ok");
}

TEST_F(Emulator, RemovalsNeverFollowLinks) {
  sandbox.seed_file("/outside/keep.txt", "keep");
  sandbox.seed_directory("/work/tree/inner");
  sandbox.seed_symlink("/work/tree/inner/out", "/outside");
  sandbox.seed_symlink("/work/to-file", "/outside/keep.txt");
  EXPECT_EQ(argv({"rm", "-f", "to-file"}).exit_code, 0);
  EXPECT_EQ(argv({"rm", "-rf", "tree"}).exit_code, 0);
  EXPECT_FALSE(sandbox.exists("/work/tree"));
  EXPECT_FALSE(sandbox.exists("/work/to-file"));
  EXPECT_EQ(*sandbox.contents("/outside/keep.txt"), "keep");
  sandbox.seed_directory("/work/dir");
  EXPECT_EQ(argv({"rm", "dir"}).exit_code, 1);
  EXPECT_EQ(argv({"rm", "nothing"}).exit_code, 1);
  EXPECT_EQ(argv({"rm", "-f", "nothing"}).exit_code, 0);
}

TEST_F(Emulator, MkdirMvAndLsWorkOnTheSameNodesAsTheFilePlane) {
  ASSERT_EQ(argv({"mkdir", "-p", "a/b/c"}).exit_code, 0);
  EXPECT_EQ(sandbox.stat_file("a/b/c", "/work")->kind, EntryKind::directory);
  EXPECT_EQ(argv({"mkdir", "a"}).exit_code, 1);
  sandbox.write_file("a/b/c/file.txt", "content", "/work");
  ASSERT_EQ(argv({"mv", "-f", "a/b/c/file.txt", "moved.txt"}).exit_code, 0);
  EXPECT_EQ(sandbox.read_file("moved.txt", "/work", 100), "content");
  ASSERT_EQ(argv({"mv", "moved.txt", "a/moved.txt"}).exit_code, 0);
  EXPECT_EQ(*sandbox.contents("/work/a/moved.txt"), "content");
  ASSERT_EQ(argv({"mv", "a/b", "renamed"}).exit_code, 0);  // a whole tree
  EXPECT_TRUE(sandbox.exists("/work/renamed/c"));
  sandbox.write_file(".hidden", "", "/work");
  EXPECT_EQ(argv({"ls"}).stdout_bytes, "a\nrenamed\n");
  EXPECT_EQ(argv({"ls", "-A"}).stdout_bytes, ".hidden\na\nrenamed\n");
}

TEST_F(Emulator, PermissionBitsAreEnforcedForTheGuest) {
  sandbox.write_file("locked/secret.txt", "s", "/work");
  sandbox.write_file("unreadable.txt", "u", "/work");
  ASSERT_EQ(argv({"chmod", "000", "unreadable.txt"}).exit_code, 0);
  ASSERT_EQ(argv({"chmod", "600", "locked"}).exit_code, 0);
  const auto denied = argv({"cat", "unreadable.txt"});
  EXPECT_EQ(denied.exit_code, 1);
  EXPECT_NE(denied.stderr_text().find("Permission denied"), std::string::npos);
  EXPECT_EQ(argv({"cat", "locked/secret.txt"}).exit_code, 1);
  EXPECT_EQ(argv({"test", "-r", "unreadable.txt"}).exit_code, 1);
  EXPECT_EQ(argv({"test", "-x", "locked"}).exit_code, 1);
  EXPECT_EQ(sh("printf x > locked/new.txt").exit_code, 1);
  // The file plane acts with host authority, as real backends do.
  EXPECT_EQ(sandbox.read_file("unreadable.txt", "/work", 10), "u");
}

TEST_F(Emulator, TheOutputCeilingRefusesOrTruncates) {
  ExecOptions options;
  options.working_directory = "/work";
  options.max_output_bytes = 100;
  EXPECT_THROW(sandbox.exec(Command::shell("head -c 10000 /dev/zero"), options),
               ExecOutputLimitExceeded);
  // Many writes, none over the ceiling alone: the ceiling is on their sum.
  EXPECT_THROW(sandbox.exec(Command::shell("printf 'x%s' 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 "
                                           "18 19 20; printf '%s' " +
                                           std::string(60, 'y')),
                            options),
               ExecOutputLimitExceeded);
  options.overflow = OutputOverflow::truncate;
  const auto truncated = sandbox.exec(Command::shell("head -c 10000 /dev/zero; exit 3"), options);
  EXPECT_EQ(truncated.stdout_bytes.size(), 100u);
  EXPECT_TRUE(truncated.truncated);
  EXPECT_EQ(truncated.exit_code, 3);
  // A scripted answer is held to the ceiling too.
  options.overflow = OutputOverflow::refuse;
  options.max_output_bytes = 3;
  EXPECT_THROW(sandbox.exec(Command::shell("python3 -c 1"), options), ExecOutputLimitExceeded);
  EXPECT_EQ(sandbox.exec_bounded(Command::argv({"printf", "ok"}), "/work", Milliseconds(1000), 2)
                .stdout_bytes,
            "ok");
}

TEST_F(Emulator, AFifoBlocksAReaderUntilTheTimeout) {
  ASSERT_EQ(argv({"mkfifo", "pipe"}).exit_code, 0);
  EXPECT_EQ(sandbox.stat_file("pipe", "/work")->kind, EntryKind::other);
  EXPECT_THROW(sh("cat pipe", "/work", Milliseconds(200)), Timeout);
  EXPECT_EQ(sh("test -e pipe && printf there").stdout_bytes, "there");
  EXPECT_EQ(argv({"test", "-f", "pipe"}).exit_code, 1);
  EXPECT_THROW(sandbox.read_file("pipe", "/work", 10), SystemError);
}

TEST_F(Emulator, AHardLinkIsOtherToThePlaneAndTheSameFileToTheGuest) {
  sandbox.seed_file("/outside/secret.txt", "secret");
  ASSERT_EQ(argv({"ln", "/outside/secret.txt", "/work/hard"}).exit_code, 0);
  EXPECT_EQ(sandbox.stat_file("hard", "/work")->kind, EntryKind::other);
  EXPECT_THROW(sandbox.read_file("hard", "/work", 100), SystemError);
  EXPECT_EQ(argv({"cat", "hard"}).stdout_bytes, "secret");
  EXPECT_EQ(argv({"ln", "/outside", "/work/dirlink"}).exit_code, 1);
}

TEST_F(Emulator, OverlongNamesAndPathsAreRefusedLikeAGuestKernel) {
  const std::string long_name(256, 'n');
  EXPECT_THROW(sandbox.write_file(long_name, "x", "/work"), SystemError);
  std::string long_path;
  while (long_path.size() < 4100) long_path += std::string(200, 'p') + "/";
  long_path += "leaf.txt";
  EXPECT_THROW(sandbox.write_file(long_path, "x", "/work"), SystemError);
  EXPECT_THROW(sandbox.stat_file(long_path, "/work"), SystemError);
  EXPECT_THROW(sandbox.read_file(long_path, "/work", 10), SystemError);
  const auto guest = argv({"mkdir", "-p", long_path});
  EXPECT_NE(guest.exit_code, 0);
  EXPECT_NE(guest.stderr_text().find("too long"), std::string::npos) << guest.stderr_text();
  EXPECT_EQ(argv({"printf", "still-alive"}).stdout_bytes, "still-alive");
}

TEST_F(Emulator, PrintfFormatsLikeAGuestShell) {
  EXPECT_EQ(argv({"printf", "%s-%s|", "a", "42"}).stdout_bytes, "a-42|");
  EXPECT_EQ(argv({"printf", "%s\\n", "one", "two"}).stdout_bytes, "one\ntwo\n");
  EXPECT_EQ(argv({"printf", "\\101\\0\\n"}).stdout_bytes, std::string("A\0\n", 3));
  EXPECT_EQ(argv({"echo", "x", "y"}).stdout_bytes, "x y\n");
}

// What the emulator does not run, it says so about and fails: it never guesses at an option or
// an operator, and never half-runs a command line.
TEST_F(Emulator, AnOptionItDoesNotEmulateIsRefusedNeverGuessed) {
  sandbox.write_file("f", "x", "/work");
  sandbox.seed_directory("/work/dir");
  for (const std::vector<std::string>& refused :
       std::vector<std::vector<std::string>>{{"printf", "%d", "42"},
                                             {"printf", "%5s", "x"},
                                             {"printf", "%b", "a\\tb"},
                                             {"printf", "a\\tb"},
                                             {"echo", "-n", "x"},
                                             {"test", "-s", "f"},
                                             {"test", "3", "-lt", "4"},
                                             {"test", "!", "-e", "f"},
                                             {"wc", "-l"},
                                             {"wc", "-c", "f"},
                                             {"base64", "-w", "0"},
                                             {"base64", "f"},
                                             {"head", "-n", "1", "f"},
                                             {"ln", "-sT", "f", "g"},
                                             {"ls", "-a"},
                                             {"mv", "f", "dir"},
                                             {"exit"}}) {
    const auto result = argv(refused);
    EXPECT_EQ(result.exit_code, 2) << refused[0] << " " << refused[1];
    EXPECT_NE(result.stderr_text().find("not supported by the in-process emulator"),
              std::string::npos)
        << refused[0] << " " << refused[1] << ": " << result.stderr_text();
    EXPECT_TRUE(result.stdout_bytes.empty()) << refused[0] << " " << refused[1];
  }
  EXPECT_EQ(*sandbox.contents("/work/f"), "x");
  EXPECT_FALSE(sandbox.exists("/work/dir/f"));
  // Commands it does not have are not run: the scripted answer applies.
  for (const std::vector<std::string>& absent : std::vector<std::vector<std::string>>{
           {"[", "-e", "f", "]"}, {"cd", "dir"}, {"sh", "-c", "sh -c true"}}) {
    EXPECT_EQ(argv(absent).stdout_bytes, "default") << absent[0];
  }
}

}  // namespace
}  // namespace airlock::testing
