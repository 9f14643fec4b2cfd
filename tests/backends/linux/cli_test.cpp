// `airlock run`, `ls` and `purge`, end to end through the built CLI.
#include <sys/wait.h>

#include <fstream>
#include <sstream>

#include "airlock/json.hpp"
#include "backends/linux/state_store.hpp"
#include "linux/fixture.hpp"

#ifndef AIRLOCK_CLI
#error "AIRLOCK_CLI must name the airlock executable"
#endif

namespace airlock::linux_backend::testing {
namespace {

struct Outcome {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs the CLI with `arguments` (no shell), in `directory`, capturing both streams.
Outcome airlock_cli(const std::vector<std::string>& arguments, const std::string& directory,
                    const std::string& stdin_text = "") {
  TemporaryDirectory capture("airlock-cli-capture");
  const std::string out_path = (capture.path() / "out").string();
  const std::string err_path = (capture.path() / "err").string();
  const std::string in_path = (capture.path() / "in").string();
  std::ofstream(in_path) << stdin_text;
  const pid_t child = ::fork();
  if (child == 0) {
    if (::chdir(directory.c_str()) != 0) ::_exit(126);
    ::freopen(in_path.c_str(), "r", stdin);
    ::freopen(out_path.c_str(), "w", stdout);
    ::freopen(err_path.c_str(), "w", stderr);
    std::vector<char*> argv{const_cast<char*>(AIRLOCK_CLI)};
    for (const auto& argument : arguments) argv.push_back(const_cast<char*>(argument.c_str()));
    argv.push_back(nullptr);
    ::execv(AIRLOCK_CLI, argv.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  Outcome outcome;
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::stringstream out;
  out << std::ifstream(out_path).rdbuf();
  std::stringstream err;
  err << std::ifstream(err_path).rdbuf();
  outcome.out = out.str();
  outcome.err = err.str();
  return outcome;
}

class CliTest : public LinuxBackendTest {
 protected:
  void SetUp() override {
    LinuxBackendTest::SetUp();
    if (IsSkipped()) return;
    workspace_ = std::make_unique<TemporaryDirectory>("airlock-cli-workspace");
    std::ofstream(workspace_->path() / "backends.json")
        << "{\"linux\": {\"state_dir\": \"" << state_->path().string() << "\"}}";
  }
  std::vector<std::string> base(const std::string& subcommand) {
    return {subcommand, "--backend-config", (workspace_->path() / "backends.json").string()};
  }
  Outcome run(std::vector<std::string> extra, const std::string& stdin_text = "") {
    auto arguments = base("run");
    arguments.insert(arguments.end(), {"--min-isolation", "container", "--scope", key_.scope});
    arguments.insert(arguments.end(), extra.begin(), extra.end());
    return airlock_cli(arguments, workspace_->path().string(), stdin_text);
  }
  std::unique_ptr<TemporaryDirectory> workspace_;
};

TEST_F(CliTest, RunPassesTheGuestsExitCodeAndOutput) {
  const Outcome outcome = run({"--", "sh", "-c", "echo out; echo err >&2; exit 7"});
  EXPECT_EQ(outcome.exit_code, 7) << outcome.err;
  EXPECT_EQ(outcome.out, "out\n");
  EXPECT_NE(outcome.err.find("err\n"), std::string::npos);
  EXPECT_NE(outcome.err.find("backend 'linux' (container)"), std::string::npos) << outcome.err;
  EXPECT_TRUE(StateStore(state_->path()).ids().empty()) << "run did not dispose";
}

TEST_F(CliTest, RunRefusesBelowTheDefaultFloor) {
  auto arguments = base("run");
  arguments.insert(arguments.end(), {"--", "true"});
  const Outcome outcome = airlock_cli(arguments, workspace_->path().string());
  EXPECT_EQ(outcome.exit_code, 125);
  EXPECT_NE(outcome.err.find("SandboxBackendNotPermitted"), std::string::npos) << outcome.err;
  EXPECT_TRUE(StateStore(state_->path()).ids().empty());
}

TEST_F(CliTest, ATimeoutExits124) {
  const Outcome outcome = run({"--timeout", "1", "--", "sleep", "30"});
  EXPECT_EQ(outcome.exit_code, 124) << outcome.err;
  EXPECT_TRUE(StateStore(state_->path()).ids().empty()) << "run did not dispose after a timeout";
}

TEST_F(CliTest, FilesGoInAndComeOut) {
  std::ofstream(workspace_->path() / "input.txt") << "from the host\n";
  const Outcome outcome =
      run({"--put", "input.txt=in/input.txt", "--get", "result/answer.txt", "--out", "landed",
           "--shell", "--", "mkdir -p result && tr a-z A-Z < in/input.txt > result/answer.txt"});
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  std::stringstream landed;
  landed << std::ifstream(workspace_->path() / "landed" / "result" / "answer.txt").rdbuf();
  EXPECT_EQ(landed.str(), "FROM THE HOST\n");
}

TEST_F(CliTest, AnOutputCannotLandThroughALinkInTheOutputDirectory) {
  std::filesystem::create_directories(workspace_->path() / "landed");
  TemporaryDirectory elsewhere("airlock-cli-elsewhere");
  std::filesystem::create_directory_symlink(elsewhere.path(), workspace_->path() / "landed" / "result");
  const Outcome outcome = run({"--get", "result/answer.txt", "--out", "landed", "--shell", "--",
                               "mkdir -p result && echo x > result/answer.txt"});
  EXPECT_EQ(outcome.exit_code, 125) << outcome.err;
  EXPECT_NE(outcome.err.find("SandboxLandingNotConfined"), std::string::npos) << outcome.err;
  EXPECT_FALSE(std::filesystem::exists(elsewhere.path() / "answer.txt"));
}

TEST_F(CliTest, RunJsonReportsTheDecisionAndResult) {
  const Outcome outcome = run({"--shell", "--", "printf", "'%s'", "hello"}, "");
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  auto arguments = std::vector<std::string>{"--json"};
  auto base_arguments = base("run");
  arguments.insert(arguments.end(), base_arguments.begin(), base_arguments.end());
  arguments.insert(arguments.end(), {"--min-isolation", "container", "--scope", key_.scope,
                                     "--stdin", "--", "wc", "-c"});
  const Outcome json_outcome = airlock_cli(arguments, workspace_->path().string(), "12345");
  ASSERT_EQ(json_outcome.exit_code, 0) << json_outcome.err;
  const auto value = json::Json::parse(json_outcome.out);
  EXPECT_EQ(value["decision"]["backend"], "linux");
  EXPECT_EQ(value["result"]["stdout"], "5\n");
  EXPECT_EQ(value["result"]["exit_code"], 0);
}

TEST_F(CliTest, KeptSandboxesAreListedAndPurged) {
  const Outcome kept = run({"--keep", "--thread", "kept-thread", "--", "true"});
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  {
    StateStore store(state_->path());
    for (const auto& id : store.ids()) {
      if (auto record = store.read(id)) audit_.track(*record);
    }
  }
  auto listing = base("ls");
  listing.insert(listing.begin(), "--json");
  const Outcome listed = airlock_cli(listing, workspace_->path().string());
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  const auto records = json::Json::parse(listed.out);
  ASSERT_EQ(records.size(), 1u) << listed.out;
  EXPECT_EQ(records[0]["state"], "running");
  auto wrong = base("purge");
  const Outcome refused = airlock_cli(wrong, workspace_->path().string());
  EXPECT_EQ(refused.exit_code, 125) << "purge without --scope or --all must refuse";
  auto purge = base("purge");
  purge.insert(purge.end(), {"--scope", key_.scope, "--thread", "kept-thread"});
  const Outcome purged = airlock_cli(purge, workspace_->path().string());
  EXPECT_EQ(purged.exit_code, 0) << purged.err;
  EXPECT_EQ(purged.out, "removed 1 sandbox\n");
  EXPECT_TRUE(StateStore(state_->path()).ids().empty());
}

}  // namespace
}  // namespace airlock::linux_backend::testing
