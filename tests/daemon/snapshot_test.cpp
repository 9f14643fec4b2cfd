// Snapshots over HTTP, as attacks: a conversation reaching another's snapshot, ids shaped to
// name paths, a snapshot racing a command on the same sandbox, a resume racing one — against the
// testing backend, which refuses a snapshot taken under a running command and a command run
// during a snapshot, so only the daemon's exclusive admission lets both succeed.
#include <future>
#include <regex>

#include "airlock/encoding.hpp"
#include "daemon/support.hpp"

// A namespace of its own: the suite's files are compiled as one unit (a unity build).
namespace airlock::daemon::test::snapshot_test {
namespace {

using Clock = std::chrono::steady_clock;

std::shared_ptr<testing::InProcessSandboxBackend> snapshotting_backend(
    Milliseconds snapshot_duration = Milliseconds(0)) {
  testing::InProcessBackendOptions options;
  options.name = "testing";
  options.isolation = Isolation::container;
  options.capabilities = CapabilitySet{Capability::exec, Capability::files_in,
                                       Capability::files_out, Capability::snapshot};
  options.sandbox_per_key = true;
  options.snapshot_content = SnapshotContent::filesystem;
  options.snapshot_duration = snapshot_duration;
  return std::make_shared<testing::InProcessSandboxBackend>(options);
}

struct SnapshotFixture : DaemonFixture {
  explicit SnapshotFixture(Milliseconds snapshot_duration = Milliseconds(0))
      : DaemonFixture(snapshotting_backend(snapshot_duration)),
        in_process(std::static_pointer_cast<testing::InProcessSandboxBackend>(backend)) {}

  std::shared_ptr<testing::InProcessSandboxBackend> in_process;

  Reply take(const std::string& handle) const {
    return client->request("POST", "/v1/sandboxes/" + handle + "/snapshots");
  }
  // The snapshot's id; fails the test on anything but a 201.
  std::string snapshot_of(const std::string& handle) const {
    const Reply reply = take(handle);
    EXPECT_EQ(reply.status, 201) << reply.body;
    return reply.json()["snapshot"].value("id", "");
  }
  Reply resume(const json::Json& key, const json::Json& id,
               const json::Json& spec = default_spec()) const {
    return client->post("/v1/sandboxes", {{"key", key}, {"spec", spec}, {"from_snapshot", id}});
  }
  Reply put(const std::string& handle, const std::string& path, const std::string& bytes) const {
    return client->put("/v1/sandboxes/" + handle + "/files?path=" + url_encode(path), bytes);
  }
  Reply get(const std::string& handle, const std::string& path) const {
    return client->get("/v1/sandboxes/" + handle + "/files?path=" + url_encode(path));
  }
  Reply list(const std::string& query) const { return client->get("/v1/snapshots?" + query); }
  Reply remove(const std::string& id, const std::string& query) const {
    return client->del("/v1/snapshots/" + url_encode(id) + "?" + query);
  }
  std::shared_ptr<testing::InProcessSandbox> sandbox_of(const std::string& instance) const {
    for (const auto& sandbox : in_process->live_sandboxes()) {
      if (sandbox->instance_id() == instance) return sandbox;
    }
    return nullptr;
  }
};

double metric(const std::string& text, const std::string& series) {
  const auto at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

TEST(DaemonSnapshots, TakenResumedAndForkedOverHttp) {
  SnapshotFixture fixture;
  const auto key = DaemonFixture::key("tenant", "t1", "coder");
  const std::string handle = fixture.acquire(key);
  ASSERT_EQ(fixture.put(handle, "notes.md", "before the snapshot").status, 200);
  ASSERT_EQ(fixture.exec(handle, {{"shell", "printf by-a-command > made.txt"}}).status, 200);
  const std::string instance = fixture.client->get("/v1/sandboxes/" + handle).json()["instance_id"];

  const Reply taken = fixture.take(handle);
  ASSERT_EQ(taken.status, 201) << taken.body;
  const json::Json snapshot = taken.json()["snapshot"];
  EXPECT_EQ(taken.json()["sandbox"], handle);
  EXPECT_EQ(taken.json()["instance_id"], instance);
  EXPECT_TRUE(std::regex_match(snapshot["id"].get<std::string>(), std::regex("snap-[0-9a-f]{24}")));
  EXPECT_EQ(snapshot["content"], "filesystem");
  EXPECT_EQ(snapshot["kind"], "deepagents");
  EXPECT_EQ(snapshot["egress_posture"], "closed");
  EXPECT_EQ(snapshot["source_instance_id"], instance);
  EXPECT_GT(snapshot["bytes"].get<std::uint64_t>(), 0u);
  EXPECT_EQ(snapshot["labels"]["airlock.scope"], label_digest("tenant"))
      << "label values are digests, as in every listing";
  const std::string id = snapshot["id"];
  ASSERT_EQ(fixture.put(handle, "later.md", "after the snapshot").status, 200);

  // Resumed into the same handle: a new instance with the snapshot's files and nothing later.
  const Reply resumed = fixture.resume(key, id);
  ASSERT_EQ(resumed.status, 200) << resumed.body;
  EXPECT_EQ(resumed.json()["sandbox"], handle);
  EXPECT_EQ(resumed.json()["from_snapshot"], id);
  EXPECT_NE(resumed.json()["instance_id"], instance);
  EXPECT_EQ(fixture.get(handle, "notes.md").body, "before the snapshot");
  EXPECT_EQ(fixture.get(handle, "made.txt").body, "by-a-command");
  EXPECT_EQ(fixture.get(handle, "later.md").status, 404);
  EXPECT_EQ(fixture.client->get("/v1/sandboxes/" + handle).json()["instance_id"],
            resumed.json()["instance_id"])
      << "the handle reaches the resumed instance";

  // A fork under another agent of the conversation: its own handle (201), its own files.
  const Reply forked = fixture.resume(DaemonFixture::key("tenant", "t1", "reviewer"), id);
  ASSERT_EQ(forked.status, 201) << forked.body;
  const std::string fork = forked.json()["sandbox"];
  EXPECT_NE(fork, handle);
  ASSERT_EQ(fixture.put(fork, "notes.md", "the fork's own").status, 200);
  EXPECT_EQ(fixture.get(handle, "notes.md").body, "before the snapshot");
  EXPECT_EQ(fixture.get(fork, "made.txt").body, "by-a-command");

  const Reply listed = fixture.list("scope=tenant&thread_id=t1");
  ASSERT_EQ(listed.status, 200) << listed.body;
  ASSERT_EQ(listed.json()["snapshots"].size(), 1u);
  EXPECT_EQ(listed.json()["snapshots"][0]["id"], id);

  const std::string metrics = fixture.client->get("/v1/metrics").body;
  EXPECT_EQ(metric(metrics, "airlock_snapshots_total{operation=\"taken\"}"), 1);
  EXPECT_EQ(metric(metrics, "airlock_snapshots_total{operation=\"resumed\"}"), 2);
  const Reply gone = fixture.remove(id, "scope=tenant&thread_id=t1");
  ASSERT_EQ(gone.status, 200) << gone.body;
  EXPECT_EQ(gone.json()["deleted"], true);
  EXPECT_EQ(metric(fixture.client->get("/v1/metrics").body,
                   "airlock_snapshots_total{operation=\"deleted\"}"),
            1);
  EXPECT_TRUE(fixture.list("scope=tenant").json()["snapshots"].empty());
  EXPECT_EQ(fixture.get(fork, "made.txt").body, "by-a-command")
      << "a fork keeps what it holds when its snapshot goes";
}

TEST(DaemonSnapshots, AnotherConversationsSnapshotIsTheSame404AsOneThatNeverExisted) {
  SnapshotFixture fixture;
  const auto owner = DaemonFixture::key("tenant", "t1", "coder");
  const std::string handle = fixture.acquire(owner);
  ASSERT_EQ(fixture.put(handle, "secret.txt", "conversation one's").status, 200);
  const std::string id = fixture.snapshot_of(handle);
  const std::string never = "snap-" + std::string(24, '0');

  const auto same_refusal = [&](const Reply& theirs, const Reply& missing, const std::string& where) {
    EXPECT_EQ(theirs.status, 404) << where << ": " << theirs.body;
    EXPECT_EQ(missing.status, 404) << where << ": " << missing.body;
    json::Json a = theirs.error();
    json::Json b = missing.error();
    a["message"] = std::regex_replace(a.value("message", ""), std::regex(id), "ID");
    b["message"] = std::regex_replace(b.value("message", ""), std::regex(never), "ID");
    EXPECT_EQ(a, b) << where << ": another conversation's snapshot is told apart from none";
    EXPECT_EQ(a["type"], "NotFound");
  };
  for (const auto& stranger : {DaemonFixture::key("tenant", "t2", "coder"),
                               DaemonFixture::key("tenant-2", "t1", "coder"),
                               DaemonFixture::key("tenant", "", "coder")}) {
    const std::string who = stranger.dump();
    same_refusal(fixture.resume(stranger, id), fixture.resume(stranger, never), "resume by " + who);
    EXPECT_EQ(fixture.resume(stranger, id).error()["check"], "body.from_snapshot");
    const std::string query = "scope=" + url_encode(stranger["scope"].get<std::string>()) +
                              "&thread_id=" + url_encode(stranger["thread_id"].get<std::string>());
    same_refusal(fixture.remove(id, query), fixture.remove(never, query), "delete by " + who);
    for (const auto& listed : fixture.list(query).json()["snapshots"]) {
      EXPECT_NE(listed["id"], id) << who << " lists another conversation's snapshot";
    }
  }
  EXPECT_EQ(fixture.list("scope=tenant-2").json()["snapshots"].size(), 0u);
  // Nothing of the refused calls reached a sandbox or the snapshot.
  EXPECT_EQ(fixture.in_process->live_sandboxes().size(), 1u) << "a refused resume made a sandbox";
  EXPECT_TRUE(fixture.in_process->resumed_snapshots().empty());
  EXPECT_TRUE(fixture.in_process->find_snapshot(id).has_value()) << "a refused delete removed it";
  EXPECT_EQ(fixture.client->get("/v1/sandboxes").json()["sandboxes"].size(), 1u);
  // The owner still reaches it, under any agent of the conversation.
  EXPECT_EQ(fixture.resume(DaemonFixture::key("tenant", "t1", "other"), id).status, 201);
  EXPECT_EQ(fixture.remove(id, "scope=tenant&thread_id=t1").status, 200);
  EXPECT_EQ(fixture.remove(id, "scope=tenant&thread_id=t1").status, 404) << "gone is gone";
}

TEST(DaemonSnapshots, MalformedIdsAndQueriesAreRefusedNamingTheFieldAndNeverReachTheBackend) {
  SnapshotFixture fixture;
  const auto key = DaemonFixture::key("tenant", "t1", "coder");
  const std::string handle = fixture.acquire(key);
  const std::string id = fixture.snapshot_of(handle);
  for (const json::Json& bad :
       std::vector<json::Json>{"../../../etc/passwd", "/etc/passwd", "snap-", "snap-../../x",
                               "..", "", "SNAP-000000000000000000000000",
                               "snap-00000000000000000000000", "snap-0000000000000000000000000",
                               "snap-00000000000000000000000g", id + "\n", " " + id,
                               std::string("snap-") + '\0' + std::string(23, '0')}) {
    const Reply reply = fixture.resume(key, bad);
    EXPECT_EQ(reply.status, 400) << bad.dump() << ": " << reply.body;
    EXPECT_EQ(reply.error()["check"], "body.from_snapshot") << bad.dump();
    const std::string text = bad.get<std::string>();
    if (text.empty() || text == ".." || text.find('/') != std::string::npos) {
      continue;  // no path segment of its own: the percent-encoded ones below
    }
    const Reply removal = fixture.remove(bad, "scope=tenant&thread_id=t1");
    EXPECT_EQ(removal.status, 400) << bad.dump() << ": " << removal.body;
    if (removal.status == 400 && removal.error()["check"] != "params.snapshot") {
      // A NUL or a newline is refused by the HTTP layer first, naming the request itself.
      EXPECT_EQ(removal.error()["type"], "InvalidArgument") << removal.body;
    }
  }
  for (const json::Json& wrong : {json::Json(5), json::Json::array({id}), json::Json{{"id", id}}}) {
    const Reply reply = fixture.resume(key, wrong);
    EXPECT_EQ(reply.status, 400) << wrong.dump();
    EXPECT_EQ(reply.error()["check"], "body.from_snapshot") << wrong.dump();
  }
  // Ids that would climb out of a snapshot directory, percent-encoded into one segment.
  for (const char* path : {"/v1/snapshots/..%2F..%2Fetc?scope=tenant&thread_id=t1",
                                  "/v1/snapshots/snap-..%2F..%2Fx?scope=tenant&thread_id=t1"}) {
    const Reply reply = fixture.client->del(path);
    EXPECT_TRUE(reply.status == 400 || reply.status == 404) << path << ": " << reply.body;
  }
  const auto check_of = [](const Reply& reply) { return reply.error().value("check", ""); };
  EXPECT_EQ(check_of(fixture.remove(id, "scope=tenant")), "query.thread_id");
  EXPECT_EQ(check_of(fixture.remove(id, "thread_id=t1")), "query.scope");
  EXPECT_EQ(check_of(fixture.remove(id, "scope=tenant&thread_id=t1&force=true")), "query.force");
  EXPECT_EQ(check_of(fixture.list("")), "query.scope");
  EXPECT_EQ(check_of(fixture.list("scope=tenant&cursor=2")), "query.cursor");
  EXPECT_EQ(check_of(fixture.client->request("POST", "/v1/sandboxes/" + handle + "/snapshots?x=1")),
            "query.x");
  EXPECT_EQ(fixture.take("sbx-00000000000000000000000000000000").error()["type"],
            "SandboxHandleNotFound");

  EXPECT_TRUE(fixture.in_process->resumed_snapshots().empty());
  EXPECT_TRUE(fixture.in_process->deleted_snapshots().empty());
  EXPECT_TRUE(fixture.in_process->find_snapshot(id).has_value());
  EXPECT_EQ(fixture.client->get("/v1/health").status, 200) << "the daemon lives on";
}

TEST(DaemonSnapshots, ASnapshotWaitsForTheCommandInFlightAndCutsNothing) {
  SnapshotFixture fixture;
  const auto key = DaemonFixture::key("tenant", "t1", "coder");
  const std::string handle = fixture.acquire(key);
  const std::string instance = fixture.client->get("/v1/sandboxes/" + handle).json()["instance_id"];
  auto sandbox = fixture.sandbox_of(instance);
  ASSERT_NE(sandbox, nullptr);

  std::atomic<Clock::rep> exec_done{0};
  auto running = std::async(std::launch::async, [&] {
    Reply reply = fixture.exec(handle, {{"shell", "sleep 1; printf done > done.txt"}});
    exec_done = Clock::now().time_since_epoch().count();
    return reply;
  });
  ASSERT_TRUE(eventually([&] { return sandbox->commands_running() == 1; }));
  const Reply taken = fixture.take(handle);
  const auto taken_at = Clock::now().time_since_epoch().count();
  const Reply ran = running.get();
  ASSERT_EQ(taken.status, 201) << "the backend refuses a snapshot under a running command: "
                               << taken.body;
  ASSERT_EQ(ran.status, 200) << ran.body;
  EXPECT_EQ(ran.json()["result"]["exit_code"], 0);
  EXPECT_LE(exec_done.load(), taken_at) << "the snapshot was answered before the command ended";
  EXPECT_EQ(taken.json()["instance_id"], instance) << "nothing was condemned";
  // It waited for the command, so it holds the command's file.
  const std::string id = taken.json()["snapshot"]["id"];
  ASSERT_EQ(fixture.resume(DaemonFixture::key("tenant", "t1", "fork"), id).status, 201);
  EXPECT_EQ(fixture.get(fixture.acquire(DaemonFixture::key("tenant", "t1", "fork")), "done.txt").body,
            "done");
}

TEST(DaemonSnapshots, ACommandWaitsForTheSnapshotInFlight) {
  SnapshotFixture fixture(Milliseconds(800));
  const auto key = DaemonFixture::key("tenant", "t1", "coder");
  const std::string handle = fixture.acquire(key);
  const SandboxKey parsed{"tenant", "t1", "coder"};

  auto saving = std::async(std::launch::async, [&] { return fixture.take(handle); });
  ASSERT_TRUE(eventually(
      [&] { return fixture.daemon->router().calls_in_flight(parsed, "deepagents") == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // into the frozen stretch
  const auto started = Clock::now();
  const Reply ran = fixture.exec(handle, {{"argv", {"echo", "after"}}});
  const auto waited = Clock::now() - started;
  const Reply taken = saving.get();
  ASSERT_EQ(taken.status, 201) << taken.body;
  ASSERT_EQ(ran.status, 200) << "the backend refuses a command during a snapshot: " << ran.body;
  EXPECT_EQ(ran.json()["result"]["stdout"], "after\n");
  EXPECT_GE(waited, std::chrono::milliseconds(300)) << "the command did not wait its turn";
  EXPECT_EQ(ran.json()["instance_id"], taken.json()["instance_id"]) << "nothing was condemned";
}

TEST(DaemonSnapshots, AResumeWaitsForTheCommandItsSandboxRuns) {
  SnapshotFixture fixture;
  const auto key = DaemonFixture::key("tenant", "t1", "coder");
  const std::string handle = fixture.acquire(key);
  const std::string id = fixture.snapshot_of(handle);
  const std::string instance = fixture.client->get("/v1/sandboxes/" + handle).json()["instance_id"];
  auto sandbox = fixture.sandbox_of(instance);
  ASSERT_NE(sandbox, nullptr);

  std::atomic<Clock::rep> exec_done{0};
  auto running = std::async(std::launch::async, [&] {
    Reply reply = fixture.exec(handle, {{"shell", "sleep 1"}});
    exec_done = Clock::now().time_since_epoch().count();
    return reply;
  });
  ASSERT_TRUE(eventually([&] { return sandbox->commands_running() == 1; }));
  const Reply resumed = fixture.resume(key, id);
  const auto resumed_at = Clock::now().time_since_epoch().count();
  ASSERT_EQ(resumed.status, 200) << resumed.body;
  EXPECT_EQ(running.get().status, 200);
  EXPECT_LE(exec_done.load(), resumed_at) << "the resume replaced the sandbox under its command";
  EXPECT_NE(resumed.json()["instance_id"], instance);
}

TEST(DaemonSnapshots, ABackendThatDoesNotDeclareSnapshotsIsRefusedByTheRouter) {
  DaemonFixture fixture;  // the scripted backend: no `snapshot`
  const auto key = DaemonFixture::key("tenant");
  const std::string handle = fixture.acquire(key);
  const Reply taken = fixture.client->request("POST", "/v1/sandboxes/" + handle + "/snapshots");
  EXPECT_EQ(taken.status, 403) << taken.body;
  EXPECT_EQ(taken.error()["type"], "SandboxCapabilityNotSupported");
  EXPECT_EQ(taken.error()["check"], "capabilities");
  const Reply resumed = fixture.client->post(
      "/v1/sandboxes", {{"key", key},
                        {"spec", DaemonFixture::default_spec()},
                        {"from_snapshot", "snap-" + std::string(24, 'a')}});
  EXPECT_EQ(resumed.status, 403) << resumed.body;
  EXPECT_EQ(resumed.error()["check"], "capabilities");
  const Reply listed = fixture.client->get("/v1/snapshots?scope=tenant");
  EXPECT_EQ(listed.status, 200);
  EXPECT_TRUE(listed.json()["snapshots"].empty());
}

TEST(DaemonSnapshots, AResumeAsAnotherKindOrUnderAnotherSpecIsRefusedNamingTheField) {
  SnapshotFixture fixture;
  const auto key = DaemonFixture::key("tenant", "t1", "coder");
  const std::string handle = fixture.acquire(key);
  const std::string id = fixture.snapshot_of(handle);
  json::Json other_kind = DaemonFixture::default_spec();
  other_kind["kind"] = "codeact";
  const Reply kind = fixture.resume(key, id, other_kind);
  EXPECT_EQ(kind.status, 400) << kind.body;
  EXPECT_EQ(kind.error()["check"], "body.spec.kind");
  json::Json changed = DaemonFixture::default_spec();
  changed["work_dir"] = "/elsewhere";
  const Reply conflict = fixture.resume(key, id, changed);
  EXPECT_EQ(conflict.status, 409) << conflict.body;
  EXPECT_EQ(conflict.error()["type"], "SandboxHandleConflict");
  EXPECT_TRUE(fixture.in_process->resumed_snapshots().empty());
}

TEST(DaemonSnapshots, APurgeTakesTheConversationsSnapshotsAndNoOthers) {
  SnapshotFixture fixture;
  const std::string one = fixture.snapshot_of(fixture.acquire(DaemonFixture::key("tenant", "t1")));
  const std::string two = fixture.snapshot_of(fixture.acquire(DaemonFixture::key("tenant", "t2")));
  const Reply purged = fixture.client->post("/v1/purge", {{"scope", "tenant"}, {"thread_id", "t1"}});
  ASSERT_EQ(purged.status, 200) << purged.body;
  const json::Json left = fixture.list("scope=tenant").json()["snapshots"];
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0]["id"], two);
  EXPECT_FALSE(fixture.in_process->find_snapshot(one).has_value());
  EXPECT_EQ(fixture.list("scope=tenant&thread_id=t1").json()["snapshots"].size(), 0u);
}

}  // namespace
}  // namespace airlock::daemon::test::snapshot_test
