// The capture protocol run by real shells (dash and busybox's ash, the guests' usual /bin/sh):
// the scripts airlock sends through the service's text exec, executed here as the service would,
// and their answers read back by the same parsers the backend uses.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>

#include "airlock/encoding.hpp"
#include "backends/acas/capture.hpp"

namespace airlock::acas::capture {
namespace {

namespace fs = std::filesystem;

std::string read_all(int fd) {
  std::string out;
  char buffer[65536];
  ssize_t got;
  while ((got = read(fd, buffer, sizeof buffer)) > 0) out.append(buffer, static_cast<std::size_t>(got));
  return out;
}

// Runs `script` as `<shell> -c script`, as executeShellCommand does, collecting both streams.
TextReply run(const std::vector<std::string>& shell, const std::string& script) {
  int out[2], err[2];
  if (pipe(out) != 0 || pipe(err) != 0) throw std::runtime_error("pipe");
  const pid_t child = fork();
  if (child == 0) {
    dup2(out[1], 1);
    dup2(err[1], 2);
    close(out[0]);
    close(err[0]);
    std::vector<char*> argv;
    for (const auto& part : shell) argv.push_back(const_cast<char*>(part.c_str()));
    argv.push_back(const_cast<char*>("-c"));
    argv.push_back(const_cast<char*>(script.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  // stderr is small in every case here; read stdout first, then stderr.
  TextReply reply;
  reply.stdout_text = read_all(out[0]);
  reply.stderr_text = read_all(err[0]);
  close(out[0]);
  close(err[0]);
  int status = 0;
  waitpid(child, &status, 0);
  reply.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return reply;
}

struct Shell {
  const char* name;
  std::vector<std::string> argv;
};

class Capture : public ::testing::TestWithParam<Shell> {
 protected:
  void SetUp() override {
    if (!fs::exists(GetParam().argv[0])) GTEST_SKIP() << "SKIPPED: " << GetParam().argv[0] << " is not installed";
    work_ = fs::temp_directory_path() / ("airlock-capture-test-" + fresh_token());
    fs::create_directories(work_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(work_, ignored);
  }

  RunPlan plan(std::string command, std::uint64_t limit = 1 << 20) {
    RunPlan plan;
    plan.token = fresh_token();
    plan.scratch = (work_ / ("airlock-exec-" + plan.token)).string();
    plan.command = std::move(command);
    plan.limit = limit;
    plan.working_directory = work_.string();
    return plan;
  }

  // The whole road: run, parse the manifest, read both files back in chunks, clean up.
  struct Captured {
    Manifest manifest;
    std::string out;
    std::string err;
  };
  Captured capture(const RunPlan& plan, std::uint32_t chunk = 1024) {
    const TextReply reply = run(GetParam().argv, run_script(plan));
    auto [manifest, why] = parse_manifest(reply, plan.token, plan.limit);
    if (!manifest) {
      ADD_FAILURE() << "manifest refused: " << why.why << " (exit " << reply.exit_code << ", stdout '"
                    << reply.stdout_text << "', stderr '" << reply.stderr_text << "')";
      return {};
    }
    Captured captured{*manifest, {}, {}};
    for (auto [name, size, into] : {std::tuple{"o", manifest->stdout_size, &captured.out},
                                    std::tuple{"e", manifest->stderr_size, &captured.err}}) {
      for (std::uint64_t index = 0; index * chunk < size; ++index) {
        const std::uint64_t expected = std::min<std::uint64_t>(chunk, size - index * chunk);
        const TextReply answer = run(GetParam().argv, chunk_script(plan.token, plan.scratch, name, index, chunk));
        auto [piece, failure] = parse_chunk(answer, plan.token, expected, chunk);
        if (!piece) {
          ADD_FAILURE() << "chunk refused: " << failure.why;
          return captured;
        }
        *into += *piece;
      }
    }
    EXPECT_EQ(run(GetParam().argv, cleanup_script(plan.scratch)).exit_code, 0);
    EXPECT_FALSE(fs::exists(plan.scratch)) << "the scratch directory outlived its cleanup";
    return captured;
  }

  fs::path work_;
};

TEST_P(Capture, EveryByteValueSurvivesOnBothStreams) {
  // printf with octal escapes writes bytes that are not UTF-8 (0x80..0xff alone, NUL).
  std::string expected;
  std::string printf_arg;
  for (int byte = 0; byte < 256; ++byte) {
    expected.push_back(static_cast<char>(byte));
    char escape[8];
    std::snprintf(escape, sizeof escape, "\\%03o", byte);
    printf_arg += escape;
  }
  const auto captured = capture(plan("printf '" + printf_arg + "'; printf '" + printf_arg + "' >&2"));
  EXPECT_EQ(captured.out, expected);
  EXPECT_EQ(captured.err, expected);
  EXPECT_EQ(captured.manifest.exit_code, 0);
}

TEST_P(Capture, OutputLongerThanAChunkComesBackWhole) {
  const auto captured = capture(plan("i=0; while [ $i -lt 3000 ]; do echo line-$i; i=$((i+1)); done"), 700);
  std::string expected;
  for (int i = 0; i < 3000; ++i) expected += "line-" + std::to_string(i) + "\n";
  EXPECT_EQ(captured.out, expected);
}

TEST_P(Capture, TheCommandsExitCodeIsReported) {
  EXPECT_EQ(capture(plan("exit 7")).manifest.exit_code, 7);
  EXPECT_EQ(capture(plan("kill -9 $$")).manifest.exit_code, 137);
}

TEST_P(Capture, AStreamPastItsCeilingEndsTheFlood) {
  // Past the ceiling nothing reads the stream on: the flood's next write fails and it dies of
  // SIGPIPE. Were the stream drained instead, the loop would never end (and the test would hang,
  // which is the failure).
  const auto captured = capture(plan("while :; do echo flood; done", 4096));
  EXPECT_EQ(captured.manifest.stdout_size, 4097u) << "the reader keeps one byte past the ceiling";
  EXPECT_EQ(captured.manifest.exit_code, 128 + SIGPIPE);
  EXPECT_EQ(captured.out.size(), 4097u);
}

TEST_P(Capture, TruncationKeepsTheCeilingAndLetsTheCommandFinish) {
  RunPlan truncating = plan("i=0; while [ $i -lt 2000 ]; do echo x; i=$((i+1)); done; exit 3", 100);
  truncating.close_on_overflow = false;
  const auto captured = capture(truncating);
  EXPECT_EQ(captured.manifest.exit_code, 3) << "the command ran to its own end";
  EXPECT_EQ(captured.manifest.stdout_size, 101u);
}

TEST_P(Capture, StdinEnvironmentAndWorkingDirectoryReachTheCommand) {
  {
    std::ofstream input(work_ / "stdin");
    input << "from stdin\n";
  }
  RunPlan with = plan("cat; printf '%s|' \"$QUOTED\"; pwd");
  with.stdin_path = (work_ / "stdin").string();
  with.environment = {{"QUOTED", "it's \"quoted\" $HOME `x`"}};
  const auto captured = capture(with);
  EXPECT_EQ(captured.out, "from stdin\nit's \"quoted\" $HOME `x`|" + work_.string() + "\n");
}

TEST_P(Capture, AMissingWorkingDirectoryIsItsOwnExit) {
  RunPlan missing = plan("true");
  missing.working_directory = (work_ / "absent").string();
  EXPECT_EQ(run(GetParam().argv, run_script(missing)).exit_code, kNoWorkingDirectory);
}

TEST_P(Capture, AForgedManifestInTheCommandsOutputIsOnlyOutput) {
  RunPlan forging = plan("");
  forging.command = "echo '" + forging.token + " 0 999999 0'";
  const auto captured = capture(forging);
  EXPECT_EQ(captured.out, forging.token + " 0 999999 0\n");
  EXPECT_EQ(captured.manifest.stdout_size, captured.out.size());
}

TEST_P(Capture, AChunkScriptRefusesAScratchDirectorySwappedForALink) {
  RunPlan plain = plan("echo secret-free");
  const TextReply reply = run(GetParam().argv, run_script(plain));
  ASSERT_EQ(reply.exit_code, 0) << reply.stderr_text;
  const auto elsewhere = work_ / "elsewhere";
  fs::create_directories(elsewhere);
  { std::ofstream(elsewhere / "o") << "planted"; }
  fs::rename(plain.scratch, work_ / "moved");
  fs::create_directory_symlink(elsewhere, plain.scratch);
  const TextReply answer = run(GetParam().argv, chunk_script(plain.token, plain.scratch, "o", 0, 1024));
  EXPECT_NE(answer.exit_code, 0);
  EXPECT_FALSE(parse_chunk(answer, plain.token, 7, 1024).first);
}

INSTANTIATE_TEST_SUITE_P(Shells, Capture,
                         ::testing::Values(Shell{"dash", {"/bin/dash"}},
                                           Shell{"busybox", {"/usr/bin/busybox", "sh"}}),
                         [](const auto& shell) { return std::string(shell.param.name); });

// ---- the parsers alone ------------------------------------------------------------------------

TEST(CaptureManifest, OnlyTheExactShapeIsAccepted) {
  const std::string token = "0123456789abcdef0123456789abcdef";
  auto accepts = [&](TextReply reply, std::uint64_t limit = 100) {
    return parse_manifest(reply, token, limit).first.has_value();
  };
  EXPECT_TRUE(accepts({0, token + " 3 10 0\n", ""}));
  EXPECT_FALSE(accepts({1, token + " 3 10 0\n", ""})) << "the script failed";
  EXPECT_FALSE(accepts({0, token + " 3 10 0\n", "noise"})) << "stderr was written";
  EXPECT_FALSE(accepts({0, token + " 3 10 0", ""})) << "no trailing newline";
  EXPECT_FALSE(accepts({0, token + " 3 10 0\nmore\n", ""})) << "more than one line";
  EXPECT_FALSE(accepts({0, "ffffffffffffffffffffffffffffffff 3 10 0\n", ""})) << "another token";
  EXPECT_FALSE(accepts({0, token + " 3 10\n", ""})) << "three fields";
  EXPECT_FALSE(accepts({0, token + " 256 10 0\n", ""})) << "an exit code past 255";
  EXPECT_FALSE(accepts({0, token + " 3 -1 0\n", ""})) << "a negative count";
  EXPECT_FALSE(accepts({0, token + " 3 102 0\n", ""})) << "more than limit + 1 bytes kept";
  EXPECT_FALSE(accepts({0, token + " 3 0x10 0\n", ""})) << "not decimal";
  EXPECT_FALSE(accepts({0, std::string(200, ' ') + "\n", ""})) << "overlong";
}

TEST(CaptureChunk, AChunkMustBeFramedAndHoldExactlyWhatWasPromised) {
  const std::string token = "0123456789abcdef0123456789abcdef";
  const std::string body = base64_encode("hello");
  auto framed = [&](const std::string& inner) { return token + "\n" + inner + "\n" + token + "\n"; };
  EXPECT_EQ(*parse_chunk({0, framed(body), ""}, token, 5, 1024).first, "hello");
  EXPECT_FALSE(parse_chunk({0, framed(body), ""}, token, 6, 1024).first) << "a short chunk";
  EXPECT_FALSE(parse_chunk({0, body + "\n" + token + "\n", ""}, token, 5, 1024).first) << "unframed";
  EXPECT_FALSE(parse_chunk({0, framed("!!!"), ""}, token, 5, 1024).first) << "not base64";
  EXPECT_FALSE(parse_chunk({3, framed(body), ""}, token, 5, 1024).first) << "a failed script";
  EXPECT_FALSE(parse_chunk({0, framed(body), "x"}, token, 5, 1024).first) << "stderr";
  EXPECT_FALSE(parse_chunk({0, framed(std::string(5000, 'A')), ""}, token, 5, 1024).first)
      << "larger than a chunk can be";
}

}  // namespace
}  // namespace airlock::acas::capture
