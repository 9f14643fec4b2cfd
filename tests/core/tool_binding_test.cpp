// The framework-neutral tool binding: the attach gate, keys read per call, the failure ladder,
// per-call reclaim, declarations.
#include "airlock/tool_binding.hpp"

#include <gtest/gtest.h>

#include "airlock/errors.hpp"
#include "airlock/testing.hpp"

namespace airlock {
namespace {

using json::Json;
using testing::InProcessBackendOptions;
using testing::InProcessSandbox;
using testing::InProcessSandboxBackend;

InProcessBackendOptions container_options() {
  InProcessBackendOptions options;
  options.isolation = Isolation::container;
  options.capabilities =
      CapabilitySet{Capability::exec, Capability::files_in, Capability::files_out};
  options.egress_modes = EgressSet{Egress::closed, Egress::allowlist};
  options.sandbox_per_key = true;
  return options;
}

struct Fixture {
  explicit Fixture(InProcessBackendOptions options = container_options())
      : backend(std::make_shared<InProcessSandboxBackend>(std::move(options))),
        router({backend}, {.min_isolation = Isolation::container}) {}

  ToolBindingOptions binding(std::string name = "run_it") {
    ToolBindingOptions options;
    options.router = &router;
    options.context.current_scope = [this] { return scope; };
    options.context.current_thread_id = [this] { return thread; };
    options.agent_dir = "coder";
    options.name = std::move(name);
    options.description = "runs it";
    options.on_reclaim_failure = [this](const ReclaimFailure& failure) {
      failures.push_back(failure);
    };
    return options;
  }

  std::shared_ptr<InProcessSandboxBackend> backend;
  SandboxRouter router;
  std::string scope = "tenant-1";
  std::optional<std::string> thread = "thread-1";
  std::vector<ReclaimFailure> failures;
};

SandboxSpec shell_spec(SandboxSpec::Fields fields = {}) {
  if (fields.kind.empty()) fields.kind = "shell";
  return SandboxSpec(std::move(fields));
}

// A body that acquires, takes its call path, and reports both.
std::string acquire_body(SandboxToolCall& call, const Json&) {
  auto key = call.key();
  if (auto* refusal = std::get_if<std::string>(&key)) return *refusal;
  auto sandbox = call.acquire(std::get<SandboxKey>(key));
  if (auto* refusal = std::get_if<std::string>(&sandbox)) return *refusal;
  return "ran in " + call.guest_call_path();
}

TEST(ToolBinding, ADisabledRouterAttachesNothing) {
  SandboxRouter empty({});
  ToolBindingOptions options;
  options.router = &empty;
  EXPECT_FALSE(sandboxed_tool(options, shell_spec(), acquire_body).has_value());
  options.router = nullptr;
  EXPECT_FALSE(sandboxed_tool(options, shell_spec(), acquire_body).has_value());
}

TEST(ToolBinding, TheAttachGateRefusesInOrder) {
  Fixture f;
  const auto lands = shell_spec({.required_capabilities = {Capability::exec, Capability::files_out},
                                 .declared_outputs = {{.path = "a.png"}}});
  EXPECT_THROW(sandboxed_tool(f.binding(), lands, acquire_body), OutputSinkRequired);
  auto with_sink = f.binding();
  with_sink.has_output_sink = true;
  EXPECT_NO_THROW(sandboxed_tool(with_sink, lands, acquire_body));
  const auto no_files_out = shell_spec(
      {.declared_outputs = {{.path = "a.png", .disposition = OutputDisposition::consume}}});
  EXPECT_THROW(sandboxed_tool(f.binding(), no_files_out, acquire_body), InvalidArgument);
  auto bad_timeout = f.binding();
  bad_timeout.reclaim_timeout = Milliseconds(0);
  EXPECT_THROW(sandboxed_tool(bad_timeout, shell_spec(), acquire_body), InvalidArgument);
  EXPECT_THROW(
      sandboxed_tool(f.binding(), shell_spec({.egress = Egress::unrestricted}), acquire_body),
      EgressNotEnforced);
  EXPECT_THROW(sandboxed_tool(f.binding(), shell_spec({.work_dir = "/"}), acquire_body),
               InvalidArgument);
}

TEST(ToolBinding, NoThreadMeansNoKeyAndNothingIsAcquired) {
  Fixture f;
  f.thread = std::nullopt;
  auto tool = sandboxed_tool(f.binding(), shell_spec(), acquire_body);
  EXPECT_EQ(tool->invoke(Json::object()),
            "Error: no active thread context — run_it must be called from within a thread");
  EXPECT_TRUE(f.backend->keys().empty());
}

TEST(ToolBinding, TheKeyIsReadFromTheHostOnEveryCall) {
  Fixture f;
  auto tool = sandboxed_tool(f.binding(), shell_spec(), acquire_body);
  tool->invoke(Json::object());
  f.thread = "thread-2";
  f.scope = "tenant-2";
  tool->invoke(Json::object());
  const auto keys = f.backend->keys();
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0], (SandboxKey{"tenant-1", "thread-1", "coder"}));
  EXPECT_EQ(keys[1], (SandboxKey{"tenant-2", "thread-2", "coder"}));
}

TEST(ToolBinding, ProviderDetailNeverReachesTheModel) {
  auto options = container_options();
  options.acquire_error = std::make_exception_ptr(
      BackendError("the engine failed", "POST https://10.1.2.3:2376/containers/create → 500"));
  Fixture f(options);
  auto tool = sandboxed_tool(f.binding(), shell_spec(), acquire_body);
  const std::string text = tool->invoke(Json::object());
  EXPECT_EQ(text, binding_sentences::kUnavailable);
  EXPECT_EQ(text.find("10.1.2.3"), std::string::npos);
}

TEST(ToolBinding, AConfigurationErrorAirlockAuthoredIsShownAsIs) {
  auto options = container_options();
  options.acquire_error = std::make_exception_ptr(InvalidArgument(
      "No sandbox image is configured: the spec names neither image nor image_id."));
  Fixture f(options);
  auto tool = sandboxed_tool(f.binding(), shell_spec(), acquire_body);
  EXPECT_EQ(tool->invoke(Json::object()),
            "Error: No sandbox image is configured: the spec names neither image nor image_id.");
}

TEST(ToolBinding, TheCallPathIsReclaimedAfterAResult) {
  Fixture f;
  auto tool = sandboxed_tool(f.binding(), shell_spec(), acquire_body);
  const std::string text = tool->invoke(Json::object());
  ASSERT_EQ(text.rfind("ran in /maf-sandbox/work/", 0), 0u) << text;
  const std::string path = text.substr(std::string("ran in ").size());
  EXPECT_EQ(path.size(), std::string("/maf-sandbox/work/").size() + 12);
  auto sandbox = std::dynamic_pointer_cast<InProcessSandbox>(
      f.backend->acquire({"tenant-1", "thread-1", "coder"}, shell_spec()));
  bool reclaimed = false;
  for (const auto& command : sandbox->commands()) {
    if (command.command == "'rm' '-rf' '--' '" + path + "'") reclaimed = true;
  }
  EXPECT_TRUE(reclaimed);
  EXPECT_TRUE(f.failures.empty());
}

TEST(ToolBinding, TheCallPathIsReclaimedAfterTheBodyThrows) {
  Fixture f;
  std::string path;
  auto tool = sandboxed_tool(f.binding(), shell_spec(),
                             [&](SandboxToolCall& call, const Json&) -> std::string {
                               auto key = std::get<SandboxKey>(call.key());
                               call.acquire(key);
                               path = call.guest_call_path();
                               throw std::runtime_error("the kind broke");
                             });
  EXPECT_EQ(tool->invoke(Json::object()),
            "Error: the tool failed — the reason is in the host's log");
  auto sandbox = std::dynamic_pointer_cast<InProcessSandbox>(
      f.backend->acquire({"tenant-1", "thread-1", "coder"}, shell_spec()));
  ASSERT_FALSE(sandbox->commands().empty());
  EXPECT_EQ(sandbox->commands().back().command, "'rm' '-rf' '--' '" + path + "'");
}

TEST(ToolBinding, AReclaimThatFailsIsHandedToTheHost) {
  auto options = container_options();
  options.sandbox.raises = std::make_exception_ptr(Timeout("the guest hung"));
  options.sandbox.emulate_commands = false;
  Fixture f(options);
  auto tool = sandboxed_tool(f.binding(), shell_spec(), acquire_body);
  tool->invoke(Json::object());
  ASSERT_EQ(f.failures.size(), 1u);
  EXPECT_EQ(f.failures[0].tool, "run_it");
  EXPECT_EQ(f.failures[0].key, (SandboxKey{"tenant-1", "thread-1", "coder"}));
  EXPECT_NE(f.failures[0].reason.find("the removal call failed"), std::string::npos);
}

TEST(ToolBinding, ACondemnedInstanceIsGoneAfterTheCall) {
  Fixture f;
  std::string instance;
  auto tool = sandboxed_tool(f.binding(), shell_spec(), [&](SandboxToolCall& call, const Json&) {
    auto sandbox =
        std::get<std::shared_ptr<Sandbox>>(call.acquire(std::get<SandboxKey>(call.key())));
    instance = sandbox->instance_id();
    call.condemn();
    return std::string("timed out");
  });
  tool->invoke(Json::object());
  // Wait for the background delete by entering exclusively.
  {
    auto drained =
        f.router.enter_call({"tenant-1", "thread-1", "coder"}, shell_spec(), {.exclusive = true});
  }
  const auto deleted = f.backend->disposed_instances();
  EXPECT_NE(std::find(deleted.begin(), deleted.end(), instance), deleted.end());
}

TEST(ToolBinding, TheConfidentialityCapIsDeclaredOnlyWhenTheToolCanCarryDataOut) {
  Fixture f;
  auto options = f.binding();
  options.outbound_max_confidentiality = "internal";
  auto closed = sandboxed_tool(options, shell_spec(), acquire_body);
  EXPECT_FALSE(closed->declarations().contains("max_allowed_confidentiality"));
  EXPECT_EQ(closed->declarations()["source_integrity"], "trusted");
  auto allowlist = sandboxed_tool(
      options, shell_spec({.egress_allow = {"pypi.org"}, .egress = Egress::allowlist}),
      acquire_body);
  EXPECT_EQ(allowlist->declarations()["max_allowed_confidentiality"], "internal");
}

}  // namespace
}  // namespace airlock
