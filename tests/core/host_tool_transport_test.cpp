// Both host-tool channels, end to end with a real interpreter (on the host test double), and the
// layout and shim rules.
#include "airlock/host_tool_transport.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "airlock/errors.hpp"
#include "core/host_tools/host_tool_internal.hpp"
#include "support/host_sandbox.hpp"

namespace airlock {
namespace {

using json::Json;
using test_support::HostSandbox;
using test_support::TempDir;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr const char* kPython = "/usr/bin/python3";

// ---- layout ----------------------------------------------------------------------------------

TEST(GuestRunLayout, TheProgramSitsBesideTheShimAndAwayFromTheWorkDirectory) {
  const auto layout = guest_run_layout("/maf/work/abc123");
  EXPECT_EQ(layout.work, "/maf/work/abc123/work");
  EXPECT_EQ(layout.program, "/maf/work/abc123/host_tools/program.py");
  EXPECT_EQ(layout.shim, "/maf/work/abc123/host_tools/airlock_host_tools.py");
  EXPECT_EQ(layout.calls, "/maf/work/abc123/host_tools/host_tool_calls");
}

TEST(GuestRunLayout, ARunDirectoryPythonPathCannotCarryIsRefused) {
  EXPECT_THROW(guest_run_layout("relative/run"), InvalidArgument);
  EXPECT_THROW(guest_run_layout("/runs/2026-08-17T10:30:00Z"), InvalidArgument);
  EXPECT_THROW(guest_run_layout("/runs\\x"), InvalidArgument);
  EXPECT_THROW(guest_run_layout("/"), InvalidArgument);
}

TEST(GuestRunLayout, AProgramThatWouldShadowAModuleIsRefused) {
  for (const char* name : {"json.py", "os.py", "time.pyc", "socket.py", "airlock_host_tools.py",
                           "sitecustomize.py", "encodings.py", "io.cpython-311-x86_64-linux-gnu.so",
                           "abc.pyd"}) {
    EXPECT_THROW(guest_run_layout("/run", name), InvalidArgument) << name;
  }
  for (const char* name : {"json.backup.py", "json.txt", "program.py", "jsonish.py"}) {
    EXPECT_NO_THROW(guest_run_layout("/run", name)) << name;
  }
}

TEST(GuestRunLayout, TheTransportsOwnFileNamesAreRefusedAsPrograms) {
  for (const char* name : {"run_program.sh", "program_output.txt", "program_exit_code",
                           "program_exit_code.part", "program_pid", "program_pid.part",
                           "program_session", "program_session.part", "host_tool_calls"}) {
    EXPECT_THROW(guest_run_layout("/run", name), InvalidArgument) << name;
  }
  EXPECT_THROW(guest_run_layout("/run", "../escape.py"), InvalidArgument);
  EXPECT_THROW(guest_run_layout("/run", ""), InvalidArgument);
}

// ---- the shim ----------------------------------------------------------------------------------

// Found by fuzz/host_tool_request_fuzz: a request holding a number no double holds threw out of
// answer_request, which on the socket channel is the serving thread: std::terminate, and the
// host process with it. A guest must get a refusal instead.
TEST(HostToolRequest, AnOverflowingNumberIsRefusedInsteadOfKillingTheHost) {
  auto registry = std::make_shared<airlock::HostToolRegistry>();
  airlock::HostTool tool;
  tool.name = "echo";
  tool.body = [](const airlock::json::Json&) { return airlock::json::Json("never"); };
  tool.declaration.emplace(std::nullopt, std::nullopt, airlock::Identity::app);
  registry->register_tool(tool);
  registry->aggregate();
  airlock::HostToolRun run(registry);
  for (const char* request : {R"({"name": "echo", "arguments": {"x": 1e999}})",
                              "99999999999999999999999999e999999999999999999999999999"}) {
    std::optional<std::string> answer;
    ASSERT_NO_THROW(answer = airlock::answer_request(run, false, request)) << request;
    ASSERT_TRUE(answer.has_value());
    EXPECT_NE(answer->find("\"refusal\""), std::string::npos) << *answer;
  }
  EXPECT_EQ(run.dispatched(), 0u);
}

// Runs `script` with the guest interpreter in `directory` (the shim's directory on sys.path) and
// returns what it printed; a failing script fails the test.
std::string run_python(const std::string& directory, const std::string& script) {
  const std::string path = directory + "/check.py";
  std::ofstream(path) << script;
  const std::string command = "cd '" + directory + "' && " + kPython + " check.py 2>&1";
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "popen failed";
    return out;
  }
  char buffer[4096];
  while (std::size_t got = std::fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, got);
  EXPECT_EQ(::pclose(pipe), 0) << out;
  return out;
}

// Names chosen to break a naive shim: builtins and modules it uses, its own API and installer,
// keywords, a dunder with module-level meaning, spellings equal only after NFKC, no identifier.
// (The two escaped names are a fullwidth `open` and a fullwidth `print`.)
// clang-format off
const std::vector<std::string> kHostileNames = {
    "open", "json", "os", "time", "call", "HostToolError", "print", "Exception", "isinstance",
    "dict", "_airlock_install", "_claim", "\uff4f\uff50\uff45\uff4e",
    "\uff50\uff52\uff49\uff4e\uff54", "class", "None", "__getattr__", "with space", "lookup",
    "\u00fcber", "_private"};
// clang-format on

TEST(HostToolShim, WrappersExistOnlyForNamesThatShadowNothing) {
  TempDir dir;
  std::ofstream(dir.path() + "/airlock_host_tools.py") << host_tool_shim(kHostileNames);
  const std::string out = run_python(dir.path(), R"(import airlock_host_tools as tools
for name in ["lookup", "print", "isinstance", "dict", "_private", "\u00fcber", "open", "json",
             "os", "time", "Exception", "_claim", "_airlock_install", "__getattr__", "None"]:
    print(name, name in vars(tools))
print(sorted(tools.__all__))
print(tools.call.__name__, issubclass(tools.HostToolError, RuntimeError))
print(tools.print.__doc__)
)");
  EXPECT_EQ(out,
            "lookup True\nprint True\nisinstance True\ndict True\n_private True\n"
            "\u00fcber True\nopen False\njson False\nos False\ntime False\nException False\n_claim "
            "False\n_airlock_install False\n__getattr__ False\nNone False\n"
            "['HostToolError', '_private', 'call', 'dict', 'isinstance', 'lookup', 'print', "
            "'\u00fcber']\ncall True\nCall the host tool print.\n");
}

TEST(HostToolShim, ItsMachineryReadsNoNameAWrapperCouldRebind) {
  TempDir dir;
  std::ofstream(dir.path() + "/airlock_host_tools.py") << host_tool_shim(kHostileNames);
  // Every global (or class-body) name read anywhere inside the installer must be a dunder, which
  // no wrapper takes; everything else the machinery uses is a local of its closure.
  const std::string out = run_python(dir.path(), R"(import dis, types
source = open("airlock_host_tools.py", encoding="utf-8").read()
module = compile(source, "airlock_host_tools.py", "exec")
installer = next(c for c in module.co_consts if isinstance(c, types.CodeType))
def walk(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from walk(const)
read = set()
for code in walk(installer):
    for instruction in dis.get_instructions(code):
        if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            read.add(instruction.argval)
print(installer.co_name, sorted(n for n in read if not (n.startswith("__") and n.endswith("__"))))
)");
  EXPECT_EQ(out, "_airlock_install []\n");
}

TEST(HostToolShim, NamesTravelAsAsciiLiteralsWhateverTheyHold) {
  const std::string shim = host_tool_shim({"\u00fcber", "quote\"d", "back\\slash"});
  EXPECT_TRUE(std::all_of(shim.begin(), shim.end(),
                          [](char c) { return static_cast<unsigned char>(c) < 0x80; }));
  EXPECT_NE(shim.find(R"(("\U000000fcber", "\U000000fcber"))"), std::string::npos) << shim;
  EXPECT_EQ(shim.find("quote"), std::string::npos) << "a name Python cannot spell got a wrapper";
  EXPECT_THROW(host_tool_shim({}, Milliseconds(0)), InvalidArgument);
}

// ---- end to end --------------------------------------------------------------------------------

std::shared_ptr<HostToolRegistry> registry_of(HostToolRegistryOptions options = {}) {
  auto registry = std::make_shared<HostToolRegistry>(std::move(options));
  registry->register_tool(HostTool{
      "add", "adds", {{"x", ToolParameter::Type::integer}, {"y", ToolParameter::Type::integer}},
      [](const Json& a) { return Json(a["x"].get<int>() + a["y"].get<int>()); },
      HostToolDeclaration(SourceIntegrity::trusted, std::nullopt, Identity::app)});
  registry->register_tool(HostTool{
      "explode", "raises", {},
      [](const Json&) -> Json { throw std::runtime_error("secret detail"); },
      HostToolDeclaration(SourceIntegrity::trusted, std::nullopt, Identity::app)});
  registry->register_tool(HostTool{
      "echo", "echoes", {{"text", ToolParameter::Type::string}},
      [](const Json& a) { return a["text"]; },
      HostToolDeclaration(SourceIntegrity::untrusted, std::nullopt, Identity::app)});
  return registry;
}

class HostToolChannels : public ::testing::TestWithParam<HostToolChannel> {
 protected:
  HostToolChannels()
      : sandbox_(GetParam() == HostToolChannel::socket ? sockets_.path() : std::string()) {}

  GuestRunLayout prepare(const std::string& program, const std::vector<std::string>& names) {
    layout_ = guest_run_layout(dir_.path() + "/run");
    sandbox_.write_file(layout_.shim, host_tool_shim(names, 10s), "/");
    sandbox_.write_file(layout_.program, program, "/");
    return layout_;
  }

  HostToolRunResult run(HostToolRun& tools, Milliseconds timeout = 20s) {
    HostToolRunOptions options;
    options.timeout = timeout;
    options.poll_interval = 20ms;
    options.interpreter = kPython;
    options.channel = GetParam();
    return run_program_with_host_tools(sandbox_, tools, layout_, options);
  }

  TempDir dir_;
  TempDir sockets_;
  HostSandbox sandbox_;
  GuestRunLayout layout_;
};

TEST_P(HostToolChannels, AProgramCallsAToolAndGetsItsValue) {
  prepare(R"(import airlock_host_tools as tools
print(tools.add(x=2, y=40))
print(tools.call("echo", text="über"))
)",
          {"add", "echo"});
  HostToolRun tools(registry_of());
  const auto outcome = run(tools);
  EXPECT_EQ(outcome.channel, GetParam());
  EXPECT_EQ(outcome.result.exit_code, 0) << outcome.result.stdout_bytes << outcome.result.stderr_bytes;
  EXPECT_EQ(outcome.result.stdout_bytes, "42\nüber\n");
  EXPECT_EQ(tools.dispatched(), 2u);
}

TEST_P(HostToolChannels, RefusalsReachTheProgramAsHostToolErrorWithoutTheReason) {
  prepare(R"(import airlock_host_tools as tools
for name, args in [("explode", {}), ("missing", {}), ("add", {"x": "two", "y": 1})]:
    try:
        tools.call(name, **args)
    except tools.HostToolError as error:
        print(error)
)",
          {"add", "explode"});
  HostToolRun tools(registry_of());
  const auto outcome = run(tools);
  const std::string& out = outcome.result.stdout_bytes;
  EXPECT_NE(out.find("Error: host tool 'explode' failed — the reason is in the host's log"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("secret detail"), std::string::npos);
  EXPECT_NE(out.find("Error: 'missing' is not a registered host tool"), std::string::npos);
  EXPECT_NE(out.find("argument 'x' must be an integer"), std::string::npos);
}

TEST_P(HostToolChannels, ToolsNamedLikeTheShimsOwnNamesAllAnswer) {
  layout_ = guest_run_layout(dir_.path() + "/run");
  sandbox_.write_file(layout_.shim, host_tool_shim(kHostileNames, 10s), "/");
  auto registry =
      std::make_shared<HostToolRegistry>(HostToolRegistryOptions{.max_dispatches_per_run = 100});
  for (const auto& name : kHostileNames) {
    HostTool named{name,
                   "answers its name",
                   {{"x", ToolParameter::Type::integer}},
                   [name](const Json& a) {
                     return Json::array({name, a["x"]});
                   },
                   HostToolDeclaration(std::nullopt, std::nullopt, Identity::app)};
    registry->register_tool(std::move(named));
  }
  std::string program = "import json, sys\nimport airlock_host_tools as tools\nNAMES = " +
                        Json(kHostileNames).dump() + R"(
wrong = [n for i, n in enumerate(NAMES) if tools.call(n, x=i) != [n, i]]
print("call:", wrong)
print(tools.print(x=1), tools.isinstance(x=2), tools.dict(x=3), tools.lookup(x=4))
print(tools.ｐｒｉｎｔ(x=5), tools.über(x=6), tools._private(x=7))
print("open" in vars(tools), tools.HostToolError.__mro__[1].__name__)
try:
    tools.call("missing")
except tools.HostToolError as error:
    print(type(error).__name__, error)
)";
  sandbox_.write_file(layout_.program, program, "/");
  HostToolRun tools(registry);
  const auto outcome = run(tools);
  EXPECT_EQ(outcome.result.exit_code, 0) << outcome.result.stdout_bytes;
  EXPECT_EQ(outcome.result.stdout_bytes,
            "call: []\n['print', 1] ['isinstance', 2] ['dict', 3] ['lookup', 4]\n"
            "['print', 5] ['\u00fcber', 6] ['_private', 7]\nFalse RuntimeError\n"
            "HostToolError Error: 'missing' is not a registered host tool\n");
}

TEST_P(HostToolChannels, TheExitCodeAndOutputOfTheProgramComeBack) {
  prepare("import sys\nprint('partial')\nsys.stderr.write('to stderr\\n')\nsys.exit(3)\n", {});
  HostToolRun tools(registry_of());
  const auto outcome = run(tools);
  EXPECT_EQ(outcome.result.exit_code, 3);
  EXPECT_NE(outcome.result.stdout_bytes.find("partial"), std::string::npos);
  EXPECT_NE(outcome.result.stdout_bytes.find("to stderr"), std::string::npos);
}

TEST_P(HostToolChannels, TheDispatchCapHoldsAgainstALoop) {
  prepare(R"(import airlock_host_tools as tools
ok = 0
for i in range(40):
    try:
        tools.add(x=i, y=1)
        ok += 1
    except tools.HostToolError as error:
        print(ok, error)
        break
)",
          {"add"});
  HostToolRun tools(registry_of({.max_dispatches_per_run = 5}));
  const auto outcome = run(tools);
  EXPECT_EQ(tools.delivered(), 5u);
  EXPECT_EQ(tools.dispatched(), 6u);
  EXPECT_NE(outcome.result.stdout_bytes.find("5 Error: this run's host-tool dispatch cap (5) is "
                                             "exhausted"),
            std::string::npos)
      << outcome.result.stdout_bytes;
}

TEST_P(HostToolChannels, AnOverrunningProgramAndItsChildrenAreKilled) {
  const std::string marker = dir_.path() + "/child.pid";
  prepare("import os, subprocess, time\n"
          "child = subprocess.Popen(['sleep', '300'])\n"
          "open('" + marker + "', 'w').write(str(child.pid))\n"
          "print('started', flush=True)\n"
          "time.sleep(300)\n",
          {});
  HostToolRun tools(registry_of());
  try {
    run(tools, 1500ms);
    FAIL() << "the run did not time out";
  } catch (const ProgramTimeout& timeout) {
    EXPECT_EQ(timeout.signal(), SignalOutcome::sent) << timeout.message();
    EXPECT_EQ(timeout.reach(), SignalReach::group) << timeout.message();
    EXPECT_NE(timeout.output().find("started"), std::string::npos);
    // The message carries the output too: a model reading it sees how far the program got.
    EXPECT_NE(timeout.message().find("what it printed (at most 2000 characters):\nstarted"),
              std::string::npos)
        << timeout.message();
  }
  std::string child;
  std::ifstream(marker) >> child;
  ASSERT_FALSE(child.empty());
  // The child was in the program's group: it must be gone (allow the kernel a moment to reap).
  bool gone = false;
  for (int i = 0; i < 50 && !gone; ++i) {
    gone = ::kill(std::stoi(child), 0) != 0 ||
           [&] {
             std::ifstream stat("/proc/" + child + "/stat");
             std::string pid, comm, state;
             stat >> pid >> comm >> state;
             return state == "Z";
           }();
    if (!gone) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(gone) << "a child of the timed-out program survived";
}

TEST_P(HostToolChannels, TheTransportFilesGoAndTheWorkDirectoryStays) {
  prepare("open('artifact.txt', 'w').write('kept')\n", {});
  HostToolRun tools(registry_of());
  run(tools);
  EXPECT_FALSE(fs::exists(dir_.path() + "/run/host_tools")) << "the transport outlived the call";
  EXPECT_TRUE(fs::exists(layout_.work + "/artifact.txt"));
  EXPECT_TRUE(reclaim_run(sandbox_, layout_));
  EXPECT_FALSE(fs::exists(dir_.path() + "/run"));
}

TEST_P(HostToolChannels, ATimeoutQuotesAtMost2000CharactersOfOutput) {
  prepare(
      "import sys, time\nsys.stdout.write('\u00fc' * 5000)\nsys.stdout.flush()\n"
      "time.sleep(300)\n",
      {});
  HostToolRun tools(registry_of());
  try {
    run(tools, 1500ms);
    FAIL() << "the run did not time out";
  } catch (const ProgramTimeout& timeout) {
    std::string expected;
    for (int i = 0; i < 2000; ++i) expected += "\xc3\xbc";
    EXPECT_EQ(timeout.output(), expected);
    EXPECT_TRUE(timeout.message().ends_with(":\n" + expected)) << timeout.message().substr(0, 200);
  }
}

INSTANTIATE_TEST_SUITE_P(BothChannels, HostToolChannels,
                         ::testing::Values(HostToolChannel::files, HostToolChannel::socket),
                         [](const auto& param_info) { return std::string(to_string(param_info.param)); });

// ---- the files protocol, attacked by a guest that skips the shim -------------------------------

class FilesProtocol : public ::testing::Test {
 protected:
  ExecResult run_program(const std::string& program, HostToolRegistryOptions options = {}) {
    layout_ = guest_run_layout(dir_.path() + "/run");
    sandbox_.write_file(layout_.program, program, "/");
    HostToolRun tools(registry_of(std::move(options)));
    HostToolRunOptions run_options;
    run_options.timeout = 20s;
    run_options.poll_interval = 20ms;
    run_options.interpreter = kPython;
    run_options.channel = HostToolChannel::files;
    return run_program_with_host_tools(sandbox_, tools, layout_, run_options).result;
  }

  TempDir dir_;
  HostSandbox sandbox_;
  GuestRunLayout layout_;
};

// A helper the guest programs below share: write a request file, wait for the answer.
const std::string kRawClient = R"(import json, os, time
calls = os.path.join(os.path.dirname(os.path.abspath(__file__)), "host_tool_calls")
os.makedirs(calls, exist_ok=True)
def raw(ident, body):
    part = os.path.join(calls, ident + ".request.json.part")
    with open(part, "wb") as f:
        f.write(body)
    os.rename(part, os.path.join(calls, ident + ".request.json"))
def answer(ident):
    path = os.path.join(calls, ident + ".response.json")
    for _ in range(400):
        try:
            return json.load(open(path))
        except (OSError, ValueError):
            time.sleep(0.02)
    return None
)";

TEST_F(FilesProtocol, AGuestWritingRequestFilesItselfIsServedIdentically) {
  const auto result = run_program(kRawClient + R"(
raw("0001", json.dumps({"id": "0001", "name": "add", "arguments": {"x": 1, "y": 2}}).encode())
print(answer("0001"))
)");
  EXPECT_NE(result.stdout_bytes.find("{'value': 3}"), std::string::npos) << result.stdout_bytes;
}

TEST_F(FilesProtocol, InvalidJsonIsRefusedAndTheRunGoesOn) {
  const auto result = run_program(kRawClient + R"(
raw("0001", b"{not json")
print(answer("0001"))
raw("0002", b"[1, 2]")
print(answer("0002"))
raw("0003", b"\xff\xfe")
print(answer("0003"))
raw("0004", json.dumps({"id": "0004", "name": "add", "arguments": {"x": 2, "y": 2}}).encode())
print(answer("0004"))
)");
  EXPECT_NE(result.stdout_bytes.find("this host-tool request is not valid JSON"), std::string::npos)
      << result.stdout_bytes;
  EXPECT_NE(result.stdout_bytes.find("a host-tool request must be a JSON object"),
            std::string::npos);
  EXPECT_NE(result.stdout_bytes.find("{'value': 4}"), std::string::npos);
}

TEST_F(FilesProtocol, ARequestLargerThanTheCapIsRefusedUnread) {
  const auto result = run_program(kRawClient + R"(
raw("0001", json.dumps({"id": "0001", "name": "echo", "arguments": {"text": "x" * 5000}}).encode())
print(answer("0001"))
)",
                                  {.response_limits = {1024, 1 << 20, 16}});
  EXPECT_NE(result.stdout_bytes.find("larger than the host will read"), std::string::npos)
      << result.stdout_bytes;
}

TEST_F(FilesProtocol, DispatchOverExecRemovesOnlyTheTransportAndLeavesWork) {
  layout_ = guest_run_layout(dir_.path() + "/run");
  sandbox_.write_file(layout_.shim, host_tool_shim({"add"}, 10s), "/");
  sandbox_.write_file(layout_.program,
                      "import airlock_host_tools as tools\n"
                      "open('result.txt', 'w').write(str(tools.add(x=20, y=22)))\n",
                      "/");
  HostToolRun tools(registry_of());
  HostToolRunOptions options;
  options.timeout = 20s;
  options.poll_interval = 20ms;
  options.interpreter = kPython;
  const ExecResult result = dispatch_over_exec(sandbox_, tools, layout_, options);
  EXPECT_EQ(result.exit_code, 0) << result.stdout_bytes;
  EXPECT_FALSE(fs::exists(dir_.path() + "/run/host_tools"));
  std::string written;
  std::ifstream(layout_.work + "/result.txt") >> written;
  EXPECT_EQ(written, "42");
}

TEST_F(FilesProtocol, TheExitMarkerIsReadAsPythonReadsAnInteger) {
  // The marker is the guest's claim: a program may write it itself (and the host believes it).
  const auto result = run_program(kRawClient + R"(
marker = os.path.join(os.path.dirname(calls), "program_exit_code")
with open(marker + ".part", "w") as f:
    f.write(" -1_2\n")
os.rename(marker + ".part", marker)
time.sleep(3)
)");
  EXPECT_EQ(result.exit_code, -12);
}

TEST_F(FilesProtocol, AnAbandonedClaimIsSkippedWithoutADispatch) {
  const auto result = run_program(kRawClient + R"(
raw("0001", json.dumps({"id": "0001", "abandoned": True}).encode())
raw("0002", json.dumps({"id": "0002", "name": "add", "arguments": {"x": 5, "y": 5}}).encode())
print(answer("0002"))
print(os.path.exists(os.path.join(calls, "0001.response.json")))
)");
  EXPECT_NE(result.stdout_bytes.find("{'value': 10}\nFalse"), std::string::npos)
      << result.stdout_bytes;
}

}  // namespace
}  // namespace airlock
