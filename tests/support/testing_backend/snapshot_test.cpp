// The `testing` backend's snapshots, which every frontend's tests stand on: it must pass the
// snapshot conformance suite a real backend passes (files kept, forks apart, conversations
// apart, nothing left), copy rather than share, keep a snapshot and a command apart as a real
// backend does, and say plainly what it will not do.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "airlock/backend_factory.hpp"
#include "airlock/conformance.hpp"
#include "airlock/errors.hpp"
#include "airlock/router.hpp"
#include "airlock/testing.hpp"

// A namespace of its own: the suite's files are compiled as one unit (a unity build).
namespace airlock::testing::snapshot_test {
namespace {

using conformance::ProbeOutcome;
using conformance::run_snapshot_conformance;
using conformance::SnapshotSuiteOptions;
using json::Json;
using namespace std::chrono_literals;

constexpr const char* kWork = "/maf-sandbox/work";
const SandboxKey kKey{"tenant", "thread", "agent"};

Json snapshotting(Json extra = Json::object()) {
  Json config{{"isolation", "container"},
              {"capabilities", {"exec", "files_in", "files_out", "snapshot"}},
              {"snapshot_content", "filesystem"}};
  config.update(extra);
  return config;
}

std::shared_ptr<InProcessSandboxBackend> backend_of(const Json& config) {
  auto backend = std::static_pointer_cast<InProcessSandboxBackend>(
      make_backend("testing", config, "backend"));
  EXPECT_NE(backend, nullptr);
  return backend;
}

SandboxSpec spec(Egress egress = Egress::closed) {
  SandboxSpec::Fields fields;
  fields.kind = "k";
  fields.egress = egress;
  if (egress == Egress::allowlist) fields.egress_allow = {"example.org"};
  return SandboxSpec(std::move(fields));
}

SandboxRouter router_over(std::shared_ptr<SandboxBackend> backend) {
  RouterOptions options;
  options.min_isolation = Isolation::container;
  return SandboxRouter({std::move(backend)}, options);
}

ExecResult shell(Sandbox& sandbox, const std::string& line, Milliseconds timeout = 10s) {
  ExecOptions options;
  options.working_directory = kWork;
  options.timeout = timeout;
  return sandbox.exec(Command::shell(line), options);
}

TEST(TestingBackendSnapshots, PassesTheSnapshotConformanceSuite) {
  SnapshotSuiteOptions options;
  options.backend = backend_of(snapshotting());
  options.floor = Isolation::container;
  options.work_dir = kWork;
  options.exec_timeout = 10s;
  options.spec = [](Egress egress) {
    SandboxSpec::Fields fields;
    fields.kind = "conformance";
    fields.work_dir = kWork;
    fields.egress = egress;
    if (egress == Egress::allowlist) fields.egress_allow = {"example.org"};
    fields.required_capabilities = {Capability::exec, Capability::files_in, Capability::files_out};
    return SandboxSpec(std::move(fields));
  };
  const auto results = run_snapshot_conformance(options);
  ASSERT_EQ(results.size(), 7u);
  for (const auto& result : results) {
    if (result.probe == "processes-survive-a-resume") {
      EXPECT_EQ(result.outcome, ProbeOutcome::skipped) << "its snapshots hold files only";
      continue;
    }
    EXPECT_EQ(result.outcome, ProbeOutcome::passed) << result.probe << ": " << result.detail;
  }
  EXPECT_TRUE(options.backend->list_snapshots().empty()) << "the suite left a snapshot";
  EXPECT_TRUE(options.backend->list_sandboxes().empty()) << "the suite left a sandbox";
}

TEST(TestingBackendSnapshots, DeclaresOnlyWhatItIsToldButTakesThemAnyway) {
  const auto silent = backend_of({{"isolation", "container"}});
  EXPECT_FALSE(silent->snapshot_content().has_value());
  EXPECT_EQ(backend_of(snapshotting({{"snapshot_content", "filesystem+memory"}}))->snapshot_content(),
            SnapshotContent::filesystem_and_memory);

  // The router refuses a snapshot of a backend that does not declare the capability …
  auto router = router_over(silent);
  router.acquire(kKey, spec());
  EXPECT_THROW(router.snapshot(kKey, spec()), CapabilityNotSupported);
  // … the backend itself enforces nothing: its record says it holds files.
  auto sandbox = std::static_pointer_cast<InProcessSandbox>(silent->acquire(kKey, spec()));
  const SnapshotRecord record = sandbox->snapshot();
  EXPECT_EQ(record.content, SnapshotContent::filesystem);
  EXPECT_EQ(record.id.size(), 29u);
  EXPECT_EQ(record.id.rfind("snap-", 0), 0u);
  EXPECT_EQ(record.backend, "in-process");
  EXPECT_EQ(record.source_instance_id, sandbox->instance_id());
  EXPECT_EQ(record.labels.at("airlock.scope"), "tenant");
  EXPECT_EQ(record.labels.at("airlock.thread"), "thread");
  EXPECT_EQ(record.egress_posture, "closed");
  EXPECT_EQ(record.work_dir, kWork);
  EXPECT_TRUE(snapshot_belongs_to(record, kKey));
}

TEST(TestingBackendSnapshots, ASnapshotIsACopyAndAResumeIsAFreshInstance) {
  const auto backend = backend_of(snapshotting());
  auto router = router_over(backend);
  auto sandbox = std::static_pointer_cast<InProcessSandbox>(router.acquire(kKey, spec()));
  sandbox->write_file("a.txt", "before", kWork);
  ASSERT_EQ(shell(*sandbox, "mkdir -p d && printf x > d/x && chmod 400 d/x").exit_code, 0);
  const SnapshotRecord record = router.snapshot(kKey, spec());
  EXPECT_GT(record.bytes, 0u);
  sandbox->write_file("a.txt", "after", kWork);

  auto resumed = std::static_pointer_cast<InProcessSandbox>(router.resume(kKey, spec(), record.id));
  EXPECT_NE(resumed->instance_id(), record.source_instance_id);
  EXPECT_EQ(resumed->contents(std::string(kWork) + "/a.txt"), "before");
  EXPECT_EQ(resumed->contents(std::string(kWork) + "/d/x"), "x");
  // Its owner bits came along: the guest can no longer write the file it made read-only.
  EXPECT_NE(shell(*resumed, "printf y > d/x").exit_code, 0);
  // The resumed sandbox took the key's slot: the old instance was disposed of.
  const auto disposed = backend->disposed_instances();
  EXPECT_NE(std::find(disposed.begin(), disposed.end(), record.source_instance_id), disposed.end());
  EXPECT_EQ(router.acquire(kKey, spec())->instance_id(), resumed->instance_id());
  EXPECT_EQ(backend->resumed_snapshots(), std::vector<std::string>{record.id});
  // A write in the resumed sandbox changes neither the snapshot nor a later fork.
  resumed->write_file("a.txt", "resumed's own", kWork);
  auto fork = router.resume({"tenant", "thread", "other-agent"}, spec(), record.id);
  EXPECT_EQ(fork->read_file("a.txt", kWork, 64), "before");
}

TEST(TestingBackendSnapshots, ASnapshotAndACommandOfOneSandboxNeverOverlap) {
  const auto backend = backend_of(snapshotting({{"snapshot_seconds", 0.4}}));
  auto sandbox = std::static_pointer_cast<InProcessSandbox>(backend->acquire(kKey, spec()));
  sandbox->seed_directory(kWork);

  // A command in flight: the snapshot is refused, not taken under it.
  auto running = std::async(std::launch::async, [&] { return shell(*sandbox, "sleep 0.5"); });
  ASSERT_TRUE([&] {
    for (int i = 0; i < 500 && sandbox->commands_running() == 0; ++i) std::this_thread::sleep_for(2ms);
    return sandbox->commands_running() == 1;
  }());
  EXPECT_THROW(sandbox->snapshot(), BackendError);
  EXPECT_EQ(running.get().exit_code, 0);
  EXPECT_TRUE(backend->list_snapshots().empty());

  // A snapshot being taken: a command is refused, not run in a half-saved sandbox.
  auto saving = std::async(std::launch::async, [&] { return sandbox->snapshot(); });
  std::this_thread::sleep_for(100ms);
  EXPECT_THROW(shell(*sandbox, "printf late > late.txt"), BackendError);
  EXPECT_EQ(saving.get().kind, "k");
  EXPECT_EQ(shell(*sandbox, "printf on > on.txt").exit_code, 0) << "the sandbox runs on after";

  // Through the router both succeed: the snapshot is an exclusive call and waits its turn.
  auto router = router_over(backend);
  auto admitted = std::async(std::launch::async, [&] {
    auto call = router.enter_call(kKey, spec());
    return shell(*call.acquire(), "sleep 0.3");
  });
  for (int i = 0; i < 500 && sandbox->commands_running() == 0; ++i) std::this_thread::sleep_for(2ms);
  const SnapshotRecord taken = router.snapshot(kKey, spec());
  EXPECT_EQ(admitted.get().exit_code, 0);
  EXPECT_TRUE(backend->find_snapshot(taken.id).has_value());
}

TEST(TestingBackendSnapshots, TheSharedSandboxBelongsToNoConversationAndTakesNone) {
  InProcessBackendOptions options;
  options.snapshot_content = SnapshotContent::filesystem;
  InProcessSandboxBackend backend(options);
  EXPECT_THROW(backend.sandbox()->snapshot(), NotSupported);
  SnapshotRecord record;
  record.id = "snap-000000000000000000000000";
  EXPECT_THROW(backend.acquire_from_snapshot(kKey, spec(), record), NotSupported);
  // A sandbox made by hand has no backend to keep its snapshot.
  EXPECT_THROW(InProcessSandbox().snapshot(), NotSupported);
}

TEST(TestingBackendSnapshots, ConversationDisposalAndPurgeTakeTheSnapshots) {
  const auto backend = backend_of(snapshotting());
  auto router = router_over(backend);
  const SandboxKey other_thread{"tenant", "thread-2", "agent"};
  const SandboxKey other_scope{"tenant-2", "thread", "agent"};
  std::vector<std::string> ids;
  for (const auto& key : {kKey, other_thread, other_scope}) {
    router.acquire(key, spec());
    ids.push_back(router.snapshot(key, spec()).id);
  }
  EXPECT_EQ(backend->list_sandboxes().size(), 3u);
  EXPECT_EQ(router.list_snapshots("tenant", std::nullopt).size(), 2u);
  EXPECT_EQ(router.dispose_scope("tenant", std::string_view("thread")), 1);
  EXPECT_FALSE(backend->find_snapshot(ids[0]));
  EXPECT_TRUE(backend->find_snapshot(ids[1]));
  EXPECT_TRUE(backend->find_snapshot(ids[2]));
  // A disposal that fails removes nothing, snapshots included.
  backend->set_dispose_fails(true);
  EXPECT_EQ(router.dispose_scope("tenant", std::nullopt), 0);
  EXPECT_TRUE(backend->find_snapshot(ids[1]));
  backend->set_dispose_fails(false);
  EXPECT_EQ(backend->purge_all(), 2);
  EXPECT_TRUE(backend->list_snapshots().empty());
  EXPECT_TRUE(backend->list_sandboxes().empty());
}

TEST(TestingBackendSnapshots, DeleteIsIdempotentAndRecorded) {
  const auto backend = backend_of(snapshotting());
  auto router = router_over(backend);
  router.acquire(kKey, spec());
  const std::string id = router.snapshot(kKey, spec()).id;
  EXPECT_TRUE(router.delete_snapshot(kKey, id));
  EXPECT_FALSE(backend->find_snapshot(id));
  EXPECT_THROW(router.delete_snapshot(kKey, id), NotFound) << "the router: no such snapshot now";
  EXPECT_TRUE(backend->delete_snapshot(id)) << "the backend: a missing one is gone";
  EXPECT_EQ(backend->deleted_snapshots(), (std::vector<std::string>{id, id}));
}

TEST(TestingBackendSnapshots, ItsConfigurationNamesAWrongSnapshotField) {
  for (const auto& [field, value] :
       std::vector<std::pair<std::string, Json>>{{"snapshot_content", "memory"},
                                                 {"snapshot_content", 1},
                                                 {"snapshot_seconds", 0},
                                                 {"snapshot_seconds", "soon"}}) {
    try {
      make_backend("testing", Json{{field, value}}, "backend");
      ADD_FAILURE() << field << " = " << value.dump() << " was accepted";
    } catch (const InvalidArgument& error) {
      EXPECT_EQ(error.check(), "backend." + field);
    }
  }
  EXPECT_FALSE(backend_of({{"snapshot_content", nullptr}})->snapshot_content().has_value());
}

}  // namespace
}  // namespace airlock::testing::snapshot_test
