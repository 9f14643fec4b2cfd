// The framework-neutral tool binding: the attach gate and its order, keys read per call, the
// acquire ladder, one admission and one reclaim per key a call acquires, the reclaim hook's
// bound and its cancellation, the body's exceptions, declarations — and the library's logs.
#include "airlock/tool_binding.hpp"

#include <gtest/gtest.h>
#include <spdlog/sinks/ansicolor_sink.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <sstream>

#include "airlock/errors.hpp"
#include "airlock/logging.hpp"
#include "airlock/testing.hpp"

namespace airlock {
namespace {

using namespace std::chrono_literals;
using json::Json;
using testing::InProcessBackendOptions;
using testing::InProcessSandbox;
using testing::InProcessSandboxBackend;

constexpr const char* kWork = "/maf-sandbox/work";

InProcessBackendOptions container_options() {
  InProcessBackendOptions options;
  options.isolation = Isolation::container;
  options.capabilities =
      CapabilitySet{Capability::exec, Capability::files_in, Capability::files_out};
  options.egress_modes = EgressSet{Egress::closed, Egress::allowlist};
  options.sandbox_per_key = true;
  return options;
}

OutputSink recording_sink() {
  return OutputSink{[](const Artifact& artifact) {
    return LandedArtifact{artifact.name, artifact.name + " landed", std::nullopt};
  }};
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
      std::lock_guard lock(mutex);
      failures.push_back(failure);
    };
    return options;
  }

  std::shared_ptr<InProcessSandbox> sandbox_of(const SandboxKey& key) {
    return std::dynamic_pointer_cast<InProcessSandbox>(backend->acquire(key, shell_spec()));
  }

  static SandboxSpec shell_spec(SandboxSpec::Fields fields = {}) {
    if (fields.kind.empty()) fields.kind = "shell";
    return SandboxSpec(std::move(fields));
  }

  std::shared_ptr<InProcessSandboxBackend> backend;
  SandboxRouter router;
  std::string scope = "tenant-1";
  std::optional<std::string> thread = "thread-1";
  std::mutex mutex;
  std::vector<ReclaimFailure> failures;
};

SandboxSpec shell_spec(SandboxSpec::Fields fields = {}) {
  return Fixture::shell_spec(std::move(fields));
}

const SandboxKey kFirst{"tenant-1", "thread-1", "coder"};
const SandboxKey kOther{"tenant-1", "thread-2", "coder"};

// A body that acquires, takes its call path, and reports both.
std::string acquire_body(SandboxToolCall& call, const Json&) {
  auto key = call.key();
  if (auto* refusal = std::get_if<std::string>(&key)) return *refusal;
  auto sandbox = call.acquire(std::get<SandboxKey>(key));
  if (auto* refusal = std::get_if<std::string>(&sandbox)) return *refusal;
  return "ran in " + call.guest_call_path();
}

bool removed(InProcessSandbox& sandbox, const std::string& path) {
  for (const auto& command : sandbox.commands()) {
    if (command.command == "'rm' '-rf' '--' '" + path + "'") return true;
  }
  return false;
}

// The body makes the call path unremovable in the sandbox of `key`: its parent stops being
// writable to the guest, so `rm -rf` exits non-zero there.
void pin_call_path(SandboxToolCall& call, const SandboxKey& key) {
  auto sandbox = std::get<std::shared_ptr<Sandbox>>(call.acquire(key));
  const std::string path = call.guest_call_path();
  sandbox->write_file(path + "/left.txt", "data", kWork);
  ExecOptions options;
  options.working_directory = "/";
  sandbox->exec(Command::argv({"chmod", "555", kWork}), options);
}

// ---- the attach gate ------------------------------------------------------------------------

TEST(ToolBinding, ADisabledRouterAttachesNothing) {
  SandboxRouter empty({});
  ToolBindingOptions options;
  options.router = &empty;
  EXPECT_FALSE(sandboxed_tool(options, shell_spec(), acquire_body).has_value());
  options.router = nullptr;
  EXPECT_FALSE(sandboxed_tool(options, shell_spec(), acquire_body).has_value());
}

TEST(ToolBinding, NoRouterAttachesNothingBeforeAnyOtherCheck) {
  // Every later step of the gate would refuse this; the first one decides.
  SandboxRouter empty({});
  ToolBindingOptions options;
  options.router = &empty;
  options.reclaim_timeout = Milliseconds(0);
  options.declarations = Json::object();
  options.output_sink = recording_sink();
  const auto refused_everywhere = shell_spec(
      {.work_dir = "/", .declared_outputs = {{.path = "a.png"}}, .egress = Egress::unrestricted});
  EXPECT_FALSE(sandboxed_tool(options, refused_everywhere, nullptr).has_value());
}

TEST(ToolBinding, TheAttachGateRefusesInTheReferenceOrder) {
  Fixture f;
  const auto lands = shell_spec({.required_capabilities = {Capability::exec, Capability::files_out},
                                 .declared_outputs = {{.path = "a.png"}}});
  // 2 before 3: explicit declarations with a sink.
  auto both = f.binding();
  both.declarations = Json{{"source_integrity", "trusted"}};
  both.output_sink = recording_sink();
  EXPECT_THROW(sandboxed_tool(both, lands, acquire_body), InvalidArgument);
  // 3 before 4: a landing spec with no sink and no files_out is refused for the sink.
  const auto lands_without_files_out = shell_spec({.declared_outputs = {{.path = "a.png"}}});
  EXPECT_THROW(sandboxed_tool(f.binding(), lands_without_files_out, acquire_body),
               OutputSinkRequired);
  auto with_sink = f.binding();
  with_sink.output_sink = recording_sink();
  EXPECT_NO_THROW(sandboxed_tool(with_sink, lands, acquire_body));
  // 4 before 5.
  auto bad_timeout = f.binding();
  bad_timeout.reclaim_timeout = Milliseconds(0);
  const auto no_files_out = shell_spec(
      {.declared_outputs = {{.path = "a.png", .disposition = OutputDisposition::consume}}});
  try {
    sandboxed_tool(bad_timeout, no_files_out, acquire_body);
    FAIL() << "accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_EQ(error.check(), "spec.requires");
  }
  // 5 before 6.
  try {
    sandboxed_tool(bad_timeout, shell_spec({.egress = Egress::unrestricted}), acquire_body);
    FAIL() << "accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_EQ(error.check(), "reclaim_timeout");
  }
  // 6 before 8.
  EXPECT_THROW(
      sandboxed_tool(f.binding(), shell_spec({.work_dir = "/", .egress = Egress::unrestricted}),
                     acquire_body),
      EgressNotEnforced);
  EXPECT_THROW(sandboxed_tool(f.binding(), shell_spec({.work_dir = "/"}), acquire_body),
               InvalidArgument);
}

TEST(ToolBinding, TheSinkRefusalNamesWhatLands) {
  Fixture f;
  try {
    sandboxed_tool(f.binding("charts"),
                   shell_spec({.required_capabilities = {Capability::exec, Capability::files_out},
                               .declared_outputs = {{.path = "out/b.png"}, {.path = "a.csv"}}}),
                   acquire_body);
    FAIL() << "accepted";
  } catch (const OutputSinkRequired& refusal) {
    EXPECT_NE(refusal.message().find("a.csv"), std::string::npos) << refusal.message();
    EXPECT_NE(refusal.message().find("out/b.png"), std::string::npos) << refusal.message();
    EXPECT_NE(refusal.message().find("charts"), std::string::npos) << refusal.message();
  }
  try {
    sandboxed_tool(f.binding(),
                   shell_spec({.required_capabilities = {Capability::exec, Capability::files_out},
                               .outputs_named_at_call_time = true}),
                   acquire_body);
    FAIL() << "accepted";
  } catch (const OutputSinkRequired& refusal) {
    EXPECT_NE(refusal.message().find("at call time"), std::string::npos) << refusal.message();
  }
}

// ---- the key and the ladder -----------------------------------------------------------------

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

TEST(ToolBinding, EachRungOfTheAcquireLadderHasItsSentence) {
  const std::vector<std::pair<std::exception_ptr, std::string>> rungs = {
      {std::make_exception_ptr(BackendNotInstalled("runsc is missing", "/usr/bin/runsc")),
       binding_sentences::kNotInstalled},
      {std::make_exception_ptr(NoSandboxBackend("none here")), binding_sentences::kNoBackend},
      {std::make_exception_ptr(InvalidArgument("No sandbox image is configured.")),
       "Error: No sandbox image is configured."},
      {std::make_exception_ptr(EgressNotEnforced("refused", "egress")),
       binding_sentences::kUnavailable},
      {std::make_exception_ptr(std::runtime_error("anything else")),
       binding_sentences::kUnavailable},
  };
  for (const auto& [error, sentence] : rungs) {
    auto options = container_options();
    options.acquire_error = error;
    Fixture f(options);
    auto tool = sandboxed_tool(f.binding(), shell_spec(), acquire_body);
    EXPECT_EQ(tool->invoke(Json::object()), sentence);
  }
}

TEST(ToolBinding, TheNotInstalledSentenceSaysSo) {
  EXPECT_STREQ(binding_sentences::kNotInstalled,
               "Error: the sandbox backend is not installed — degrading to T0");
}

TEST(ToolBinding, AListingFailureQuotesItsReason) {
  Fixture f;
  auto options = f.binding();
  options.context.list_files = [](const std::string&) -> std::vector<std::string> {
    throw std::runtime_error("the store is offline");
  };
  auto tool = sandboxed_tool(options, shell_spec(), [](SandboxToolCall& call, const Json&) {
    return std::get<std::string>(call.list_files("docs"));
  });
  EXPECT_EQ(tool->invoke(Json::object()),
            "Error: could not list the file store: the store is offline");
}

// ---- one admission, one sandbox and one reclaim per key ---------------------------------------

TEST(ToolBinding, EachKeyAcquiredInACallGetsItsOwnSandbox) {
  Fixture f;
  std::string first_instance, other_instance, again_instance, path;
  auto tool = sandboxed_tool(f.binding(), shell_spec(), [&](SandboxToolCall& call, const Json&) {
    first_instance = std::get<std::shared_ptr<Sandbox>>(call.acquire(kFirst))->instance_id();
    other_instance = std::get<std::shared_ptr<Sandbox>>(call.acquire(kOther))->instance_id();
    again_instance = std::get<std::shared_ptr<Sandbox>>(call.acquire(kFirst))->instance_id();
    EXPECT_EQ(f.router.calls_in_flight(kFirst, "shell"), 1);
    EXPECT_EQ(f.router.calls_in_flight(kOther, "shell"), 1);
    path = call.guest_call_path();
    return std::string("ok");
  });
  EXPECT_EQ(tool->invoke(Json::object()), "ok");
  EXPECT_NE(first_instance, other_instance) << "the second key got the first key's sandbox";
  EXPECT_EQ(first_instance, again_instance) << "one key, one sandbox per call";
  EXPECT_TRUE(removed(*f.sandbox_of(kFirst), path));
  EXPECT_TRUE(removed(*f.sandbox_of(kOther), path));
  EXPECT_EQ(f.router.calls_in_flight(kFirst, "shell"), 0) << "an admission outlived the call";
  EXPECT_EQ(f.router.calls_in_flight(kOther, "shell"), 0) << "an admission outlived the call";
}

TEST(ToolBinding, AReclaimFailureIsReportedForTheSandboxItHappenedIn) {
  Fixture f;
  std::string path;
  auto tool = sandboxed_tool(f.binding(), shell_spec(), [&](SandboxToolCall& call, const Json&) {
    call.acquire(kFirst);
    pin_call_path(call, kOther);
    path = call.guest_call_path();
    return std::string("ok");
  });
  tool->invoke(Json::object());
  ASSERT_EQ(f.failures.size(), 1u);
  EXPECT_EQ(f.failures[0].key, kOther);
  EXPECT_EQ(f.failures[0].path, path);
  EXPECT_NE(f.failures[0].reason.find("the guest refused it: rm exited"), std::string::npos)
      << f.failures[0].reason;
  EXPECT_TRUE(removed(*f.sandbox_of(kFirst), path));
}

TEST(ToolBinding, AHandleKeptPastItsCallRecordsNothing) {
  Fixture f;
  std::optional<SandboxToolCall> kept;
  auto tool = sandboxed_tool(f.binding(), shell_spec(), [&](SandboxToolCall& call, const Json&) {
    kept = call;
    return std::string("ok");
  });
  tool->invoke(Json::object());
  ASSERT_TRUE(kept);
  EXPECT_TRUE(kept->ended());
  EXPECT_THROW(kept->acquire(kFirst), std::logic_error);
  EXPECT_THROW(kept->guest_call_path(), std::logic_error);
  EXPECT_THROW(kept->key(), std::logic_error);
  EXPECT_TRUE(f.backend->keys().empty()) << "an ended call acquired";
  EXPECT_EQ(f.router.calls_in_flight(kFirst, "shell"), 0);
}

// ---- the body's exceptions ------------------------------------------------------------------

TEST(ToolBinding, ABodysExceptionPropagatesAfterTheCallIsCleanedUp) {
  Fixture f;
  std::string path;
  auto tool = sandboxed_tool(f.binding(), shell_spec(),
                             [&](SandboxToolCall& call, const Json&) -> std::string {
                               call.acquire(kFirst);
                               path = call.guest_call_path();
                               throw std::runtime_error("the kind broke");
                             });
  try {
    tool->invoke(Json::object());
    FAIL() << "the body's exception was swallowed";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "the kind broke");
  }
  EXPECT_TRUE(removed(*f.sandbox_of(kFirst), path));
  EXPECT_EQ(f.router.calls_in_flight(kFirst, "shell"), 0) << "the admission was not released";
}

struct Cancelled {};  // not a std::exception: what a binding's cancellation looks like

TEST(ToolBinding, ACancelledBodyIsReclaimedUnderTheShortBound) {
  Fixture f;
  std::string path;
  auto tool = sandboxed_tool(f.binding(), shell_spec(),
                             [&](SandboxToolCall& call, const Json&) -> std::string {
                               call.acquire(kFirst);
                               path = call.guest_call_path();
                               throw Cancelled{};
                             });
  EXPECT_THROW(tool->invoke(Json::object()), Cancelled);
  bool bounded = false;
  for (const auto& command : f.sandbox_of(kFirst)->commands()) {
    if (command.command.find(path) != std::string::npos) bounded = command.timeout == 2s;
  }
  EXPECT_TRUE(bounded) << "the reclaim after a cancellation was not bounded by 2 s";
}

// ---- the reclaim hook -------------------------------------------------------------------------

TEST(ToolBinding, AReclaimThatFailsIsHandedToTheHost) {
  auto options = container_options();
  options.sandbox.raises = std::make_exception_ptr(Timeout("the guest hung"));
  options.sandbox.emulate_commands = false;
  Fixture f(options);
  auto tool = sandboxed_tool(f.binding(), shell_spec(), acquire_body);
  tool->invoke(Json::object());
  ASSERT_EQ(f.failures.size(), 1u);
  EXPECT_EQ(f.failures[0].tool, "run_it");
  EXPECT_EQ(f.failures[0].key, kFirst);
  EXPECT_NE(f.failures[0].reason.find("the removal call failed"), std::string::npos);
}

TEST(ToolBinding, AHookThatNeverReturnsIsBoundedByTheReclaimTimeout) {
  Fixture f;
  auto options = f.binding();
  options.reclaim_timeout = 200ms;
  std::mutex mutex;
  std::condition_variable released;
  bool release = false;
  std::atomic<bool> hook_finished{false};
  options.on_reclaim_failure = [&](const ReclaimFailure&) {
    std::unique_lock lock(mutex);
    released.wait_for(lock, 20s, [&] { return release; });
    hook_finished = true;
  };
  auto tool = sandboxed_tool(options, shell_spec(), [](SandboxToolCall& call, const Json&) {
    pin_call_path(call, kFirst);
    return std::string("done");
  });
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(tool->invoke(Json::object()), "done");
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s) << "the hook held the call";
  EXPECT_FALSE(hook_finished);
  {
    std::lock_guard lock(mutex);
    release = true;
  }
  released.notify_all();
  for (int i = 0; i < 200 && !hook_finished; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(hook_finished);
}

TEST(ToolBinding, AHookThatThrowsIsLoggedAndTheCallGoesOn) {
  Fixture f;
  auto options = f.binding();
  int calls = 0;
  options.on_reclaim_failure = [&](const ReclaimFailure&) {
    ++calls;
    throw std::runtime_error("the host's pager is down");
  };
  auto tool = sandboxed_tool(options, shell_spec(), [](SandboxToolCall& call, const Json&) {
    pin_call_path(call, kFirst);
    pin_call_path(call, kOther);
    return std::string("done");
  });
  EXPECT_EQ(tool->invoke(Json::object()), "done");
  EXPECT_EQ(calls, 2) << "a throwing hook stopped the other sandbox's report";
}

TEST(ToolBinding, AHookCancellationPropagatesAndAbandonsTheRemainingReclaims) {
  Fixture f;
  auto options = f.binding();
  int calls = 0;
  options.on_reclaim_failure = [&](const ReclaimFailure&) {
    ++calls;
    throw Cancelled{};
  };
  std::string path;
  auto tool = sandboxed_tool(options, shell_spec(), [&](SandboxToolCall& call, const Json&) {
    pin_call_path(call, kFirst);
    call.acquire(kOther);
    path = call.guest_call_path();
    return std::string("done");
  });
  EXPECT_THROW(tool->invoke(Json::object()), Cancelled);
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(removed(*f.sandbox_of(kOther), path)) << "a reclaim ran after the cancellation";
  EXPECT_EQ(f.router.calls_in_flight(kFirst, "shell"), 0);
  EXPECT_EQ(f.router.calls_in_flight(kOther, "shell"), 0);
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
  { auto drained = f.router.enter_call(kFirst, shell_spec(), {.exclusive = true}); }
  const auto deleted = f.backend->disposed_instances();
  EXPECT_NE(std::find(deleted.begin(), deleted.end(), instance), deleted.end());
}

// ---- reclaim_guest_path -----------------------------------------------------------------------

TEST(ReclaimGuestPath, RefusesWithoutTouchingTheGuestWhatItMustNotRemove) {
  InProcessSandbox sandbox;
  EXPECT_NE(reclaim_guest_path(sandbox, "../../etc", kWork, 1s), std::nullopt);
  EXPECT_EQ(reclaim_guest_path(sandbox, ".", kWork, 1s), "the call path is the work directory");
  EXPECT_EQ(reclaim_guest_path(sandbox, "x", "/", 1s),
            "the call path is too close to the guest root");
  EXPECT_TRUE(sandbox.commands().empty()) << "a refused path reached the guest";
}

TEST(ReclaimGuestPath, RemovesTheTreeAndReportsAGuestRefusal) {
  InProcessSandbox sandbox;
  sandbox.seed_file(std::string(kWork) + "/abc/deep/file.txt", "x");
  EXPECT_EQ(reclaim_guest_path(sandbox, "abc", kWork, 1s), std::nullopt);
  EXPECT_FALSE(sandbox.exists(std::string(kWork) + "/abc"));
  sandbox.seed_file(std::string(kWork) + "/def/file.txt", "x");
  sandbox.set_mode(kWork, 0555);
  const auto reason = reclaim_guest_path(sandbox, "def", kWork, 1s);
  ASSERT_TRUE(reason);
  EXPECT_EQ(reason->rfind("the guest refused it: rm exited ", 0), 0u) << *reason;
}

TEST(ReclaimGuestPath, AFailingRemovalIsAReasonNeverAThrow) {
  InProcessSandbox sandbox(
      {.raises = std::make_exception_ptr(Timeout("hung")), .emulate_commands = false});
  const auto reason = reclaim_guest_path(sandbox, "abc", kWork, 1s);
  ASSERT_TRUE(reason);
  EXPECT_EQ(reason->rfind("the removal call failed: ", 0), 0u) << *reason;
}

// ---- declarations -----------------------------------------------------------------------------

TEST(ToolBinding, TheConfidentialityCapIsDeclaredOnlyWhenTheToolCanCarryDataOut) {
  Fixture f;
  auto options = f.binding();
  options.outbound_max_confidentiality = "internal";
  auto closed = sandboxed_tool(options, shell_spec(), acquire_body);
  EXPECT_EQ(closed->declarations(), (Json{{"source_integrity", "trusted"}}));
  auto allowlist = sandboxed_tool(
      options, shell_spec({.egress_allow = {"pypi.org"}, .egress = Egress::allowlist}),
      acquire_body);
  EXPECT_EQ(allowlist->declarations()["max_allowed_confidentiality"], "internal");
  const auto lands = shell_spec({.required_capabilities = {Capability::exec, Capability::files_out},
                                 .declared_outputs = {{.path = "a.png"}}});
  EXPECT_EQ(
      sandbox_tool_declarations(lands, {.outbound_max_confidentiality = "internal",
                                        .has_output_sink = true})["max_allowed_confidentiality"],
      "internal");
  EXPECT_FALSE(sandbox_tool_declarations(shell_spec({.egress = Egress::unrestricted}),
                                         {.outbound_max_confidentiality = "internal"})
                   .contains("max_allowed_confidentiality"))
      << "the reference caps on the allowlist's hosts, not the mode";
}

TEST(ToolBinding, ExplicitDeclarationsReplaceTheDerivedOnes) {
  Fixture f;
  auto options = f.binding();
  options.declarations = Json{{"confidentiality", "secret"}};
  auto tool = sandboxed_tool(options, shell_spec(), acquire_body);
  EXPECT_EQ(tool->declarations(), (Json{{"confidentiality", "secret"}}));
}

TEST(ToolBinding, TheBodyReachesTheSinkItWasGiven) {
  Fixture f;
  auto options = f.binding();
  options.output_sink = recording_sink();
  const OutputSink* seen = nullptr;
  const auto lands = shell_spec({.required_capabilities = {Capability::exec, Capability::files_out},
                                 .outputs_named_at_call_time = true});
  auto tool = sandboxed_tool(options, lands, [&](SandboxToolCall& call, const Json&) {
    seen = call.sink();
    return call.sink() ? call.sink()->deliver(Artifact{"a.txt", "x", "shell", {}}).display
                       : std::string("no sink");
  });
  EXPECT_EQ(tool->invoke(Json::object()), "a.txt landed");
  EXPECT_NE(seen, nullptr);
}

// ---- error_detail and the library's log sink ---------------------------------------------------

TEST(ErrorDetail, AppendsTheProvidersStatusAndTheStartOfItsBody) {
  const std::string body = std::string(700, 'b');
  const BackendError error("the engine refused", "POST /containers/create → 409",
                           BackendError::ProviderResponse{409, body});
  const std::string detail = error_detail(error);
  EXPECT_EQ(detail,
            "BackendError: the engine refused | POST /containers/create → 409 | "
            "status=409 | body=" +
                std::string(600, 'b'));
  EXPECT_EQ(error_detail(BackendError("plain")), "BackendError: plain");
  EXPECT_EQ(error_detail(std::runtime_error("raw")), "exception: raw");
}

TEST(ErrorDetail, NeverCutsACharacterOfTheBodyInHalf) {
  std::string body;
  for (int i = 0; i < 700; ++i) body += "é";  // two bytes each
  const std::string detail =
      error_detail(BackendError("x", "", BackendError::ProviderResponse{500, body}));
  const std::string shown = detail.substr(detail.find("body=") + 5);
  EXPECT_EQ(shown.size(), 1200u);
  EXPECT_EQ(shown, body.substr(0, 1200));
}

TEST(LibraryLogs, GoToStderrAndNeverReplaceAHostsLogger) {
  const auto before = spdlog::default_logger();
  // libairlock is loaded: the default logger is not spdlog's stdout one.
  ASSERT_EQ(before->sinks().size(), 1u);
  EXPECT_EQ(dynamic_cast<spdlog::sinks::ansicolor_stdout_sink_mt*>(before->sinks()[0].get()),
            nullptr);
  // spdlog's built-in stdout default is replaced…
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "", std::make_shared<spdlog::sinks::ansicolor_stdout_sink_mt>()));
  EXPECT_TRUE(use_stderr_for_library_logs());
  EXPECT_NE(dynamic_cast<spdlog::sinks::ansicolor_stderr_sink_mt*>(
                spdlog::default_logger()->sinks()[0].get()),
            nullptr);
  // …and a host's own logger is kept.
  std::ostringstream host_log;
  auto host = std::make_shared<spdlog::logger>(
      "host", std::make_shared<spdlog::sinks::ostream_sink_mt>(host_log));
  spdlog::set_default_logger(host);
  EXPECT_FALSE(use_stderr_for_library_logs());
  EXPECT_EQ(spdlog::default_logger(), host);
  spdlog::set_default_logger(before);
}

}  // namespace
}  // namespace airlock
