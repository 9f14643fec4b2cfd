// `airlock run`, `ls` and `purge`, end to end through the built CLI.
#include <sys/wait.h>

#include <ctime>
#include <fstream>
#include <set>
#include <sstream>

#include "airlock/encoding.hpp"
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
  std::filesystem::create_directory_symlink(elsewhere.path(),
                                            workspace_->path() / "landed" / "result");
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

TEST_F(CliTest, LsJsonAfterTheSubcommandDescribesEveryKeptSandbox) {
  const std::int64_t before = std::time(nullptr);
  const Outcome kept =
      run({"--keep", "--kind", "listed", "--thread", "listed-thread", "--", "true"});
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  std::string instance_id;
  {
    StateStore store(state_->path());
    for (const auto& id : store.ids()) {
      if (auto record = store.read(id)) {
        audit_.track(*record);
        instance_id = record->instance_id;
      }
    }
  }
  ASSERT_FALSE(instance_id.empty());

  auto listing = base("ls");
  listing.push_back("--json");  // after the subcommand, as `airlock ls [--json]` documents
  const Outcome listed = airlock_cli(listing, workspace_->path().string());
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  const std::int64_t after = std::time(nullptr);
  const auto records = json::Json::parse(listed.out);
  ASSERT_TRUE(records.is_array()) << listed.out;
  ASSERT_EQ(records.size(), 1u) << listed.out;
  const auto& record = records[0];
  std::set<std::string> fields;
  for (const auto& [name, value] : record.items()) fields.insert(name);
  EXPECT_EQ(fields, (std::set<std::string>{"backend", "instance_id", "kind", "state",
                                           "egress_posture", "created_at", "labels"}));
  EXPECT_EQ(record["backend"], "linux");
  EXPECT_EQ(record["instance_id"], instance_id);
  EXPECT_EQ(record["kind"], "listed");
  EXPECT_EQ(record["state"], "running");
  EXPECT_EQ(record["egress_posture"], "closed");
  ASSERT_TRUE(record["created_at"].is_number_integer()) << record;
  EXPECT_GE(record["created_at"].get<std::int64_t>(), before);
  EXPECT_LE(record["created_at"].get<std::int64_t>(), after);
  EXPECT_EQ(record["labels"]["airlock.scope"], map_label_value(key_.scope));
  EXPECT_EQ(record["labels"]["airlock.thread"], "listed-thread");

  // The global flag before the subcommand says the same.
  auto global = base("ls");
  global.insert(global.begin(), "--json");
  EXPECT_EQ(airlock_cli(global, workspace_->path().string()).out, listed.out);
  // The table shows the same sandbox, egress posture included; --help names the flag.
  const Outcome table = airlock_cli(base("ls"), workspace_->path().string());
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find(instance_id), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("EGRESS"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find(" closed "), std::string::npos) << table.out;
  const Outcome help = airlock_cli({"ls", "--help"}, workspace_->path().string());
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--json"), std::string::npos) << help.out;

  auto purge = base("purge");
  purge.insert(purge.end(), {"--scope", key_.scope});
  EXPECT_EQ(airlock_cli(purge, workspace_->path().string()).exit_code, 0);
  EXPECT_TRUE(StateStore(state_->path()).ids().empty());
  auto empty = base("ls");
  empty.push_back("--json");
  EXPECT_EQ(json::Json::parse(airlock_cli(empty, workspace_->path().string()).out),
            json::Json::array());
}

}  // namespace
}  // namespace airlock::linux_backend::testing

namespace airlock::linux_backend::testing {
namespace {

class CodeactCliTest : public CliTest {
 protected:
  Outcome codeact(const std::string& program, std::vector<std::string> extra) {
    std::ofstream(workspace_->path() / "program.py") << program;
    auto arguments = base("codeact");
    arguments.insert(arguments.end(), {"program.py", "--min-isolation", "container", "--scope",
                                       key_.scope, "--out", "landed"});
    arguments.insert(arguments.end(), extra.begin(), extra.end());
    return airlock_cli(arguments, workspace_->path().string());
  }
};

TEST_F(CodeactCliTest, AProgramCallsTheDemoToolReadsASharedFileAndLandsAnOutput) {
  std::ofstream(workspace_->path() / "amounts.txt") << "10\n20\n";
  const Outcome outcome = codeact(
      "import airlock_host_tools as tools\n"
      "total = sum(float(line) for line in open('amounts.txt'))\n"
      "rate = tools.lookup_rate(currency='USD')\n"
      "open('total.txt', 'w').write('%.2f EUR' % (total * rate['rate']))\n"
      "print('demo' if rate['demo'] else 'real', total)\n",
      {"--demo-tool", "--file", "amounts.txt=amounts.txt", "--output", "total.txt"});
  EXPECT_EQ(outcome.exit_code, 0) << outcome.out << outcome.err;
  EXPECT_NE(outcome.out.find("stdout:\ndemo 30.0"), std::string::npos) << outcome.out;
  EXPECT_NE(outcome.out.find("Saved:\n- total.txt"), std::string::npos) << outcome.out;
  EXPECT_NE(outcome.err.find("backend 'linux' (container) serves kind 'codeact'"),
            std::string::npos)
      << outcome.err;
  const auto landed = workspace_->path() / "landed" / "total.txt";
  EXPECT_NE(outcome.err.find("landed total.txt at " + landed.string()), std::string::npos)
      << outcome.err;
  std::stringstream content;
  content << std::ifstream(landed).rdbuf();
  EXPECT_EQ(content.str(), "27.60 EUR");
  // The sandbox was disposed after the call.
  const Outcome listed = airlock_cli(base("ls"), workspace_->path().string());
  EXPECT_EQ(listed.out.find("codeact"), std::string::npos) << listed.out;
}

TEST_F(CodeactCliTest, WithoutTheDemoToolTheProgramCannotReachOne) {
  const Outcome outcome = codeact("import airlock_host_tools\n", {});
  EXPECT_EQ(outcome.exit_code, 1) << outcome.out << outcome.err;
  EXPECT_NE(outcome.out.find("ModuleNotFoundError"), std::string::npos) << outcome.out;
}

TEST_F(CodeactCliTest, FailuresAndBadInputGetTheirExitCodes) {
  EXPECT_EQ(codeact("import sys\nsys.exit(3)\n", {}).exit_code, 1);
  EXPECT_EQ(codeact("import time\ntime.sleep(30)\n", {"--timeout", "1"}).exit_code, 124);
  const Outcome missing = codeact("print(1)\n", {"--file", "x.csv=does-not-exist.csv"});
  EXPECT_EQ(missing.exit_code, 125);
  EXPECT_NE(missing.err.find("does-not-exist.csv"), std::string::npos) << missing.err;
  const Outcome floor = airlock_cli({"codeact", "program.py", "--backend-config",
                                     (workspace_->path() / "backends.json").string()},
                                    workspace_->path().string());
  EXPECT_EQ(floor.exit_code, 125) << "the default floor (microvm) must refuse linux";
}

}  // namespace
}  // namespace airlock::linux_backend::testing
