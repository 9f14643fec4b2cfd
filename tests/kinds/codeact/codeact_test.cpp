// The codeact kind end to end on the host test double: programs run for real, files are shared
// from a store, outputs land through a file-system sink, host tools answer over the socket.
#include "airlock/kinds/codeact.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "airlock/errors.hpp"
#include "airlock/sinks.hpp"
#include "support/host_sandbox.hpp"

namespace airlock::kinds::codeact {
namespace {

using json::Json;
using test_support::HostSandbox;
using test_support::TempDir;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

// A host test double whose backend cannot confirm a kill: its timeouts leave the end unknown.
class UnconfirmedKillSandbox : public HostSandbox {
 public:
  using HostSandbox::HostSandbox;
  ExecResult exec(const Command& command, const ExecOptions& options) override {
    try {
      return HostSandbox::exec(command, options);
    } catch (const Timeout& timeout) {
      throw Timeout(timeout.message(), std::nullopt);
    }
  }
};

// A backend handing out host test doubles (no isolation; declares container for the router).
class HostBackend : public SandboxBackend {
 public:
  explicit HostBackend(std::string socket_directory) : socket_directory_(std::move(socket_directory)) {}
  // Sandboxes acquired from now on cannot confirm a kill.
  bool unconfirmed_kills = false;
  std::atomic<int> disposals{0};
  std::string name() const override { return "host-double"; }
  Isolation isolation() const override { return Isolation::container; }
  std::optional<EgressSet> egress_modes() const override {
    return EgressSet{Egress::closed, Egress::allowlist};
  }
  std::optional<CapabilitySet> capabilities() const override {
    return CapabilitySet{Capability::exec, Capability::files_in, Capability::files_out,
                         Capability::host_tools};
  }
  std::shared_ptr<Sandbox> acquire(const SandboxKey&, const SandboxSpec&) override {
    if (!sandbox_) {
      sandbox_ = unconfirmed_kills ? std::make_shared<UnconfirmedKillSandbox>(socket_directory_)
                                   : std::make_shared<HostSandbox>(socket_directory_);
    }
    return sandbox_;
  }
  void dispose(const SandboxKey&) noexcept override {
    ++disposals;
    sandbox_.reset();
  }
  bool dispose_kind(const SandboxKey&, std::string_view, std::optional<std::string_view>) noexcept
      override {
    ++disposals;
    sandbox_.reset();
    return true;
  }
  int dispose_scope(std::string_view, std::optional<std::string_view>) noexcept override {
    return 0;
  }

 private:
  std::string socket_directory_;
  std::shared_ptr<HostSandbox> sandbox_;
};

class MapStore : public FileStore {
 public:
  explicit MapStore(std::map<std::string, std::string> files) : files_(std::move(files)) {}
  std::vector<std::string> list() override {
    std::vector<std::string> names;
    for (const auto& [name, unused] : files_) names.push_back(name);
    return names;
  }
  std::optional<std::string> read(const std::string& name) override {
    auto found = files_.find(name);
    if (found == files_.end()) return std::nullopt;
    return found->second;
  }

 private:
  std::map<std::string, std::string> files_;
};

class Codeact : public ::testing::Test {
 protected:
  Codeact()
      : backend_(std::make_shared<HostBackend>(sockets_.path())),
        router_({backend_}, {.min_isolation = Isolation::container}) {
    fs::create_directories(work_.path() + "/work");
    fs::create_directories(landing_.path());
    // The interpreter the kind runs is `python3` from PATH; pin Debian's for the test.
    ::setenv("PATH", "/usr/bin:/bin", 1);
  }

  ToolOptions options() {
    ToolOptions o;
    o.router = &router_;
    o.context.current_scope = [] { return std::string("tenant"); };
    o.context.current_thread_id = [] { return std::optional<std::string>("thread"); };
    o.spec.work_dir = work_.path() + "/work";
    o.exec_timeout = 20s;
    return o;
  }

  std::string run(const ToolOptions& o, Json arguments) {
    auto tool = make_codeact_tool(o);
    EXPECT_TRUE(tool.has_value());
    return tool->invoke(arguments);
  }

  TempDir work_;
  TempDir sockets_;
  TempDir landing_;
  std::shared_ptr<HostBackend> backend_;
  SandboxRouter router_;
};

TEST_F(Codeact, AProgramRunsAndItsOutputComesBack) {
  EXPECT_EQ(run(options(), {{"code", "print(6 * 7)"}}), "stdout:\n42");
}

TEST_F(Codeact, AFailingProgramReportsItsExitCodeAndStderr) {
  const std::string text = run(options(), {{"code", "import sys\nsys.stderr.write('bad\\n')\nsys.exit(3)"}});
  EXPECT_EQ(text, "stderr:\nbad\nexit code: 3");
}

TEST_F(Codeact, AProgramThatPrintsNothingGetsAHint) {
  EXPECT_NE(run(options(), {{"code", "x = 1"}}).find("printed nothing"), std::string::npos);
}

TEST_F(Codeact, AProgramThatOverrunsIsReportedAsATimeoutAndItsSandboxKeptWhenTheKillIsConfirmed) {
  auto o = options();
  o.exec_timeout = 1s;
  const std::string text = run(o, {{"code", "import time\ntime.sleep(30)"}});
  EXPECT_EQ(text.rfind("Error: the program timed out after 1s.", 0), 0u) << text;
  EXPECT_NE(text.find("the sandbox is intact"), std::string::npos) << text;
  EXPECT_EQ(text.find("reset"), std::string::npos) << text;
  EXPECT_EQ(backend_->disposals, 0) << "a confirmed kill keeps the sandbox";
}

TEST_F(Codeact, AProgramThatOverrunsWhoseKillIsUnconfirmedResetsTheSandboxAndSaysSo) {
  backend_->unconfirmed_kills = true;
  auto o = options();
  o.exec_timeout = 1s;
  const std::string text = run(o, {{"code", "import time\ntime.sleep(30)"}});
  EXPECT_EQ(text.rfind("Error: the program timed out after 1s.", 0), 0u) << text;
  EXPECT_NE(text.find("The sandbox was reset"), std::string::npos) << text;
  EXPECT_NE(text.find("is gone"), std::string::npos) << text;
  // The condemned sandbox's delete runs off the call's thread once the call has left.
  for (int i = 0; i < 500 && backend_->disposals == 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(backend_->disposals, 1) << "an unknown end condemns the sandbox";
}

TEST_F(Codeact, BadArgumentsAreRefusedInWords) {
  EXPECT_EQ(run(options(), {{"code", 5}}), "Error: 'code' must be a string of Python");
  EXPECT_EQ(run(options(), {{"code", "1"}, {"shell", "rm -rf /"}}),
            "Error: unexpected argument 'shell'");
  // `files` is an argument only when a store is wired.
  EXPECT_EQ(run(options(), {{"code", "1"}, {"files", {"a"}}}), "Error: unexpected argument 'files'");
}

TEST_F(Codeact, TheCallDirectoryIsGoneAfterTheCall) {
  run(options(), {{"code", "open('left.txt', 'w').write('x')\nprint('ok')"}});
  EXPECT_TRUE(fs::is_empty(work_.path() + "/work")) << "a call directory outlived its call";
}

TEST_F(Codeact, SharedFilesArePinnedToTheStoresListing) {
  auto o = options();
  o.file_store = std::make_shared<MapStore>(std::map<std::string, std::string>{
      {"data.csv", "a,b\n1,2\n"}, {"reports/q1.txt", "q1"}});
  EXPECT_EQ(run(o, {{"code", "print(open('data.csv').read().splitlines()[1])"},
                    {"files", {"data.csv"}}}),
            "stdout:\n1,2");
  EXPECT_EQ(run(o, {{"code", "print(open('reports/q1.txt').read())"},
                    {"files", {"reports/q1.txt"}}}),
            "stdout:\nq1");
  const std::string miss = run(o, {{"code", "1"}, {"files", {"Data.csv"}}});
  EXPECT_NE(miss.find("'Data.csv' is not in the file store. Did you mean: 'data.csv'"),
            std::string::npos)
      << miss;
  EXPECT_NE(run(o, {{"code", "1"}, {"files", {"../../etc/passwd"}}}).find("not a valid name"),
            std::string::npos);
  EXPECT_NE(run(o, {{"code", "1"}, {"files", {"program.py"}}}).find("collides"), std::string::npos);
}

TEST_F(Codeact, InboundCapsAreCheckedBeforeAnythingIsRead) {
  auto o = options();
  o.spec.files_in = {16, 1 << 20, 8};
  o.file_store = std::make_shared<MapStore>(
      std::map<std::string, std::string>{{"big.txt", std::string(100, 'x')}});
  EXPECT_NE(run(o, {{"code", "print(1)"}, {"files", {"big.txt"}}}).find("too large"),
            std::string::npos);
  EXPECT_NE(run(o, {{"code", std::string(100, '#')}}).find("the program is too large"),
            std::string::npos);
}

TEST_F(Codeact, DeclaredOutputsLandThroughTheSink) {
  auto o = options();
  o.spec.outputs = Outputs::declared;
  o.output_sink = make_file_system_sink(landing_.path());
  const std::string text =
      run(o, {{"code", "open('chart.txt', 'w').write('bars')\nprint('drawn')"},
              {"outputs", {"chart.txt", "missing.txt"}}});
  EXPECT_NE(text.find("stdout:\ndrawn"), std::string::npos) << text;
  EXPECT_NE(text.find("Saved:\n- chart.txt (4 bytes)"), std::string::npos) << text;
  EXPECT_NE(text.find("Not written: missing.txt"), std::string::npos) << text;
  std::string landed;
  std::ifstream(landing_.path() + "/chart.txt") >> landed;
  EXPECT_EQ(landed, "bars");
}

// The binding lets a body's exception through; the kind answers its own failures in words.
TEST_F(Codeact, AStoreThatFailsToReadIsTheKindsSentenceNotAnException) {
  class FailingStore : public MapStore {
   public:
    FailingStore() : MapStore(std::map<std::string, std::string>{{"data.csv", "a,b\n"}}) {}
    std::optional<std::string> read(const std::string&) override {
      throw std::runtime_error("the store's disk is gone: /srv/store/tenant-42");
    }
  };
  auto o = options();
  o.file_store = std::make_shared<FailingStore>();
  const std::string text = run(o, {{"code", "print(1)"}, {"files", {"data.csv"}}});
  EXPECT_EQ(text, "Error: file 'data.csv' could not be read from the store");
}

TEST_F(Codeact, ASinkThatFailsIsTheCouldNotBeSavedSentence) {
  auto o = options();
  o.spec.outputs = Outputs::declared;
  o.output_sink = OutputSink{[](const Artifact&) -> LandedArtifact {
    throw std::runtime_error("quota exceeded on /srv/landing/tenant-42");
  }};
  const std::string text =
      run(o, {{"code", "open('chart.txt', 'w').write('bars')"}, {"outputs", {"chart.txt"}}});
  EXPECT_NE(text.find("Error: the outputs could not be saved — the host's sink refused them."),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("/srv/landing"), std::string::npos) << "a host path reached the model";
}

TEST_F(Codeact, NothingIsCollectedFromAFailedProgram) {
  auto o = options();
  o.spec.outputs = Outputs::declared;
  o.output_sink = make_file_system_sink(landing_.path());
  run(o, {{"code", "open('chart.txt', 'w').write('bars')\nraise SystemExit(1)"},
          {"outputs", {"chart.txt"}}});
  EXPECT_FALSE(fs::exists(landing_.path() + "/chart.txt"));
}

TEST_F(Codeact, DeclaredNamesAreJudgedBeforeTheProgramRuns) {
  auto o = options();
  o.spec.outputs = Outputs::declared;
  o.output_sink = make_file_system_sink(landing_.path());
  EXPECT_NE(run(o, {{"code", "print(1)"}, {"outputs", {"../escape.txt"}}}).find("not a valid name"),
            std::string::npos);
  EXPECT_NE(run(o, {{"code", "print(1)"}, {"outputs", {"A.txt", "a.txt"}}}).find("same file"),
            std::string::npos);
}

TEST_F(Codeact, AManifestNamesTheOutputsAfterTheFact) {
  auto o = options();
  o.spec.outputs = Outputs::manifest;
  o.output_sink = make_file_system_sink(landing_.path());
  const std::string text = run(
      o, {{"code", "import json\nopen('r.txt','w').write('result')\n"
                   "json.dump({'outputs': [{'path': 'r.txt'}]}, open('outputs.json','w'))"}});
  EXPECT_NE(text.find("Saved:\n- r.txt (6 bytes)"), std::string::npos) << text;
  const std::string bad = run(o, {{"code", "open('outputs.json','w').write('[1]')"}});
  EXPECT_NE(bad.find("outputs.json must be"), std::string::npos) << bad;
}

TEST_F(Codeact, AnOutputModeWithoutASinkIsRefusedAtConstruction) {
  auto o = options();
  o.spec.outputs = Outputs::declared;
  EXPECT_THROW(make_codeact_tool(o), OutputSinkRequired);
  o.output_sink = make_file_system_sink(landing_.path());
  o.output_sink->normalization = NameNormalization::none;
  EXPECT_THROW(make_codeact_tool(o), InvalidArgument);
}

TEST_F(Codeact, TheProgramCallsHostToolsThroughTheOneDoor) {
  auto registry = std::make_shared<HostToolRegistry>();
  registry->register_tool(HostTool{
      "price", "a price lookup", {{"sku", ToolParameter::Type::string}},
      [](const Json& a) { return Json{{"sku", a["sku"]}, {"eur", 12.5}}; },
      HostToolDeclaration(SourceIntegrity::trusted, std::nullopt, Identity::app)});
  auto o = options();
  o.spec.host_tools = registry;
  const SandboxSpec spec = codeact_sandbox_spec(o.spec);
  EXPECT_TRUE(spec.required_capabilities().contains(Capability::host_tools));
  EXPECT_EQ(spec.identities(), IdentitySet{Identity::app});
  EXPECT_EQ(run(o, {{"code", "import airlock_host_tools as tools\nprint(tools.price(sku='x1')['eur'])"}}),
            "stdout:\n12.5");
  EXPECT_TRUE(registry->sealed());
}

TEST_F(Codeact, EgressIsDerivedAndNeverOpen) {
  SpecOptions closed;
  EXPECT_EQ(codeact_sandbox_spec(closed).egress(), Egress::closed);
  SpecOptions allow;
  allow.egress_allow = {"pypi.org", "pypi.org", "files.pythonhosted.org"};
  const SandboxSpec spec = codeact_sandbox_spec(allow);
  EXPECT_EQ(spec.egress(), Egress::allowlist);
  EXPECT_EQ(spec.egress_allow(), (std::vector<std::string>{"pypi.org", "files.pythonhosted.org"}));
  allow.egress_allow = {"a b"};
  EXPECT_THROW(codeact_sandbox_spec(allow), InvalidArgument);
}

}  // namespace
}  // namespace airlock::kinds::codeact
