// The daemon over the real `linux` backend: what the scripted backend can only stand in for.
// A client that hangs up mid-exec, an exec past its deadline, an output flood or a shutdown past
// its grace must kill the guest's command for real — every process of it, a backgrounded one
// too — and, the backend having proven that, keep the sandbox with the conversation's files; a
// restarted daemon (a new backend
// object on the same durable state) must answer the handle it gave out with the very same
// sandbox, files included.
// Skipped loudly when this build has no linux backend or the process is not root (CI is).
#include <unistd.h>

#include <algorithm>
#include <future>
#include <thread>

#include "airlock/backend_factory.hpp"
#include "daemon/support.hpp"

namespace airlock::daemon::test {
namespace {

bool linux_backend_built() {
  const auto types = backend_types();
  return std::any_of(types.begin(), types.end(),
                     [](const BackendType& type) { return type.type == "linux"; });
}

class DaemonOnLinux : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!linux_backend_built()) GTEST_SKIP() << "SKIPPED: this build has no linux backend";
    if (::geteuid() != 0) {
      GTEST_SKIP() << "SKIPPED: the linux backend needs root here (user namespaces with a full "
                      "uid range, cgroups, mounts)";
    }
    helpers_before_ = airlock_helper_processes();
    state_ = std::make_unique<TempDir>();
    daemon_state_ = std::make_unique<TempDir>();
  }

  void TearDown() override {
    if (!state_) return;
    fixture_.reset();
    // Whatever a failed test left, a backend on the same durable state reclaims; then nothing
    // of any sandbox may remain.
    auto backend = linux_backend();
    backend->dispose_scope(scope_, std::nullopt);
    EXPECT_TRUE(backend->list_sandboxes().empty()) << "a sandbox survived in durable state";
    backend.reset();
    EXPECT_TRUE(eventually([&] { return airlock_helper_processes() <= helpers_before_; }))
        << "a sandbox's init process outlived its disposal";
  }

  std::shared_ptr<SandboxBackend> linux_backend() const {
    return make_backend("linux", json::Json{{"state_dir", (state_->path() / "linux").string()}});
  }

  // A daemon over a fresh linux backend object on this test's durable state.
  DaemonFixture& start_daemon(Milliseconds shutdown_grace = Milliseconds{5'000}) {
    fixture_.reset();
    fixture_ = std::make_unique<DaemonFixture>(linux_backend(), [&](DaemonOptions& options) {
      options.state_dir = daemon_state_->path();
      options.api.admission_timeout = 30s;
      options.shutdown_grace = shutdown_grace;
    });
    return *fixture_;
  }

  std::string instance_of(const std::string& handle) const {
    return fixture_->client->get("/v1/sandboxes/" + handle).json()["instance_id"];
  }

  static void write_notes(DaemonFixture& fixture, const std::string& handle) {
    ASSERT_EQ(
        fixture.client->put("/v1/sandboxes/" + handle + "/files?path=notes.md", "plan: 1").status,
        200);
  }

  // The next call reaches the same instance, and the conversation's file is still in it.
  void expect_kept(DaemonFixture& fixture, const std::string& handle, const std::string& before) {
    const Reply next = fixture.exec(handle, {{"shell", "cat notes.md"}});
    ASSERT_EQ(next.status, 200) << next.body;
    EXPECT_EQ(next.json()["result"]["stdout"], "plan: 1");
    EXPECT_EQ(next.json()["instance_id"], before) << "the next call reaches the same sandbox";
    EXPECT_TRUE(backend_has(before));
  }

  bool backend_has(const std::string& instance_id) const {
    for (const auto& record : fixture_->backend->list_sandboxes()) {
      if (record.instance_id == instance_id) return true;
    }
    return false;
  }

  const std::string scope_ = "daemon-linux-" + std::to_string(::getpid());
  std::unique_ptr<TempDir> state_;
  std::unique_ptr<TempDir> daemon_state_;
  std::unique_ptr<DaemonFixture> fixture_;
  std::size_t helpers_before_ = 0;
};

TEST_F(DaemonOnLinux, ClientThatHangsUpMidExecKillsTheGuestCommandAndKeepsTheSandbox) {
  DaemonFixture& fixture = start_daemon();
  const std::string handle = fixture.acquire(DaemonFixture::key(scope_));
  write_notes(fixture, handle);
  const std::string before = instance_of(handle);
  ASSERT_TRUE(backend_has(before));

  // A duration no other process on this machine sleeps for: its command line marks the guest.
  const std::string marker = "987.125";
  const std::string body = R"({"argv":["sleep",")" + marker + R"("],"timeout_ms":600000})";
  const int fd = connect_unix(fixture.options.socket_path);
  send_all(fd, "POST /v1/sandboxes/" + handle + "/exec HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                   std::to_string(body.size()) + "\r\n\r\n" + body);
  ASSERT_TRUE(eventually([&] {
    return processes_running({"sleep", marker}) == 1;
  })) << "the guest command never started";
  ::close(fd);  // the client vanishes mid-exec

  EXPECT_TRUE(eventually([&] {
    return processes_running({"sleep", marker}) == 0;
  })) << "the guest's command outlived its vanished client";
  EXPECT_TRUE(eventually([&] { return fixture.daemon->requests_in_flight() == 0; }));
  expect_kept(fixture, handle, before);
}

TEST_F(DaemonOnLinux, ExecPastItsDeadlineKillsEveryGuestProcessAndKeepsTheSandbox) {
  DaemonFixture& fixture = start_daemon();
  const std::string handle = fixture.acquire(DaemonFixture::key(scope_));
  write_notes(fixture, handle);
  const std::string before = instance_of(handle);
  const std::string marker = "986.375";
  auto pending = std::async(std::launch::async, [&] {
    return fixture.exec(handle, {{"argv", {"sh", "-c", "sleep " + marker + " & sleep " + marker}},
                                 {"timeout_ms", 3000}});
  });
  EXPECT_TRUE(eventually(
      [&] {
        return processes_running({"sleep", marker}) == 2;
      },
      3s))
      << "the guest's two commands never ran";
  const Reply reply = pending.get();
  EXPECT_EQ(reply.status, 504) << reply.body;
  EXPECT_EQ(reply.error()["type"], "Timeout");
  EXPECT_EQ(reply.error()["kill_confirmed"], true) << "the linux backend proves its kills";
  EXPECT_EQ(reply.error()["sandbox_reset"], false) << reply.body;
  EXPECT_NE(reply.error()["sandbox_message"].get<std::string>().find("intact"), std::string::npos);
  EXPECT_EQ(processes_running({"sleep", marker}), 0u)
      << "a guest process (the backgrounded one too) outlived a kill the backend confirmed";
  expect_kept(fixture, handle, before);
}

TEST_F(DaemonOnLinux, AnOutputFloodIsStoppedAndTheSandboxKeptWithItsFiles) {
  DaemonFixture& fixture = start_daemon();
  const std::string handle = fixture.acquire(DaemonFixture::key(scope_));
  write_notes(fixture, handle);
  const std::string before = instance_of(handle);
  const Reply flood =
      fixture.exec(handle, {{"shell", "seq 1 300000"}, {"max_output_bytes", 1 << 20}});
  EXPECT_EQ(flood.status, 422) << flood.body;
  EXPECT_EQ(flood.error()["kill_confirmed"], true);
  EXPECT_EQ(flood.error()["sandbox_reset"], false) << flood.body;
  expect_kept(fixture, handle, before);
}

TEST_F(DaemonOnLinux, ShutdownPastItsGraceKillsTheGuestCommandAndKeepsTheSandbox) {
  DaemonFixture& fixture = start_daemon(Milliseconds{500});
  const std::string handle = fixture.acquire(DaemonFixture::key(scope_));
  const std::string before = instance_of(handle);
  const std::string marker = "985.625";
  auto running = std::async(std::launch::async, [&] {
    return fixture.exec(handle, {{"argv", {"sleep", marker}}, {"timeout_ms", 600000}});
  });
  ASSERT_TRUE(eventually([&] {
    return processes_running({"sleep", marker}) == 1;
  })) << "the guest command never started";
  fixture.daemon->shutdown();
  const Reply reply = running.get();
  EXPECT_EQ(reply.status, 504) << reply.body;
  EXPECT_EQ(reply.error()["sandbox_reset"], false) << reply.body;
  EXPECT_TRUE(eventually([&] {
    return processes_running({"sleep", marker}) == 0;
  })) << "a guest command outlived the daemon's shutdown";
  EXPECT_TRUE(backend_has(before)) << "the sandbox whose command was proven stopped was kept";
}

TEST_F(DaemonOnLinux, ARestartedDaemonAnswersItsHandleWithTheSameSandbox) {
  std::string handle;
  std::string instance;
  {
    DaemonFixture& first = start_daemon();
    handle = first.acquire(DaemonFixture::key(scope_, "conversation"));
    ASSERT_EQ(
        first.client->put("/v1/sandboxes/" + handle + "/files?path=kept.txt", "still here").status,
        200);
    const Reply wrote =
        first.exec(handle, {{"shell", "echo from-the-guest > /maf-sandbox/work/guest.txt"}});
    ASSERT_EQ(wrote.status, 200) << wrote.body;
    instance = instance_of(handle);
    EXPECT_GT(airlock_helper_processes(), helpers_before_) << "the sandbox's init is counted";
  }
  // The daemon and its backend object go away; the sandbox lives on in durable state.
  fixture_.reset();
  EXPECT_EQ(linux_backend()->list_sandboxes().size(), 1u)
      << "a daemon's shutdown must not dispose the sandboxes it serves";

  DaemonFixture& second = start_daemon();
  const Reply listed = second.client->get("/v1/sandboxes");
  ASSERT_EQ(listed.json()["sandboxes"].size(), 1u) << listed.body;
  EXPECT_EQ(listed.json()["sandboxes"][0]["instance_id"], instance);
  EXPECT_EQ(listed.json()["sandboxes"][0]["state"], "running");
  // The linux backend stores this short scope raw in its labels; neither listing shows it.
  EXPECT_EQ(listed.body.find(scope_), std::string::npos) << listed.body;
  EXPECT_EQ(listed.body.find(handle), std::string::npos) << listed.body;
  const Reply held = second.client->get("/v1/backends/linux/sandboxes");
  ASSERT_EQ(held.status, 200) << held.body;
  ASSERT_EQ(held.json()["sandboxes"].size(), 1u) << held.body;
  EXPECT_EQ(held.body.find(scope_), std::string::npos) << held.body;
  EXPECT_EQ(held.json()["sandboxes"][0]["labels"], listed.json()["sandboxes"][0]["labels"])
      << "the daemon's view and the backend's digest the same labels alike";
  const Reply read = second.client->get("/v1/sandboxes/" + handle + "/files?path=kept.txt");
  ASSERT_EQ(read.status, 200) << read.body;
  EXPECT_EQ(read.body, "still here");
  const Reply ran = second.exec(handle, {{"shell", "cat guest.txt kept.txt"}});
  ASSERT_EQ(ran.status, 200) << ran.body;
  EXPECT_EQ(ran.json()["result"]["stdout"], "from-the-guest\nstill here");
  EXPECT_EQ(ran.json()["instance_id"], instance) << "the same sandbox, not a new one";

  ASSERT_EQ(second.client->del("/v1/sandboxes/" + handle).status, 200);
  EXPECT_TRUE(second.backend->list_sandboxes().empty());
  EXPECT_EQ(second.client->get("/v1/sandboxes/" + handle).status, 404);
}

}  // namespace
}  // namespace airlock::daemon::test
