// Host tools against real linux sandboxes, on both channels: the files channel (forced) and the
// socket channel the backend offers. Every test runs the same guest program on each channel and
// expects the same answer, so the two stay one door with one set of caps. The guest programs
// that skip the shim attack the host side directly: raw request files, raw socket lines.
#include "airlock/host_tools.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "airlock/errors.hpp"
#include "airlock/host_tool_transport.hpp"
#include "airlock/kinds/codeact.hpp"
#include "airlock/outputs.hpp"
#include "airlock/router.hpp"
#include "airlock/sinks.hpp"
#include "linux/fixture.hpp"

namespace airlock::linux_backend::testing {
namespace {

using json::Json;
using namespace std::chrono_literals;

std::shared_ptr<HostToolRegistry> registry_of(HostToolRegistryOptions options = {}) {
  auto registry = std::make_shared<HostToolRegistry>(std::move(options));
  registry->register_tool(
      HostTool{"add",
               "adds",
               {{"x", ToolParameter::Type::integer}, {"y", ToolParameter::Type::integer}},
               [](const Json& a) { return Json(a["x"].get<int>() + a["y"].get<int>()); },
               HostToolDeclaration(SourceIntegrity::trusted, std::nullopt, Identity::app)});
  registry->register_tool(
      HostTool{"explode",
               "raises",
               {},
               [](const Json&) -> Json { throw std::runtime_error("secret detail"); },
               HostToolDeclaration(SourceIntegrity::trusted, std::nullopt, Identity::app)});
  registry->register_tool(
      HostTool{"echo",
               "echoes",
               {{"text", ToolParameter::Type::string}},
               [](const Json& a) { return a["text"]; },
               HostToolDeclaration(SourceIntegrity::untrusted, std::nullopt, Identity::app)});
  return registry;
}

// A guest client that skips the shim, speaking whichever channel the run set up: `raw(ident,
// body)` sends one request (bytes) and returns the host's answer (parsed JSON, or None when the
// host gave none).
const std::string kRawClient = R"(import json, os, socket, time
SOCKET = os.environ.get("AIRLOCK_HOST_TOOLS_SOCKET")
calls = os.path.join(os.path.dirname(os.path.abspath(__file__)), "host_tool_calls")
def raw(ident, body, wait=True):
    if SOCKET:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(10)
            s.connect(SOCKET)
            s.sendall(body + b"\n")
            got = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
        return json.loads(got) if got else None
    os.makedirs(calls, exist_ok=True)
    part = os.path.join(calls, ident + ".request.json.part")
    with open(part, "wb") as f:
        f.write(body)
    os.rename(part, os.path.join(calls, ident + ".request.json"))
    if not wait:
        return None
    path = os.path.join(calls, ident + ".response.json")
    for _ in range(400):
        try:
            return json.load(open(path))
        except (OSError, ValueError):
            time.sleep(0.02)
    return None
)";

class HostToolsTest : public LinuxBackendTest,
                      public ::testing::WithParamInterface<HostToolChannel> {
 protected:
  void SetUp() override {
    LinuxBackendTest::SetUp();
    if (IsSkipped()) return;
    sandbox_ = acquire(spec());
    layout_ = guest_run_layout("/maf-sandbox/runs/r1");
  }
  void TearDown() override {
    sandbox_.reset();
    LinuxBackendTest::TearDown();
  }

  void prepare(const std::string& program, const std::vector<std::string>& names) {
    sandbox_->write_file(layout_.shim, host_tool_shim(names, 10s), "/");
    sandbox_->write_file(layout_.program, program, "/");
  }

  HostToolRunResult run(HostToolRun& tools, Milliseconds timeout = 30s) {
    HostToolRunOptions options;
    options.timeout = timeout;
    options.poll_interval = 20ms;
    options.channel = GetParam();
    return run_program_with_host_tools(*sandbox_, tools, layout_, options);
  }

  std::shared_ptr<LinuxSandbox> sandbox_;
  GuestRunLayout layout_;
};

TEST_P(HostToolsTest, AProgramCallsAToolAndGetsItsValue) {
  prepare(R"(import airlock_host_tools as tools
print(tools.add(x=2, y=40))
print(tools.call("echo", text="über"))
)",
          {"add", "echo"});
  HostToolRun tools(registry_of());
  const auto outcome = run(tools);
  EXPECT_EQ(outcome.channel, GetParam());
  EXPECT_EQ(outcome.result.exit_code, 0)
      << outcome.result.stdout_bytes << outcome.result.stderr_bytes;
  EXPECT_EQ(outcome.result.stdout_bytes, "42\nüber\n");
  EXPECT_EQ(tools.dispatched(), 2u);
  EXPECT_EQ(tools.delivered(), 2u);
}

TEST_P(HostToolsTest, AGuestWritingRequestsItselfIsServedIdentically) {
  prepare(kRawClient + R"(
print(raw("0001", json.dumps({"id": "0001", "name": "add", "arguments": {"x": 1, "y": 2}}).encode()))
)",
          {});
  HostToolRun tools(registry_of());
  const auto outcome = run(tools);
  EXPECT_NE(outcome.result.stdout_bytes.find("{'value': 3}"), std::string::npos)
      << outcome.result.stdout_bytes;
  EXPECT_EQ(tools.dispatched(), 1u);
}

TEST_P(HostToolsTest, ARequestLargerThanTheCapIsRefusedUnread) {
  prepare(kRawClient + R"(
print(raw("0001", json.dumps({"id": "0001", "name": "echo", "arguments": {"text": "x" * 5000}}).encode()))
print(raw("0002", json.dumps({"id": "0002", "name": "add", "arguments": {"x": 1, "y": 1}}).encode()))
)",
          {});
  HostToolRun tools(registry_of({.response_limits = {1024, 1 << 20, 16}}));
  const auto outcome = run(tools);
  EXPECT_NE(outcome.result.stdout_bytes.find("larger than the host will read"), std::string::npos)
      << outcome.result.stdout_bytes;
  EXPECT_NE(outcome.result.stdout_bytes.find("{'value': 2}"), std::string::npos)
      << "the run stopped after an oversized request: " << outcome.result.stdout_bytes;
  // The oversized request never reached the door: only the second was dispatched.
  EXPECT_EQ(tools.dispatched(), 1u);
}

TEST_P(HostToolsTest, InvalidJsonIsRefusedAndTheRunGoesOn) {
  prepare(kRawClient + R"(
print(raw("0001", b"{not json"))
print(raw("0002", b"[1, 2]"))
print(raw("0003", b"\xff\xfe"))
print(raw("0004", json.dumps({"id": "0004", "name": "add", "arguments": {"x": 2, "y": 2}}).encode()))
)",
          {});
  HostToolRun tools(registry_of());
  const auto outcome = run(tools);
  const std::string& out = outcome.result.stdout_bytes;
  EXPECT_NE(out.find("this host-tool request is not valid JSON"), std::string::npos) << out;
  EXPECT_NE(out.find("a host-tool request must be a JSON object"), std::string::npos) << out;
  EXPECT_NE(out.find("{'value': 4}"), std::string::npos) << out;
  EXPECT_EQ(tools.dispatched(), 1u);
}

TEST_P(HostToolsTest, AnAbandonedClaimIsSkippedWithoutADispatch) {
  prepare(kRawClient + R"(
print(raw("0001", json.dumps({"id": "0001", "abandoned": True}).encode(), wait=False))
print(raw("0002", json.dumps({"id": "0002", "name": "add", "arguments": {"x": 5, "y": 5}}).encode()))
print(os.path.exists(os.path.join(calls, "0001.response.json")))
)",
          {});
  HostToolRun tools(registry_of());
  const auto outcome = run(tools);
  EXPECT_NE(outcome.result.stdout_bytes.find("None\n{'value': 10}\nFalse"), std::string::npos)
      << outcome.result.stdout_bytes;
  EXPECT_EQ(tools.dispatched(), 1u);
}

TEST_P(HostToolsTest, AToolThatRaisesIsRefusedWithoutItsReason) {
  prepare(R"(import airlock_host_tools as tools
for name, args in [("explode", {}), ("missing", {}), ("add", {"x": "two", "y": 1})]:
    try:
        tools.call(name, **args)
    except tools.HostToolError as error:
        print(error)
print(tools.add(x=1, y=1))
)",
          {"add", "explode"});
  HostToolRun tools(registry_of());
  const auto outcome = run(tools);
  const std::string& out = outcome.result.stdout_bytes;
  EXPECT_NE(out.find("Error: host tool 'explode' failed — the reason is in the host's log"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("secret detail"), std::string::npos)
      << "the tool's own error reached the guest";
  EXPECT_NE(out.find("Error: 'missing' is not a registered host tool"), std::string::npos) << out;
  EXPECT_NE(out.find("argument 'x' must be an integer"), std::string::npos) << out;
  EXPECT_NE(out.find("\n2\n"), std::string::npos) << "the run did not go on: " << out;
}

TEST_P(HostToolsTest, TheDispatchCapIsCountedTheSameOnEveryChannel) {
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
  EXPECT_NE(outcome.result.stdout_bytes.find(
                "5 Error: this run's host-tool dispatch cap (5) is exhausted"),
            std::string::npos)
      << outcome.result.stdout_bytes;
}

TEST_P(HostToolsTest, TheResponseBudgetIsCountedTheSameOnEveryChannel) {
  // Each answer is {"value": "<200 x>"} plus framing; a 1000-byte run budget holds four.
  prepare(R"(import airlock_host_tools as tools
ok = 0
for i in range(20):
    try:
        tools.echo(text="x" * 200)
        ok += 1
    except tools.HostToolError as error:
        print(ok, error)
        break
)",
          {"echo"});
  HostToolRun tools(registry_of({.response_limits = {4096, 1000, 64}}));
  const auto outcome = run(tools);
  const std::string& out = outcome.result.stdout_bytes;
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.substr(0, 2), "4 ") << out;
  EXPECT_EQ(tools.delivered(), 4u);
}

TEST_P(HostToolsTest, AnOverrunningProgramAndItsChildrenAreKilled) {
  prepare(
      "import subprocess, time\n"
      "children = [subprocess.Popen(['sleep', '300']) for _ in range(3)]\n"
      "print('started', flush=True)\n"
      "time.sleep(300)\n",
      {});
  HostToolRun tools(registry_of());
  try {
    run(tools, 2s);
    FAIL() << "the run did not time out";
  } catch (const ProgramTimeout& timeout) {
    EXPECT_EQ(timeout.signal(), SignalOutcome::sent) << timeout.message();
    EXPECT_EQ(timeout.reach(), SignalReach::group) << timeout.message();
    EXPECT_NE(timeout.output().find("started"), std::string::npos) << timeout.output();
  }
  // Nothing of the program is left in the sandbox (a moment for the last exits to land).
  std::string left;
  for (int attempt = 0; attempt < 50; ++attempt) {
    left = sh(*sandbox_, "ps -eo comm= | grep -E '^(sleep|python3)$' || true").stdout_bytes;
    if (left.empty()) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(left, "") << "processes of the timed-out program survived";
  // The transport's own files went with it.
  EXPECT_FALSE(sandbox_->stat_file(layout_.shim, "/"));
}

TEST_P(HostToolsTest, TheTransportGoesAndTheWorkDirectoryStays) {
  prepare("open('artifact.txt', 'w').write('kept')\n", {});
  HostToolRun tools(registry_of());
  run(tools);
  EXPECT_FALSE(sandbox_->stat_file(layout_.directory + "/host_tools", "/"));
  EXPECT_EQ(sandbox_->read_file(layout_.work + "/artifact.txt", "/", 100), "kept");
  EXPECT_TRUE(reclaim_run(*sandbox_, layout_));
  EXPECT_FALSE(sandbox_->stat_file(layout_.directory, "/"));
  // No socket left in the channel's directory either.
  EXPECT_EQ(sh(*sandbox_, "ls -A /run/airlock-host-tools").stdout_bytes, "");
}

INSTANTIATE_TEST_SUITE_P(BothChannels, HostToolsTest,
                         ::testing::Values(HostToolChannel::files, HostToolChannel::socket),
                         [](const auto& param_info) {
                           return std::string(to_string(param_info.param));
                         });

// ---- the socket channel itself -------------------------------------------------------------

class SocketChannelTest : public LinuxBackendTest {};

TEST_F(SocketChannelTest, TheSocketChannelIsChosenByItself) {
  auto sandbox = acquire(spec());
  const auto channel = sandbox->socket_channel();
  ASSERT_TRUE(channel);
  EXPECT_EQ(channel->guest_directory, "/run/airlock-host-tools");
  const GuestRunLayout layout = guest_run_layout("/maf-sandbox/runs/auto");
  sandbox->write_file(layout.shim, host_tool_shim({"add"}, 10s), "/");
  sandbox->write_file(layout.program, "import airlock_host_tools as t\nprint(t.add(x=20, y=22))\n",
                      "/");
  HostToolRun tools(registry_of());
  const auto outcome = run_program_with_host_tools(*sandbox, tools, layout, HostToolRunOptions{});
  EXPECT_EQ(outcome.channel, HostToolChannel::socket);
  EXPECT_EQ(outcome.result.stdout_bytes, "42\n");
  EXPECT_TRUE(reclaim_run(*sandbox, layout));
}

TEST_F(SocketChannelTest, TheGuestCannotWriteIntoTheSocketDirectory) {
  auto sandbox = acquire(spec());
  const ExecResult attempt = sh(*sandbox,
                                "touch /run/airlock-host-tools/planted 2>&1; "
                                "ln -s /etc /run/airlock-host-tools/link 2>&1; "
                                "mkfifo /run/airlock-host-tools/fifo 2>&1; "
                                "ls -A /run/airlock-host-tools");
  EXPECT_NE(attempt.stdout_bytes.find("Read-only file system"), std::string::npos)
      << attempt.stdout_bytes;
  EXPECT_EQ(attempt.stdout_bytes.find("planted\n"), std::string::npos) << attempt.stdout_bytes;
  // Nor is anything there on the host side.
  const auto channel = sandbox->socket_channel();
  ASSERT_TRUE(channel);
  EXPECT_TRUE(std::filesystem::is_empty(channel->host_directory));
}

TEST_F(SocketChannelTest, AnotherSandboxCannotReachThisSandboxsSocket) {
  auto first = acquire(spec("first"));
  auto second = acquire(spec("second"));
  const GuestRunLayout layout = guest_run_layout("/maf-sandbox/runs/peek");
  first->write_file(layout.shim, host_tool_shim({}, 10s), "/");
  // While the first sandbox's run listens, the second sandbox looks for any socket to reach.
  first->write_file(layout.program,
                    "import time, os\nprint(len(os.listdir('/run/airlock-host-tools')))\n"
                    "time.sleep(2)\n",
                    "/");
  std::thread peek_later([&] {
    std::this_thread::sleep_for(700ms);
    const ExecResult peek = sh(*second, "ls -A /run/airlock-host-tools | wc -l");
    EXPECT_EQ(peek.stdout_bytes, "0\n") << "one sandbox sees another's host-tool socket";
  });
  HostToolRun tools(registry_of());
  const auto outcome = run_program_with_host_tools(*first, tools, layout, HostToolRunOptions{});
  peek_later.join();
  EXPECT_EQ(outcome.result.stdout_bytes, "1\n") << "the run's own socket was not visible to it";
  EXPECT_TRUE(reclaim_run(*first, layout));
}

// ---- codeact end to end --------------------------------------------------------------------

class CodeactOnLinuxTest : public LinuxBackendTest {};

TEST_F(CodeactOnLinuxTest, AProgramCallsAHostToolAndLandsADeclaredOutput) {
  TemporaryDirectory landing("airlock-codeact-landing");
  SandboxRouter router({backend_}, {.min_isolation = Isolation::container});
  auto registry = std::make_shared<HostToolRegistry>();
  registry->register_tool(HostTool{
      "lookup_rate",
      "a rate lookup",
      {{"currency", ToolParameter::Type::string}},
      [](const Json& a) { return Json(a["currency"].get<std::string>() == "EUR" ? 1.08 : 0.0); },
      HostToolDeclaration(SourceIntegrity::trusted, std::nullopt, Identity::app)});
  kinds::codeact::ToolOptions options;
  options.router = &router;
  const std::string scope = key_.scope;
  options.context.current_scope = [scope] { return scope; };
  options.context.current_thread_id = [] { return std::optional<std::string>("thread"); };
  options.spec.host_tools = registry;
  options.spec.outputs = kinds::codeact::Outputs::declared;
  options.output_sink = make_file_system_sink(landing.path());
  options.exec_timeout = 60s;
  auto tool = kinds::codeact::make_codeact_tool(options);
  ASSERT_TRUE(tool);
  const std::string text =
      tool->invoke({{"code",
                     "import airlock_host_tools as tools\n"
                     "rate = tools.lookup_rate(currency='EUR')\n"
                     "open('invoice.txt', 'w').write('100 USD = %.2f EUR\\n' % (100 / rate))\n"
                     "print('rate', rate)\n"},
                    {"outputs", {"invoice.txt"}}});
  EXPECT_NE(text.find("stdout:\nrate 1.08"), std::string::npos) << text;
  EXPECT_NE(text.find("Saved:\n- invoice.txt"), std::string::npos) << text;
  std::ifstream landed(landing.path() / "invoice.txt");
  std::string line;
  std::getline(landed, line);
  EXPECT_EQ(line, "100 USD = 92.59 EUR");
  // The sandbox the router picked is a linux one, found in this test's state.
  const auto sandboxes = backend_->list_sandboxes();
  ASSERT_EQ(sandboxes.size(), 1u);
  EXPECT_EQ(sandboxes[0].kind, "codeact");
  backend_->dispose_scope(scope, std::nullopt);
}

}  // namespace
}  // namespace airlock::linux_backend::testing
