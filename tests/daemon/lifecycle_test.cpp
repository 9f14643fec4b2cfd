// The call lifecycle through the daemon: an exec whose end is unknown condemns its instance and
// says so, one whose kill the backend confirms keeps it with its files and says that, a
// client that vanishes mid-exec stops its command and leaks nothing, a dispose waits for the
// calls in flight, shutdown is graceful, and a restart answers the handles it gave out.
#include <unistd.h>

#include <fstream>
#include <future>
#include <thread>

#include "daemon/support.hpp"

namespace airlock::daemon::test {
namespace {

// What every answer of an exec that did not end normally says about the sandbox.
void expect_reset(const json::Json& error, bool reset) {
  EXPECT_EQ(error["sandbox_reset"], reset) << error.dump();
  EXPECT_EQ(error["condemned"], reset) << "the older name says the same: " << error.dump();
  const std::string message = error["sandbox_message"].get<std::string>();
  if (reset) {
    EXPECT_NE(message.find("sandbox was reset"), std::string::npos) << message;
    EXPECT_NE(message.find("gone"), std::string::npos) << message;
  } else {
    EXPECT_NE(message.find("command was stopped"), std::string::npos) << message;
    EXPECT_NE(message.find("intact"), std::string::npos) << message;
  }
}

// A conversation's file, written before the command that goes wrong.
void write_notes(DaemonFixture& fixture, const std::string& handle) {
  ASSERT_EQ(
      fixture.client->put("/v1/sandboxes/" + handle + "/files?path=notes.md", "plan: 1").status,
      200);
}

void expect_kept(DaemonFixture& fixture, const std::string& handle, const std::string& before) {
  const Reply next = fixture.exec(handle, {{"argv", {"echo", "warm"}}});
  ASSERT_EQ(next.status, 200) << next.body;
  EXPECT_EQ(next.json()["instance_id"], before) << "the next call reaches the same instance";
  const Reply notes = fixture.client->get("/v1/sandboxes/" + handle + "/files?path=notes.md");
  EXPECT_EQ(notes.status, 200) << notes.body;
  EXPECT_EQ(notes.body, "plan: 1") << "the conversation's file is still there";
  EXPECT_FALSE(fixture.scripted->was_disposed(before));
}

TEST(DaemonLifecycle, TimedOutExecWhoseKillIsUnconfirmedIs504AndCondemnsTheInstance) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  write_notes(fixture, handle);
  const std::string before = fixture.client->get("/v1/sandboxes/" + handle).json()["instance_id"];
  const Reply reply =
      fixture.exec(handle, {{"argv", {"sleep", "60000", "unconfirmed"}}, {"timeout_ms", 200}});
  EXPECT_EQ(reply.status, 504) << reply.body;
  EXPECT_EQ(reply.error()["type"], "Timeout");
  EXPECT_FALSE(reply.error().contains("kill_confirmed")) << "the backend could not tell";
  expect_reset(reply.error(), true);
  EXPECT_EQ(fixture.scripted->timed_out, 1);
  EXPECT_TRUE(eventually([&] { return fixture.scripted->was_disposed(before); }))
      << "the condemned instance is deleted once the last call leaves";
  const Reply next = fixture.exec(handle, {{"argv", {"echo", "cold"}}});
  ASSERT_EQ(next.status, 200) << "the handle outlives its condemned instance";
  EXPECT_NE(next.json()["instance_id"], before) << "the next call starts cold";
  EXPECT_EQ(fixture.client->get("/v1/sandboxes/" + handle).json()["instance_id"],
            next.json()["instance_id"]);
  EXPECT_EQ(fixture.client->get("/v1/sandboxes/" + handle + "/files?path=notes.md").status, 404)
      << "what the answer said is gone is gone";
}

TEST(DaemonLifecycle, TimedOutExecWhoseKillIsConfirmedKeepsTheInstanceAndItsFiles) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  write_notes(fixture, handle);
  const std::string before = fixture.client->get("/v1/sandboxes/" + handle).json()["instance_id"];
  const Reply reply = fixture.exec(handle, {{"argv", {"sleep", "60000"}}, {"timeout_ms", 200}});
  EXPECT_EQ(reply.status, 504) << reply.body;
  EXPECT_EQ(reply.error()["type"], "Timeout");
  EXPECT_EQ(reply.error()["kill_confirmed"], true);
  EXPECT_EQ(reply.error()["instance_id"], before);
  expect_reset(reply.error(), false);
  EXPECT_EQ(fixture.scripted->timed_out, 1);
  expect_kept(fixture, handle, before);
  EXPECT_NE(fixture.client->get("/v1/metrics").body.find("airlock_sandboxes_condemned_total 0"),
            std::string::npos);
}

TEST(DaemonLifecycle, OutputFloodIsRefusedWith422AndCondemnsWhenTheKillIsUnconfirmed) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  const std::string before = fixture.client->get("/v1/sandboxes/" + handle).json()["instance_id"];
  const Reply flood = fixture.exec(
      handle, {{"argv", {"flood", "100000000", "unconfirmed"}}, {"max_output_bytes", 1024}});
  EXPECT_EQ(flood.status, 422) << flood.body;
  EXPECT_EQ(flood.error()["type"], "SandboxExecOutputLimitExceeded");
  EXPECT_EQ(flood.error()["limit"], 1024);
  EXPECT_LT(flood.body.size(), 1024u) << "none of the flood is returned";
  expect_reset(flood.error(), true);
  EXPECT_TRUE(eventually([&] { return fixture.scripted->was_disposed(before); }));

  const Reply truncated = fixture.exec(
      handle, {{"argv", {"flood", "5000"}}, {"max_output_bytes", 100}, {"overflow", "truncate"}});
  ASSERT_EQ(truncated.status, 200);
  EXPECT_TRUE(truncated.json()["result"]["truncated"].get<bool>());
  EXPECT_EQ(truncated.json()["result"]["stdout"].get<std::string>().size(), 100u);
}

TEST(DaemonLifecycle, OutputFloodWhoseKillIsConfirmedKeepsTheInstanceAndItsFiles) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  write_notes(fixture, handle);
  const std::string before = fixture.client->get("/v1/sandboxes/" + handle).json()["instance_id"];
  const Reply flood =
      fixture.exec(handle, {{"argv", {"flood", "100000000"}}, {"max_output_bytes", 1024}});
  EXPECT_EQ(flood.status, 422) << flood.body;
  EXPECT_EQ(flood.error()["kill_confirmed"], true);
  expect_reset(flood.error(), false);
  expect_kept(fixture, handle, before);
}

TEST(DaemonLifecycle, ExecWhoseResultWasLostCondemnsAndSaysSo) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  const std::string before = fixture.client->get("/v1/sandboxes/" + handle).json()["instance_id"];
  const Reply reply = fixture.exec(handle, {{"argv", {"fail"}}});
  EXPECT_EQ(reply.status, 502) << reply.body;
  expect_reset(reply.error(), true);
  EXPECT_TRUE(eventually([&] { return fixture.scripted->was_disposed(before); }));
}

// A raw exec whose client then vanishes; returns once the command runs.
void exec_then_hang_up(DaemonFixture& fixture, const std::string& handle, const std::string& body) {
  const int fd = connect_unix(fixture.options.socket_path);
  send_all(fd, "POST /v1/sandboxes/" + handle + "/exec HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                   std::to_string(body.size()) + "\r\n\r\n" + body);
  ASSERT_TRUE(eventually([&] { return fixture.scripted->running == 1; }));
  close(fd);  // the client vanishes mid-exec
}

TEST(DaemonLifecycle, ClientThatHangsUpMidExecStopsTheCommandAndLeaksNothing) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  const std::string before = fixture.client->get("/v1/sandboxes/" + handle).json()["instance_id"];
  const std::size_t fds_before = open_fd_count();
  exec_then_hang_up(fixture, handle,
                    R"({"argv":["sleep","60000","unconfirmed"],"timeout_ms":60000})");
  EXPECT_TRUE(eventually([&] { return fixture.scripted->running == 0; }))
      << "the command was stopped, not left to run for a minute";
  EXPECT_EQ(fixture.scripted->cancelled, 1);
  EXPECT_TRUE(eventually([&] { return fixture.scripted->was_disposed(before); }))
      << "an exec whose client vanished and whose kill is unconfirmed condemns its instance";
  EXPECT_TRUE(eventually([&] { return fixture.daemon->requests_in_flight() == 0; }));
  EXPECT_TRUE(eventually([&] { return open_fd_count() <= fds_before; }))
      << "no descriptor outlives the connection";
  const std::string metrics = fixture.client->get("/v1/metrics").body;
  EXPECT_NE(metrics.find("airlock_clients_gone_total 1"), std::string::npos);
  EXPECT_NE(metrics.find("airlock_sandboxes_condemned_total 1"), std::string::npos);
}

TEST(DaemonLifecycle, ClientThatHangsUpMidExecWhoseKillIsConfirmedKeepsTheInstance) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  write_notes(fixture, handle);
  const std::string before = fixture.client->get("/v1/sandboxes/" + handle).json()["instance_id"];
  exec_then_hang_up(fixture, handle, R"({"argv":["sleep","60000"],"timeout_ms":60000})");
  EXPECT_TRUE(eventually([&] { return fixture.scripted->running == 0; }));
  EXPECT_EQ(fixture.scripted->cancelled, 1);
  EXPECT_TRUE(eventually([&] { return fixture.daemon->requests_in_flight() == 0; }));
  expect_kept(fixture, handle, before);
  EXPECT_NE(fixture.client->get("/v1/metrics").body.find("airlock_sandboxes_condemned_total 0"),
            std::string::npos);
}

TEST(DaemonLifecycle, ClientThatHangsUpWhileQueuedIsNeverAdmitted) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  // A dispose waits (exclusively) behind a running exec; a third call queues behind it.
  auto running = std::async(std::launch::async, [&] {
    return fixture.exec(handle, {{"argv", {"sleep", "800"}}});
  });
  ASSERT_TRUE(eventually([&] { return fixture.scripted->running == 1; }));
  auto dispose = std::async(std::launch::async,
                            [&] { return fixture.client->del("/v1/sandboxes/" + handle); });
  std::this_thread::sleep_for(100ms);
  const std::string body = R"({"argv":["echo","late"]})";
  const int fd = connect_unix(fixture.options.socket_path);
  send_all(fd, "POST /v1/sandboxes/" + handle + "/exec HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                   std::to_string(body.size()) + "\r\n\r\n" + body);
  std::this_thread::sleep_for(100ms);
  close(fd);
  EXPECT_EQ(running.get().status, 200);
  EXPECT_EQ(dispose.get().status, 200);
  EXPECT_TRUE(eventually([&] { return fixture.daemon->requests_in_flight() == 0; }));
  EXPECT_EQ(fixture.scripted->completed, 1) << "the vanished caller's command never ran";
}

TEST(DaemonLifecycle, DisposeWaitsForTheCallsInFlight) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  auto running = std::async(std::launch::async, [&] {
    return fixture.exec(handle, {{"argv", {"sleep", "500"}}});
  });
  ASSERT_TRUE(eventually([&] { return fixture.scripted->running == 1; }));
  const Reply disposed = fixture.client->del("/v1/sandboxes/" + handle);
  EXPECT_EQ(running.get().status, 200) << "a dispose never cuts a call off underneath";
  EXPECT_EQ(disposed.status, 200);
  EXPECT_TRUE(disposed.json()["disposed"].get<bool>());
  EXPECT_EQ(fixture.scripted->completed, 1);
  EXPECT_EQ(fixture.scripted->disposed_while_running, 0)
      << "the backend was asked to dispose while a command ran";
}

TEST(DaemonLifecycle, CallQueuedPastItsDeadlineIs503WithRetryAfter) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  auto running = std::async(std::launch::async, [&] {
    return fixture.exec(handle, {{"argv", {"sleep", "1500"}}});
  });
  ASSERT_TRUE(eventually([&] { return fixture.scripted->running == 1; }));
  auto dispose = std::async(std::launch::async,
                            [&] { return fixture.client->del("/v1/sandboxes/" + handle); });
  std::this_thread::sleep_for(150ms);  // the exclusive dispose is now waiting
  const Reply queued = fixture.exec(handle, {{"argv", {"echo"}}, {"timeout_ms", 200}});
  EXPECT_EQ(queued.status, 503) << queued.body;
  EXPECT_EQ(queued.error()["type"], "SandboxQueuedTimeout");
  EXPECT_EQ(queued.headers.at("retry-after"), "1");
  EXPECT_EQ(running.get().status, 200);
  EXPECT_EQ(dispose.get().status, 200);
}

TEST(DaemonLifecycle, ShutdownLetsTheExecInFlightFinishThenRemovesTheSocket) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  auto running = std::async(std::launch::async, [&] {
    return fixture.exec(handle, {{"argv", {"sleep", "500"}}});
  });
  ASSERT_TRUE(eventually([&] { return fixture.scripted->running == 1; }));
  fixture.daemon->shutdown();
  const Reply reply = running.get();
  EXPECT_EQ(reply.status, 200) << "in-flight work finishes within the grace";
  EXPECT_FALSE(std::filesystem::exists(fixture.options.socket_path));
  EXPECT_EQ(fixture.scripted->completed, 1);
  EXPECT_EQ(fixture.scripted->live_count(), 1u) << "shutdown does not dispose sandboxes";
}

TEST(DaemonLifecycle, ShutdownGraceCancelsWhatIsLeftAndCondemnsItWhenTheKillIsUnconfirmed) {
  DaemonFixture fixture(nullptr, [](DaemonOptions& options) { options.shutdown_grace = 200ms; });
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  const std::string instance = fixture.client->get("/v1/sandboxes/" + handle).json()["instance_id"];
  auto running = std::async(std::launch::async, [&] {
    return fixture.exec(handle,
                        {{"argv", {"sleep", "60000", "unconfirmed"}}, {"timeout_ms", 60000}});
  });
  ASSERT_TRUE(eventually([&] { return fixture.scripted->running == 1; }));
  fixture.daemon->shutdown();
  const Reply reply = running.get();
  EXPECT_EQ(reply.status, 504) << reply.body;
  EXPECT_EQ(fixture.scripted->cancelled, 1);
  EXPECT_EQ(fixture.scripted->running, 0);
  EXPECT_TRUE(eventually([&] { return fixture.scripted->was_disposed(instance); }));
}

TEST(DaemonLifecycle, RequestsOnOpenConnectionsAre503WhileDraining) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  const int idle = connect_unix(fixture.options.socket_path);
  auto running = std::async(std::launch::async, [&] {
    return fixture.exec(handle, {{"argv", {"sleep", "600"}}});
  });
  ASSERT_TRUE(eventually([&] { return fixture.scripted->running == 1; }));
  auto stopping = std::async(std::launch::async, [&] { fixture.daemon->shutdown(); });
  std::this_thread::sleep_for(100ms);
  send_all(idle, "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n");
  const auto answer = read_until_closed(idle, 5s);
  close(idle);
  ASSERT_TRUE(answer.has_value());
  EXPECT_NE(answer->find("503"), std::string::npos) << *answer;
  EXPECT_NE(answer->find("Connection: close"), std::string::npos) << *answer;
  stopping.get();
  EXPECT_EQ(running.get().status, 200);
}

TEST(DaemonLifecycle, RestartAnswersTheHandlesItGaveOut) {
  auto backend = std::make_shared<ScriptedBackend>();
  TempDir state;
  std::string handle;
  std::string instance;
  {
    DaemonFixture first(backend, [&](DaemonOptions& options) { options.state_dir = state.path(); });
    handle = first.acquire(DaemonFixture::key("tenant", "conversation"));
    ASSERT_EQ(
        first.client->put("/v1/sandboxes/" + handle + "/files?path=kept", "still here").status,
        200);
    instance = first.client->get("/v1/sandboxes/" + handle).json()["instance_id"];
  }
  // The backend stands for durable state (a state directory, labels): it outlives the daemon.
  DaemonFixture second(backend, [&](DaemonOptions& options) { options.state_dir = state.path(); });
  const Reply listed = second.client->get("/v1/sandboxes");
  ASSERT_EQ(listed.json()["sandboxes"].size(), 1u);
  EXPECT_EQ(listed.json()["sandboxes"][0]["instance_id"], instance);
  const Reply read = second.client->get("/v1/sandboxes/" + handle + "/files?path=kept");
  ASSERT_EQ(read.status, 200) << read.body;
  EXPECT_EQ(read.body, "still here");
  EXPECT_EQ(read.headers.at("x-airlock-instance"), instance) << "the same sandbox, not a new one";
}

TEST(DaemonLifecycle, TheSpecsWorkDirIsMadeTheFirstTimeACommandNeedsIt) {
  // The in-process backend creates nothing on acquire, as the protocol allows.
  testing::InProcessBackendOptions backend_options;
  backend_options.sandbox_per_key = true;
  backend_options.isolation = Isolation::container;
  backend_options.capabilities =
      CapabilitySet{Capability::exec, Capability::files_in, Capability::files_out};
  DaemonFixture fixture(std::make_shared<testing::InProcessSandboxBackend>(backend_options));
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  const Reply ran = fixture.exec(handle, {{"shell", "pwd; echo made > here.txt"}});
  ASSERT_EQ(ran.status, 200) << ran.body;
  EXPECT_EQ(ran.json()["result"]["stdout"], "/maf-sandbox/work\n");
  EXPECT_EQ(fixture.client->get("/v1/sandboxes/" + handle + "/files?path=here.txt").body, "made\n");
  const std::string instance = ran.json()["instance_id"];

  // Any other missing working directory is the caller's to make: refused, nothing condemned.
  const Reply elsewhere =
      fixture.exec(handle, {{"shell", "pwd"}, {"working_directory", "/nowhere"}});
  EXPECT_EQ(elsewhere.status, 404) << elsewhere.body;
  EXPECT_FALSE(elsewhere.error().contains("condemned"));
  EXPECT_EQ(fixture.exec(handle, {{"shell", "true"}}).json()["instance_id"], instance);
}

TEST(DaemonLifecycle, UnreadableHandleRecordIsSkippedNotFatal) {
  TempDir state;
  std::filesystem::create_directories(state.path());
  { std::ofstream(state.path() / "sbx-0123456789abcdef0123456789abcdef.json") << "{ not json"; }
  DaemonFixture fixture(nullptr, [&](DaemonOptions& options) { options.state_dir = state.path(); });
  EXPECT_EQ(fixture.client->get("/v1/health").status, 200);
  EXPECT_TRUE(fixture.client->get("/v1/sandboxes").json()["sandboxes"].empty());
}

TEST(DaemonLifecycle, ConcurrentConversationsEachGetTheirOwnSandbox) {
  DaemonFixture fixture;
  constexpr int kConversations = 16;
  std::vector<std::future<bool>> done;
  for (int i = 0; i < kConversations; ++i) {
    done.push_back(std::async(std::launch::async, [&fixture, i] {
      const std::string handle = fixture.acquire(DaemonFixture::key("load", std::to_string(i)));
      const std::string content = "conversation " + std::to_string(i);
      if (fixture.client->put("/v1/sandboxes/" + handle + "/files?path=mine", content).status !=
          200) {
        return false;
      }
      for (int j = 0; j < 5; ++j) {
        if (fixture.exec(handle, {{"argv", {"echo", std::to_string(i)}}})
                .json()["result"]["stdout"] != std::to_string(i) + "\n") {
          return false;
        }
      }
      return fixture.client->get("/v1/sandboxes/" + handle + "/files?path=mine").body == content;
    }));
  }
  for (auto& each : done) EXPECT_TRUE(each.get());
  EXPECT_EQ(fixture.scripted->live_count(), static_cast<std::size_t>(kConversations));
  EXPECT_EQ(fixture.client->post("/v1/purge", {{"scope", "load"}}).json()["disposed"],
            kConversations);
  EXPECT_EQ(fixture.scripted->live_count(), 0u);
}

}  // namespace
}  // namespace airlock::daemon::test
