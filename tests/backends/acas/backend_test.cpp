// The acas backend against the service double: every request is real HTTPS to a program serving
// the documented data plane, and every sandbox behind it is a real linux-backend sandbox, so the
// backend's commands, captures and file operations run for real. Faults are injected at each HTTP
// step through the double's control API, and every test ends by asking the double what is left.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <thread>

#include "airlock/backends/acas.hpp"
#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "double_process.hpp"

namespace airlock::acas {
namespace {

using acas_double::testing::DoubleOptions;
using acas_double::testing::DoubleProcess;
using json = nlohmann::json;
using namespace std::chrono_literals;

// A credential that hands out the token the double accepts, and counts how often it is asked.
class FixedCredential : public TokenCredential {
 public:
  explicit FixedCredential(std::string token) : token_(std::move(token)) {}
  AccessToken get_token(std::string_view, std::chrono::steady_clock::time_point) override {
    ++asked;
    return {token_, std::chrono::system_clock::now() + 1h};
  }
  std::string name() const override { return "fixed test token"; }
  std::atomic<int> asked{0};

 private:
  std::string token_;
};

class AcasBackendTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0) return;
    DoubleOptions options;
    options.extra_flags = {"--creating-polls", "2", "--transient-404-polls", "1",
                           "--deleting-polls", "1",
                           "--image", "airlock-busybox=host,public",
                           "--image", "unremovable=host,public,file_owner=unmapped",
                           "--image", "tools:1.0=host,id=img-tools,base=registry.test/tools:1.0"};
    double_ = new DoubleProcess(options);
  }
  static void TearDownTestSuite() {
    delete double_;
    double_ = nullptr;
  }
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "SKIPPED: the acas double runs linux sandboxes, which needs root";
    double_->reset();
    credential_ = std::make_shared<FixedCredential>(double_->options().accept_token);
  }
  void TearDown() override {
    if (!double_) return;
    backends_.clear();
    // Nothing a test made may outlive it: a fresh backend purges, and the double is asked.
    auto sweeper = backend();
    sweeper->purge_all();
    const json state = double_->state();
    EXPECT_EQ(state["sandboxes"].size(), 0u) << state.dump();
    EXPECT_EQ(state["linux_sandboxes"], 0) << state.dump();
  }

  AcasConfig config() const {
    AcasConfig config;
    config.endpoint = double_->endpoint();
    config.subscription_id = double_->options().subscription;
    config.resource_group = double_->options().resource_group;
    config.sandbox_group = double_->options().sandbox_group;
    config.registry = "registry.test";
    config.default_image = "airlock-busybox";
    config.tls_ca_file = double_->ca_file();
    config.poll_interval = 50ms;
    config.create_timeout = 60s;
    config.delete_timeout = 30s;
    config.retry_backoff = 20ms;
    config.retry_backoff_max = 200ms;
    config.credential = credential_;
    return config;
  }
  std::shared_ptr<AcasBackend> backend(std::optional<AcasConfig> with = std::nullopt) {
    auto made = std::make_shared<AcasBackend>(with.value_or(config()));
    backends_.push_back(made);
    return made;
  }
  static SandboxKey key(std::string scope = "scope-a", std::string thread = "thread-1") {
    return SandboxKey{std::move(scope), std::move(thread), "agents/a"};
  }
  static SandboxSpec spec(std::string kind = "exec", Egress egress = Egress::closed,
                          std::vector<std::string> hosts = {},
                          CapabilitySet required = kDefaultCapabilities,
                          std::optional<std::string> image = std::nullopt) {
    SandboxSpec::Fields fields;
    fields.kind = std::move(kind);
    fields.egress = egress;
    fields.egress_allow = std::move(hosts);
    fields.required_capabilities = required;
    fields.image = std::move(image);
    fields.work_dir = "/tmp/work";
    return SandboxSpec(std::move(fields));
  }
  static std::vector<json> requests(const std::string& route) {
    std::vector<json> found;
    for (const auto& request : double_->requests()) {
      if (request["route"] == route) found.push_back(request);
    }
    return found;
  }
  static json sandbox_in_double(const std::string& id) {
    const json state = double_->state();
    for (const auto& sandbox : state["sandboxes"]) {
      if (sandbox["id"] == id) return sandbox;
    }
    return nullptr;
  }

  // Gone, or its deletion accepted (an invalidated sandbox's deletion is asked for, not waited
  // out): the double disposes the linux sandbox behind it at once either way.
  static bool deleted(const std::string& id) {
    const json sandbox = sandbox_in_double(id);
    return sandbox.is_null() || sandbox["state"] == "Deleting";
  }

  static DoubleProcess* double_;
  std::shared_ptr<FixedCredential> credential_;
  std::vector<std::shared_ptr<AcasBackend>> backends_;
};

DoubleProcess* AcasBackendTest::double_ = nullptr;

// ---- acquisition ------------------------------------------------------------------------------

TEST_F(AcasBackendTest, ANewSandboxIsLabelledForItsConversationAndGetsBothLifecycleTimers) {
  auto acas = backend();
  const auto sandbox = acas->acquire(key(), spec());
  const auto creates = requests("create");
  ASSERT_EQ(creates.size(), 1u);
  const json body = json::parse(creates[0]["body"].get<std::string>());
  const json& labels = body["labels"];
  EXPECT_EQ(labels["scope"], "scope-a");
  EXPECT_EQ(labels["thread"], "thread-1");
  EXPECT_EQ(labels["kind"], "exec");
  EXPECT_EQ(labels["airlock"], "sandbox");
  EXPECT_EQ(labels["egress"], "closed");
  EXPECT_EQ(body["egressPolicy"]["defaultAction"], "Deny");
  EXPECT_TRUE(body["egressPolicy"]["hostRules"].empty());
  EXPECT_EQ(body["sourcesRef"]["diskImage"]["name"], "airlock-busybox");

  const json stored = sandbox_in_double(sandbox->instance_id());
  EXPECT_EQ(stored["lifecycle"]["autoSuspendPolicy"]["interval"], 60);
  EXPECT_EQ(stored["lifecycle"]["autoSuspendPolicy"]["enabled"], true);
  EXPECT_EQ(stored["lifecycle"]["autoDeletePolicy"]["deleteIntervalInSeconds"], 600);
  for (const auto& request : double_->requests()) {
    EXPECT_EQ(request["query"]["api-version"], "2026-02-01-preview") << request.dump();
    EXPECT_EQ(request["authorization"], "bearer") << request.dump();
  }
}

TEST_F(AcasBackendTest, LabelValuesPastSixtyThreeCharactersAreHashedNeverTruncated) {
  auto acas = backend();
  const std::string long_scope(100, 's');
  const auto sandbox = acas->acquire(key(long_scope), spec());
  const json labels = sandbox_in_double(sandbox->instance_id())["labels"];
  EXPECT_EQ(labels["scope"], map_label_value(long_scope));
  EXPECT_TRUE(labels["scope"].get<std::string>().starts_with("sha256-"));
  EXPECT_EQ(acas->dispose_scope(long_scope, std::nullopt), 1);
}

TEST_F(AcasBackendTest, ASpecLabelMayNotTakeAReservedKey) {
  auto acas = backend();
  SandboxSpec::Fields fields;
  fields.kind = "exec";
  fields.work_dir = "/tmp/work";
  fields.labels = {{"scope", "someone-else"}};
  try {
    (void)acas->acquire(key(), SandboxSpec(std::move(fields)));
    FAIL() << "a reserved label key was accepted";
  } catch (const InvalidArgument& refused) {
    EXPECT_NE(std::string(refused.what()).find("reserved"), std::string::npos);
  }
  EXPECT_TRUE(requests("create").empty()) << "refused before anything was made";
}

TEST_F(AcasBackendTest, WarmReuseIsPerKeyAndKind) {
  auto acas = backend();
  const auto first = acas->acquire(key(), spec("exec"));
  EXPECT_EQ(acas->acquire(key(), spec("exec"))->instance_id(), first->instance_id());
  EXPECT_NE(acas->acquire(key(), spec("codeact"))->instance_id(), first->instance_id());
  EXPECT_NE(acas->acquire(key("scope-a", "thread-2"), spec("exec"))->instance_id(),
            first->instance_id());
  EXPECT_EQ(requests("create").size(), 3u);
}

TEST_F(AcasBackendTest, AnotherReplicaFindsTheConversationsSandboxByItsLabels) {
  auto here = backend();
  const auto made = here->acquire(key(), spec());
  auto there = backend();  // another process: nothing in memory
  EXPECT_EQ(there->acquire(key(), spec())->instance_id(), made->instance_id());
  auto third = backend();
  EXPECT_EQ(third->dispose_scope("scope-a", std::nullopt), 1);
  EXPECT_TRUE(sandbox_in_double(made->instance_id()).is_null());
}

TEST_F(AcasBackendTest, AWarmSandboxDeletedBehindTheBackendsBackIsReplaced) {
  auto acas = backend();
  const auto first = acas->acquire(key(), spec());
  auto other = backend();  // another replica purges the conversation
  EXPECT_EQ(other->dispose_scope("scope-a", std::nullopt), 1);
  const auto second = acas->acquire(key(), spec());
  EXPECT_NE(second->instance_id(), first->instance_id());
  ExecOptions options;
  options.working_directory = "/tmp/work";
  EXPECT_EQ(second->exec(Command::shell("echo alive"), options).stdout_bytes, "alive\n");
}

TEST_F(AcasBackendTest, AWarmSandboxAskedForAnotherEgressPolicyIsAConflictUntilDisposed) {
  auto acas = backend();
  const auto closed = acas->acquire(key(), spec("exec", Egress::closed));
  EXPECT_THROW((void)acas->acquire(key(), spec("exec", Egress::allowlist, {"pypi.org"})),
               EgressPolicyConflict);
  auto replica = backend();
  EXPECT_THROW((void)replica->acquire(key(), spec("exec", Egress::allowlist, {"pypi.org"})),
               EgressPolicyConflict)
      << "another replica sees the posture label too";
  EXPECT_TRUE(acas->dispose_kind(key(), "exec", std::nullopt));
  const auto allowlist = acas->acquire(key(), spec("exec", Egress::allowlist, {"pypi.org"}));
  EXPECT_NE(allowlist->instance_id(), closed->instance_id());
  const json policy = sandbox_in_double(allowlist->instance_id())["egressPolicy"];
  EXPECT_EQ(policy["defaultAction"], "Deny");
  ASSERT_EQ(policy["hostRules"].size(), 1u);
  EXPECT_EQ(policy["hostRules"][0]["pattern"], "pypi.org");
  EXPECT_EQ(policy["hostRules"][0]["action"], "Allow");
}

TEST_F(AcasBackendTest, UnrestrictedEgressIsRefusedBeforeAnythingIsMade) {
  EXPECT_THROW((void)backend()->acquire(key(), spec("exec", Egress::unrestricted)), EgressNotEnforced);
  EXPECT_TRUE(requests("create").empty());
}

TEST_F(AcasBackendTest, ImagesResolveThroughTheCatalogueAndTheImportedList) {
  auto acas = backend();
  const auto imported = acas->acquire(key(), spec("exec", Egress::closed, {}, kDefaultCapabilities,
                                                  "tools:1.0"));
  const json body = json::parse(requests("create").back()["body"].get<std::string>());
  EXPECT_EQ(body["sourcesRef"]["diskImage"]["id"], "img-tools") << "registry-qualified, then by id";
  EXPECT_THROW((void)acas->acquire(key("other"), spec("exec", Egress::closed, {},
                                                      kDefaultCapabilities, "python-9.9")),
               InvalidArgument)
      << "an unknown bare name is not in the catalogue";
  EXPECT_THROW((void)acas->acquire(key("other"), spec("exec", Egress::closed, {},
                                                      kDefaultCapabilities, "missing:1")),
               InvalidArgument)
      << "a tagged reference must be imported first";
  EXPECT_EQ(requests("create").size(), 1u);
}

TEST_F(AcasBackendTest, AGuestThatCannotRemoveWhatTheFileApiWroteRefusesTheCapabilitiesThatNeedIt) {
  auto acas = backend();
  try {
    (void)acas->acquire(key(), spec("exec", Egress::closed, {},
                                    CapabilitySet{Capability::exec, Capability::files_out},
                                    "unremovable"));
    FAIL() << "files_out was granted on a guest that cannot remove a probe";
  } catch (const NotSupported& refused) {
    EXPECT_NE(std::string(refused.what()).find("files_out"), std::string::npos) << refused.what();
  }
  EXPECT_TRUE(double_->state()["sandboxes"].empty()) << "the refused sandbox was deleted";
  // An image whose guest can remove them serves files_out.
  EXPECT_NO_THROW((void)acas->acquire(
      key("other"), spec("exec", Egress::closed, {}, CapabilitySet{Capability::exec, Capability::files_out})));
  // Without files_out, files_delete or host_tools the same image serves.
  EXPECT_NO_THROW((void)acas->acquire(key(), spec("exec", Egress::closed, {}, kDefaultCapabilities,
                                                  "unremovable")));
}

TEST_F(AcasBackendTest, ASuspendedSandboxIsResumedOnWarmAcquire) {
  auto acas = backend();
  const auto sandbox = acas->acquire(key(), spec());
  double_->set_state(sandbox->instance_id(), "Suspended");
  EXPECT_EQ(acas->acquire(key(), spec())->instance_id(), sandbox->instance_id());
  EXPECT_EQ(requests("resume").size(), 1u);
  EXPECT_EQ(sandbox_in_double(sandbox->instance_id())["state"], "Running");
  double_->set_state(sandbox->instance_id(), "Suspended", "Disabled");
  EXPECT_THROW((void)acas->acquire(key(), spec()), BackendError) << "a disabled sandbox does not resume";
}

TEST_F(AcasBackendTest, AHandleWhoseSandboxTheServiceSuspendedResumesItOnItsNextRequest) {
  const auto sandbox = backend()->acquire(key(), spec());
  sandbox->write_file("kept.txt", "still here", "/tmp/work");
  double_->set_state(sandbox->instance_id(), "Suspended");  // the service's auto-suspend timer
  ExecOptions options;
  options.working_directory = "/tmp/work";
  EXPECT_EQ(sandbox->exec(Command::shell("cat kept.txt"), options).stdout_bytes, "still here");
  EXPECT_EQ(requests("resume").size(), 1u);
  double_->set_state(sandbox->instance_id(), "Suspended");
  EXPECT_EQ(sandbox->read_file("kept.txt", "/tmp/work", 1024), "still here") << "the file API too";
}

// ---- retries ----------------------------------------------------------------------------------

TEST_F(AcasBackendTest, RoleAssignmentPropagationIsRiddenOutBy403Retries) {
  double_->add_fault({{"route", "create"}, {"status", 403}, {"times", 3}});
  auto acas = backend();
  EXPECT_NO_THROW((void)acas->acquire(key(), spec()));
  EXPECT_EQ(requests("create").size(), 4u);
}

TEST_F(AcasBackendTest, ThrottlingAndServerErrorsAreRetriedHonouringRetryAfter) {
  double_->add_fault({{"route", "create"}, {"status", 429}, {"times", 1}, {"retry_after", "1"}});
  double_->add_fault({{"route", "get"}, {"status", 503}, {"times", 2}, {"retry_after_ms", "30"}});
  auto acas = backend();
  const auto started = std::chrono::steady_clock::now();
  EXPECT_NO_THROW((void)acas->acquire(key(), spec()));
  EXPECT_GE(std::chrono::steady_clock::now() - started, 1s) << "the 429's Retry-After was waited out";
  EXPECT_EQ(requests("create").size(), 2u);
}

TEST_F(AcasBackendTest, RetriesStopAtTheConfiguredCountAndTheMessageCarriesNoProviderDetail) {
  double_->add_fault({{"route", "create"}, {"status", 500}, {"times", 100},
                      {"body", "{\"error\":{\"code\":\"Boom\",\"message\":\"tenant 1234 SECRET-DETAIL\"}}"}});
  AcasConfig with = config();
  with.max_retries = 2;
  auto acas = backend(with);
  try {
    (void)acas->acquire(key(), spec());
    FAIL() << "a create the service keeps refusing succeeded";
  } catch (const BackendError& failed) {
    EXPECT_EQ(std::string(failed.what()).find("SECRET-DETAIL"), std::string::npos) << failed.what();
    EXPECT_EQ(std::string(failed.what()).find("127.0.0.1"), std::string::npos) << failed.what();
    EXPECT_NE(error_detail(failed).find("SECRET-DETAIL"), std::string::npos) << "logs get the body";
  }
  EXPECT_EQ(requests("create").size(), 3u) << "one try and two retries";
}

// ---- commands ---------------------------------------------------------------------------------

TEST_F(AcasBackendTest, CommandOutputIsByteExactThoughTheServiceSpeaksText) {
  const auto sandbox = backend()->acquire(key(), spec());
  ExecOptions options;
  options.working_directory = "/tmp/work";
  options.timeout = 60s;
  const ExecResult result =
      sandbox->exec(Command::shell("printf '\\377\\000\\200ok'; printf 'e\\376' >&2; exit 3"), options);
  EXPECT_EQ(result.stdout_bytes, std::string("\xff\0\x80ok", 5));
  EXPECT_EQ(result.stderr_bytes, "e\xfe");
  EXPECT_EQ(result.exit_code, 3);
}

TEST_F(AcasBackendTest, LiveStdinIsStagedAndOutputIsHandedToTheCallbackAtTheEnd) {
  const auto sandbox = backend()->acquire(key(), spec());
  int ends[2];
  ASSERT_EQ(::pipe2(ends, O_CLOEXEC), 0);
  std::thread writer([&] {
    (void)!::write(ends[1], "one\n", 4);
    std::this_thread::sleep_for(100ms);
    (void)!::write(ends[1], "two\n", 4);
    ::close(ends[1]);
  });
  ExecOptions options;
  options.working_directory = "/tmp/work";
  options.timeout = 60s;
  options.stdin_fd = ends[0];
  std::string streamed_out;
  std::string streamed_err;
  options.on_output = [&](OutputStream stream, std::string_view bytes) {
    (stream == OutputStream::stdout_stream ? streamed_out : streamed_err).append(bytes);
  };
  const ExecResult result = sandbox->exec(Command::shell("cat; echo err >&2"), options);
  writer.join();
  ::close(ends[0]);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(streamed_out, "one\ntwo\n");
  EXPECT_EQ(streamed_err, "err\n");
  EXPECT_EQ(result.stdout_bytes, "") << "streamed output is not also in the result";
}

TEST_F(AcasBackendTest, ATerminalOrSignalsAreRefusedBeforeAnythingRuns) {
  const auto sandbox = backend()->acquire(key(), spec());
  ExecOptions options;
  options.working_directory = "/tmp/work";
  options.timeout = 60s;
  options.terminal = WindowSize{24, 80};
  EXPECT_THROW((void)sandbox->exec(Command::shell("touch ran"), options), NotSupported);
  options.terminal.reset();
  options.control = std::make_shared<ExecControl>();
  EXPECT_THROW((void)sandbox->exec(Command::shell("touch ran"), options), NotSupported);
  options.control.reset();
  EXPECT_EQ(sandbox->exec(Command::shell("[ -e ran ] && echo ran; true"), options).stdout_bytes,
            "");
}

TEST_F(AcasBackendTest, AMissingWorkingDirectoryIsNotFoundAndCostsNothing) {
  const auto sandbox = backend()->acquire(key(), spec());
  ExecOptions options;
  options.working_directory = "/tmp/work/absent";
  EXPECT_THROW((void)sandbox->exec(Command::shell("true"), options), NotFound);
  options.working_directory = "/tmp/work";
  EXPECT_EQ(sandbox->exec(Command::shell("exit 113"), options).exit_code, 113)
      << "the command's own 113 is its exit code";
}

TEST_F(AcasBackendTest, ATimeoutInvalidatesTheSandboxAndDisposesIt) {
  auto acas = backend();
  const auto sandbox = acas->acquire(key(), spec());
  ExecOptions options;
  options.working_directory = "/tmp/work";
  options.timeout = 1500ms;
  try {
    (void)sandbox->exec(Command::shell("sleep 30"), options);
    FAIL() << "no timeout";
  } catch (const Timeout& timeout) {
    EXPECT_EQ(timeout.kill_confirmed(), std::optional<bool>(false));
  }
  EXPECT_TRUE(deleted(sandbox->instance_id())) << "disposed";
  EXPECT_THROW((void)sandbox->exec(Command::shell("true"), options), SandboxInvalidated)
      << "the handle refuses, saying why";
  EXPECT_NE(acas->acquire(key(), spec())->instance_id(), sandbox->instance_id());
}

TEST_F(AcasBackendTest, ACancellationInvalidatesTheSandboxToo) {
  const auto sandbox = backend()->acquire(key(), spec());
  std::stop_source stop;
  ExecOptions options;
  options.working_directory = "/tmp/work";
  options.stop = stop.get_token();
  std::thread canceller([&] {
    std::this_thread::sleep_for(500ms);
    stop.request_stop();
  });
  EXPECT_THROW((void)sandbox->exec(Command::shell("sleep 30"), options), Timeout);
  canceller.join();
  EXPECT_TRUE(deleted(sandbox->instance_id()));
}

TEST_F(AcasBackendTest, ADeadlineInsideA429WaitRetainsTheSandboxBecauseNothingRan) {
  const auto sandbox = backend()->acquire(key(), spec());
  double_->add_fault({{"route", "exec"}, {"status", 429}, {"times", 1}, {"retry_after", "30"}});
  ExecOptions options;
  options.working_directory = "/tmp/work";
  options.timeout = 2s;
  EXPECT_THROW((void)sandbox->exec(Command::shell("touch /tmp/work/ran"), options), Timeout);
  EXPECT_FALSE(sandbox_in_double(sandbox->instance_id()).is_null()) << "retained";
  options.timeout = 60s;
  const auto after = sandbox->exec(Command::shell("test -e /tmp/work/ran; echo $?"), options);
  EXPECT_EQ(after.stdout_bytes, "1\n") << "the refused request never ran";
}

TEST_F(AcasBackendTest, AFailureMidCaptureInvalidatesAndLeavesNothing) {
  const auto sandbox = backend()->acquire(key(), spec());
  // The run script answers; the first chunk read is refused in a way no retry covers.
  double_->add_fault({{"route", "exec"}, {"status", 400}, {"times", 1}, {"skip", 1}});
  ExecOptions options;
  options.working_directory = "/tmp/work";
  EXPECT_THROW((void)sandbox->exec(Command::shell("echo hello"), options), BackendError);
  EXPECT_TRUE(deleted(sandbox->instance_id()));
  EXPECT_EQ(double_->state()["linux_sandboxes"], 0) << "nothing runs behind it any more";
}

TEST_F(AcasBackendTest, OutputPastTheCeilingIsRefusedOrTruncatedAsAsked) {
  const auto sandbox = backend()->acquire(key(), spec());
  EXPECT_THROW((void)sandbox->exec_bounded(Command::shell("while :; do echo flood; done"), "/tmp/work",
                                           60s, 10'000),
               ExecOutputLimitExceeded);
  ExecOptions options;
  options.working_directory = "/tmp/work";
  options.max_output_bytes = 10;
  options.overflow = OutputOverflow::truncate;
  const auto truncated = sandbox->exec(Command::shell("echo 0123456789abcdef; exit 4"), options);
  EXPECT_EQ(truncated.stdout_bytes, "0123456789");
  EXPECT_TRUE(truncated.truncated);
  EXPECT_EQ(truncated.exit_code, 4);
}

// ---- files ------------------------------------------------------------------------------------

TEST_F(AcasBackendTest, WritesRunAsTheGuestNeverThroughTheFileApi) {
  const auto sandbox = backend()->acquire(key(), spec());
  double_->clear_requests();
  std::string content(200'000, '\0');
  for (std::size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>(i * 31);
  sandbox->write_file("deep/er/data.bin", content, "/tmp/work");
  EXPECT_TRUE(requests("files_write").empty()) << "no host-authority write";
  EXPECT_EQ(sandbox->read_file("deep/er/data.bin", "/tmp/work", 1 << 20), content);
  ExecOptions options;
  options.working_directory = "/tmp/work";
  const auto owner = sandbox->exec(Command::shell("stat -c %u deep/er/data.bin"), options);
  EXPECT_EQ(owner.stdout_bytes, "0\n") << "owned by the guest's own user";
}

TEST_F(AcasBackendTest, ALinkedParentIsRefusedOnEveryFileRoad) {
  const auto sandbox = backend()->acquire(key(), spec());
  ExecOptions options;
  options.working_directory = "/tmp/work";
  (void)sandbox->exec(Command::shell("ln -s /etc escape && ln -s /etc/hostname leaf"), options);
  EXPECT_THROW((void)sandbox->read_file("escape/hostname", "/tmp/work", 1 << 20), ConfinementError);
  EXPECT_THROW((void)sandbox->stat_file("escape/hostname", "/tmp/work"), ConfinementError);
  EXPECT_THROW((void)sandbox->list_dir("escape", "/tmp/work"), ConfinementError);
  EXPECT_THROW(sandbox->write_file("escape/planted", "x", "/tmp/work"), ConfinementError);
  EXPECT_THROW(sandbox->remove("escape/hostname", "/tmp/work", false), ConfinementError);
  EXPECT_THROW((void)sandbox->read_file("leaf", "/tmp/work", 1 << 20), SystemError) << "a final link";
  EXPECT_EQ(sandbox->stat_file("leaf", "/tmp/work")->kind, EntryKind::symlink);
}

TEST_F(AcasBackendTest, AFifoIsRefusedWithoutHangingOnTheFileApi) {
  const auto sandbox = backend()->acquire(key(), spec());
  ExecOptions options;
  options.working_directory = "/tmp/work";
  (void)sandbox->exec(Command::shell("mkfifo pipe && : > empty"), options);
  double_->clear_requests();
  EXPECT_THROW((void)sandbox->read_file("pipe", "/tmp/work", 1 << 20), SystemError);
  EXPECT_TRUE(requests("files_read").empty()) << "the guest was asked; the FIFO was never opened";
  EXPECT_EQ(sandbox->read_file("empty", "/tmp/work", 1 << 20), "");
}

TEST_F(AcasBackendTest, ListingAndRemovalAreConfirmedThroughTheFileApi) {
  const auto sandbox = backend()->acquire(key(), spec());
  sandbox->write_file("d/a.txt", "aa", "/tmp/work");
  sandbox->write_file("d/b.txt", "bbb", "/tmp/work");
  const auto entries = sandbox->list_dir("d", "/tmp/work");
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].path, "d/a.txt");
  EXPECT_EQ(entries[1].size_bytes, std::optional<std::uint64_t>(3));
  EXPECT_THROW(sandbox->remove("d", "/tmp/work", false), SystemError) << "a directory needs recursive";
  sandbox->remove("d", "/tmp/work", true);
  EXPECT_FALSE(sandbox->stat_file("d", "/tmp/work"));
  EXPECT_NO_THROW(sandbox->remove("d", "/tmp/work", true)) << "already gone is success";
}

TEST_F(AcasBackendTest, AReadLargerThanItsCapIsRefusedBeforeItsBodyIsRead) {
  const auto sandbox = backend()->acquire(key(), spec());
  sandbox->write_file("big", std::string(5000, 'x'), "/tmp/work");
  double_->clear_requests();
  EXPECT_THROW((void)sandbox->read_file("big", "/tmp/work", 4000), TransferCapExceeded);
  EXPECT_TRUE(requests("files_read").empty());
}

// ---- disposal ---------------------------------------------------------------------------------

TEST_F(AcasBackendTest, AFailedDeletionIsRetainedAndRefusesAcquisitionUntilCleanupSucceeds) {
  AcasConfig with = config();
  with.max_retries = 1;
  auto acas = backend(with);
  const auto sandbox = acas->acquire(key(), spec());
  double_->add_fault({{"route", "delete"}, {"status", 500}, {"times", 100}});
  EXPECT_FALSE(acas->dispose_kind(key(), "exec", std::nullopt));
  EXPECT_THROW((void)acas->acquire(key(), spec()), BackendError);
  EXPECT_FALSE(sandbox_in_double(sandbox->instance_id()).is_null());
  double_->reset();
  const auto fresh = acas->acquire(key(), spec());
  EXPECT_NE(fresh->instance_id(), sandbox->instance_id());
  EXPECT_TRUE(sandbox_in_double(sandbox->instance_id()).is_null()) << "the retained deletion ran first";
}

TEST_F(AcasBackendTest, AFailureMidCreateDeletesWhatWasMade) {
  // The create answers; the first status poll is refused in a way no retry covers.
  double_->add_fault({{"route", "get"}, {"status", 400}, {"times", 1}});
  EXPECT_THROW((void)backend()->acquire(key(), spec()), BackendError);
  EXPECT_EQ(requests("create").size(), 1u);
  EXPECT_EQ(requests("delete").size(), 1u);
}

TEST_F(AcasBackendTest, PurgeAllDeletesOnlyAirlocksSandboxes) {
  auto acas = backend();
  (void)acas->acquire(key("one"), spec());
  (void)acas->acquire(key("two"), spec());
  // A sandbox of the group that airlock did not make.
  const auto foreign = double_->data_plane(
      "PUT", "/sandboxes",
      json{{"sourcesRef", {{"diskImage", {{"name", "airlock-busybox"}, {"isPublic", true}}}}},
           {"labels", {{"owner", "someone"}}},
           {"egressPolicy", {{"defaultAction", "Deny"}, {"hostRules", json::array()}}}}
          .dump());
  ASSERT_TRUE(foreign.status == 200 || foreign.status == 201) << foreign.body;
  EXPECT_EQ(acas->list_sandboxes().size(), 2u);
  EXPECT_EQ(acas->purge_all(), 2);
  const json left = double_->state()["sandboxes"];
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0]["labels"]["owner"], "someone");
  double_->data_plane("DELETE", "/sandboxes/" + left[0]["id"].get<std::string>());
  for (int i = 0; i < 100 && !double_->state()["sandboxes"].empty(); ++i) {
    (void)double_->data_plane("GET", "/sandboxes/" + left[0]["id"].get<std::string>());
    std::this_thread::sleep_for(20ms);
  }
}

// ---- credentials ------------------------------------------------------------------------------

TEST_F(AcasBackendTest, AResolverFailureNeverFallsBackToAnotherIdentity) {
  AcasConfig with = config();
  with.credential = nullptr;
  with.credential_resolver = [](const CredentialRequest&) -> CredentialBinding {
    throw std::runtime_error("no grant for this conversation");
  };
  EXPECT_THROW((void)backend(with)->acquire(key(), spec()), BackendError);
  EXPECT_TRUE(double_->requests().empty()) << "nothing reached the service";
}

TEST_F(AcasBackendTest, AcquireAndCleanupResolveTheirGrantsIndependently) {
  std::vector<CredentialPurpose> asked;
  std::mutex guard;
  AcasConfig with = config();
  with.credential = nullptr;
  auto token = double_->options().accept_token;
  with.credential_resolver = [&](const CredentialRequest& request) {
    std::lock_guard lock(guard);
    asked.push_back(request.purpose);
    return CredentialBinding{"test-authority", request.purpose == CredentialPurpose::acquire ? "a" : "c",
                             [token] { return std::make_shared<FixedCredential>(token); }};
  };
  auto acas = backend(with);
  (void)acas->acquire(key(), spec());
  EXPECT_EQ(acas->dispose_scope("scope-a", "thread-1"), 1);
  std::lock_guard lock(guard);
  EXPECT_NE(std::find(asked.begin(), asked.end(), CredentialPurpose::acquire), asked.end());
  EXPECT_NE(std::find(asked.begin(), asked.end(), CredentialPurpose::purge), asked.end());
}

TEST_F(AcasBackendTest, TheDefaultChainReachesTheServiceWithAClientSecretToken) {
  setenv("AZURE_TENANT_ID", double_->options().tenant.c_str(), 1);
  setenv("AZURE_CLIENT_ID", "client-0001", 1);
  setenv("AZURE_CLIENT_SECRET", double_->options().client_secret.c_str(), 1);
  setenv("AZURE_AUTHORITY_HOST", double_->endpoint().c_str(), 1);
  AcasConfig with = config();
  with.credential = nullptr;
  auto acas = backend(with);
  EXPECT_NO_THROW((void)acas->acquire(key(), spec()));
  for (const char* name : {"AZURE_TENANT_ID", "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET", "AZURE_AUTHORITY_HOST"}) {
    unsetenv(name);
  }
  EXPECT_EQ(requests("token").size(), 1u) << "one token, cached for every request after";
}

}  // namespace
}  // namespace airlock::acas
