// Snapshots of gvisor sandboxes attacked: what a resume keeps (files, processes, memory), what
// forks share (nothing after the snapshot, not even the random bytes they draw), who may reach
// a snapshot (only its own conversation), under which posture a resume runs (the spec's), what a
// snapshot refuses to cut, and what is left once the conversation is gone (nothing).
#include <sys/stat.h>

#include <filesystem>
#include <set>
#include <string>
#include <thread>

#include "airlock/errors.hpp"
#include "airlock/router.hpp"
#include "egress/loopback.hpp"
#include "gvisor/fixture.hpp"

namespace airlock::gvisor_backend::testing {
namespace {

using egress::testing::LoopbackServer;

class GvisorSnapshot : public GvisorBackendTest {
 protected:
  void SetUp() override {
    AIRLOCK_REQUIRE_GVISOR();
    GvisorBackendTest::SetUp();
  }

  SandboxRouter router() const {
    RouterOptions options;
    options.min_isolation = Isolation::hardened_container;
    return SandboxRouter({backend_}, options);
  }

  std::filesystem::path snapshots_directory() const {
    return state_->path() / "gvisor" / "snapshots";
  }

  std::size_t snapshot_entries() const {
    std::size_t count = 0;
    std::error_code error;
    for ([[maybe_unused]] const auto& entry :
         std::filesystem::directory_iterator(snapshots_directory(), error)) {
      ++count;
    }
    return count;
  }

  static std::string text(const ExecResult& result) { return result.stdout_text(); }
};

TEST_F(GvisorSnapshot, TheBackendDeclaresSnapshotsOfFilesAndMemory) {
  ASSERT_TRUE(backend_->capabilities());
  EXPECT_TRUE(backend_->capabilities()->contains(Capability::snapshot));
  EXPECT_EQ(backend_->snapshot_content(), SnapshotContent::filesystem_and_memory);
}

TEST_F(GvisorSnapshot, FilesProcessesAndMemorySurviveAResume) {
  auto source = acquire(spec());
  sh(*source,
     "echo before > kept.txt; mkdir -p /root/deep && echo root > /root/deep/r.txt; "
     "echo tmp > /tmp/t.txt");
  // A counter held only in a shell's memory, written out on every turn: after a resume it goes
  // on from where it was, in a process that existed before the snapshot.
  const std::string pid =
      text(sh(*source,
              "sh -c 'n=0; while :; do n=$((n+1)); echo $n > counter.new; mv counter.new counter; "
              "sleep 0.2; done' "
              "</dev/null >/dev/null 2>&1 & echo $!"));
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  const SnapshotRecord snapshot = source->snapshot();
  EXPECT_EQ(snapshot.content, SnapshotContent::filesystem_and_memory);
  EXPECT_GT(snapshot.bytes, 0u);
  // The source runs on, unchanged, and serves commands again at once.
  EXPECT_EQ(text(sh(*source, "cat kept.txt")), "before\n");
  sh(*source, "echo after > later.txt");
  backend_->dispose(key_);

  auto resumed = backend_->acquire_from_snapshot(key_, spec(), snapshot);
  EXPECT_NE(resumed->instance_id(), snapshot.source_instance_id);
  EXPECT_EQ(text(sh(*resumed, "cat kept.txt /root/deep/r.txt /tmp/t.txt")), "before\nroot\ntmp\n");
  EXPECT_NE(sh(*resumed, "test -e later.txt").exit_code, 0)
      << "a file written after the snapshot is in the resumed sandbox";
  ASSERT_FALSE(pid.empty());
  EXPECT_EQ(sh(*resumed, "kill -0 " + pid).exit_code, 0)
      << "the process running at the snapshot is not running after the resume";
  const long before = std::stol(text(sh(*resumed, "cat counter")));
  long after = before;
  for (int poll = 0; poll < 100 && after == before; ++poll) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    after = std::stol(text(sh(*resumed, "cat counter")));
  }
  EXPECT_GT(after, before) << "the counter did not move after the resume";
  EXPECT_GT(before, 0);
}

TEST_F(GvisorSnapshot, ForksDivergeAndDrawDifferentRandomBytes) {
  auto source = acquire(spec());
  sh(*source, "echo from-source > shared.txt");
  // A process alive at the snapshot draws from the guest kernel's randomness after it: each
  // fork's copy of it must draw bytes of its own (a restored Sentry must not replay a saved
  // generator's state).
  sh(*source,
     "sh -c 'while :; do head -c 16 /dev/urandom | od -An -tx1 | tr -d \" \\n\" > random.new; "
     "mv random.new random; sleep 0.2; done' </dev/null >/dev/null 2>&1 &");
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  const SnapshotRecord snapshot = source->snapshot();
  const SandboxKey left{key_.scope, key_.thread_id, "/fork-left"};
  const SandboxKey right{key_.scope, key_.thread_id, "/fork-right"};
  auto a = backend_->acquire_from_snapshot(left, spec(), snapshot);
  auto b = backend_->acquire_from_snapshot(right, spec(), snapshot);
  EXPECT_NE(a->instance_id(), b->instance_id());

  sh(*a, "echo left > shared.txt; echo left > only-left.txt");
  sh(*b, "echo right > only-right.txt");
  EXPECT_EQ(text(sh(*b, "cat shared.txt")), "from-source\n");
  EXPECT_NE(sh(*b, "test -e only-left.txt").exit_code, 0);
  EXPECT_NE(sh(*a, "test -e only-right.txt").exit_code, 0);
  EXPECT_EQ(text(sh(*source, "cat shared.txt")), "from-source\n");
  EXPECT_NE(sh(*source, "test -e only-left.txt").exit_code, 0);

  // Fresh draws in each fork, by new processes and by the one restored from the snapshot.
  std::set<std::string> draws;
  for (Sandbox* sandbox : {a.get(), b.get(), source.get()}) {
    const std::string fresh = text(sh(*sandbox, "head -c 32 /dev/urandom | od -An -tx1"));
    ASSERT_FALSE(fresh.empty());
    EXPECT_TRUE(draws.insert(fresh).second) << "two sandboxes drew the same bytes: " << fresh;
  }
  // The restored loop's next draw in each fork (the file it had at the snapshot is the same in
  // both, so each waits for one written after the resume).
  const auto next_draw = [this](Sandbox& sandbox) {
    const std::string first = text(sh(sandbox, "cat random"));
    for (int poll = 0; poll < 100; ++poll) {
      const std::string now = text(sh(sandbox, "cat random"));
      if (now != first && now.size() == 32) return now;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return std::string();
  };
  const std::string left_loop = next_draw(*a);
  const std::string right_loop = next_draw(*b);
  ASSERT_EQ(left_loop.size(), 32u) << "the restored loop drew nothing new in the left fork";
  ASSERT_EQ(right_loop.size(), 32u) << "the restored loop drew nothing new in the right fork";
  EXPECT_NE(left_loop, right_loop)
      << "the restored process drew the same bytes in both forks after the resume";
  // A third fork starts from the snapshot, not from what the first two wrote.
  auto c = backend_->acquire_from_snapshot({key_.scope, key_.thread_id, "/fork-third"}, spec(),
                                           snapshot);
  EXPECT_EQ(text(sh(*c, "cat shared.txt")), "from-source\n");
  EXPECT_NE(sh(*c, "test -e only-left.txt").exit_code, 0);
}

TEST_F(GvisorSnapshot, AnotherConversationCannotResumeDeleteOrListIt) {
  SandboxRouter routed = router();
  auto sandbox = routed.acquire(key_, spec());
  sh(*sandbox, "echo conversation-one > secret.txt");
  const SnapshotRecord snapshot = routed.snapshot(key_, spec());
  const std::size_t sandboxes_before = backend_->list_sandboxes().size();
  for (const SandboxKey& stranger : {SandboxKey{key_.scope, key_.thread_id + "-other", "/a"},
                                     SandboxKey{key_.scope + "-other", key_.thread_id, "/a"}}) {
    EXPECT_THROW(routed.resume(stranger, spec(), snapshot.id), NotFound);
    EXPECT_THROW(routed.delete_snapshot(stranger, snapshot.id), NotFound);
    for (const auto& listed : routed.list_snapshots(stranger.scope, stranger.thread_id)) {
      EXPECT_NE(listed.id, snapshot.id);
    }
  }
  EXPECT_EQ(backend_->list_sandboxes().size(), sandboxes_before)
      << "a refused resume made a sandbox";
  EXPECT_TRUE(backend_->find_snapshot(snapshot.id).has_value());
  // Ids that would name a path are no snapshot at all.
  for (const char* id : {"../snapshots", "snap-../../gvisor", "/etc", ".snap-x.staging-1"}) {
    EXPECT_FALSE(backend_->find_snapshot(id).has_value()) << id;
    EXPECT_THROW(routed.resume(key_, spec(), id), NotFound) << id;
  }
  // Its own conversation may, under any agent directory.
  auto mine = routed.resume({key_.scope, key_.thread_id, "/another-agent"}, spec(), snapshot.id);
  EXPECT_EQ(text(sh(*mine, "cat secret.txt")), "conversation-one\n");
}

TEST_F(GvisorSnapshot, NothingIsLeftAfterDisposeScope) {
  SandboxRouter routed = router();
  auto sandbox = routed.acquire(key_, spec());
  sh(*sandbox, "echo x > x.txt");
  const SnapshotRecord first = routed.snapshot(key_, spec());
  const SnapshotRecord second = routed.snapshot(key_, spec());
  auto fork = routed.resume({key_.scope, key_.thread_id, "/fork"}, spec(), first.id);
  // Another conversation's snapshot stays.
  const SandboxKey other{key_.scope, key_.thread_id + "-kept", "/agent"};
  auto kept_sandbox = routed.acquire(other, spec());
  const SnapshotRecord kept = routed.snapshot(other, spec());
  sandbox.reset();
  fork.reset();
  EXPECT_EQ(snapshot_entries(), 3u);

  routed.dispose_scope(key_.scope, key_.thread_id);
  EXPECT_FALSE(backend_->find_snapshot(first.id));
  EXPECT_FALSE(backend_->find_snapshot(second.id));
  EXPECT_TRUE(backend_->find_snapshot(kept.id)) << "another conversation's snapshot went";
  EXPECT_EQ(snapshot_entries(), 1u) << "checkpoint directories are left";
  ASSERT_EQ(backend_->list_sandboxes().size(), 1u);
  EXPECT_EQ(backend_->list_sandboxes().front().instance_id, kept_sandbox->instance_id());

  // A purge takes the rest: no snapshot directory, no container, process or cgroup.
  kept_sandbox.reset();
  backend_->purge_all();
  EXPECT_EQ(snapshot_entries(), 0u);
  EXPECT_TRUE(backend_->list_sandboxes().empty());
  EXPECT_TRUE(processes_mentioning(state_->path().string()).empty());
  EXPECT_TRUE(cgroups_of_this_state().empty());
}

TEST_F(GvisorSnapshot, SnapshotsAreRootsAlone) {
  auto sandbox = acquire(spec());
  const SnapshotRecord snapshot = sandbox->snapshot();
  const auto directory = snapshots_directory() / snapshot.id;
  struct stat info {};
  ASSERT_EQ(::stat(snapshots_directory().c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0700u);
  ASSERT_EQ(::stat(directory.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0700u);
  EXPECT_EQ(info.st_uid, 0u);
  for (const auto& entry : std::filesystem::recursive_directory_iterator(directory)) {
    ASSERT_EQ(::lstat(entry.path().c_str(), &info), 0);
    EXPECT_EQ(info.st_uid, 0u) << entry.path();
    EXPECT_EQ(info.st_mode & 077, 0u) << entry.path() << " is open to others";
  }
  EXPECT_EQ(as_unprivileged_user(
                [&] { return ::access((directory / "record.json").c_str(), R_OK) == 0 ? 1 : 0; }),
            0);
}

TEST_F(GvisorSnapshot, ACommandRunningFromAnotherProcessIsNotCutButRefusesTheSnapshot) {
  auto sandbox = acquire(spec());
  sh(*sandbox, "echo kept > kept.txt");
  // Another backend object, as another process would be, runs a command in the same sandbox:
  // its connection to the keeper is open for the whole command.
  auto other = make_backend();
  auto theirs = other->acquire(key_, spec());
  ExecResult long_command;
  std::thread running([&] { long_command = sh(*theirs, "sleep 6; echo finished"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  EXPECT_THROW(sandbox->snapshot(), BackendError);
  running.join();
  EXPECT_EQ(long_command.exit_code, 0);
  EXPECT_EQ(long_command.stdout_text(), "finished\n") << "the snapshot cut a running command";
  EXPECT_EQ(snapshot_entries(), 0u) << "a refused snapshot left its directory";
  // The sandbox serves on, and a snapshot taken once nothing runs succeeds.
  EXPECT_EQ(text(sh(*sandbox, "cat kept.txt")), "kept\n");
  EXPECT_NO_THROW(sandbox->snapshot());
}

// A process that dies while saving leaves the keeper socket aside (the keeper cannot dial) and
// a staging directory: the next acquire gives the socket back, and the next backend (or purge)
// removes what a dead process half saved.
TEST_F(GvisorSnapshot, WhatADeadSnapshotLeftIsReclaimed) {
  auto sandbox = acquire(spec());
  sh(*sandbox, "echo kept > kept.txt");
  std::string id;
  for (const auto& entry :
       std::filesystem::directory_iterator(state_->path() / "gvisor" / "control")) {
    id = entry.path().filename().string();
  }
  ASSERT_FALSE(id.empty());
  const auto socket = state_->path() / "gvisor" / "control" / id / "keeper.sock";
  const auto parked = state_->path() / "gvisor" / "sandboxes" / id / "keeper.sock.parked";
  std::filesystem::rename(socket, parked);
  const auto staging = snapshots_directory() / ".snap-0123456789abcdef01234567.staging-999999999";
  std::filesystem::create_directories(staging / "image");
  sandbox.reset();

  auto fresh = make_backend();
  EXPECT_FALSE(std::filesystem::exists(staging)) << "a dead process's staging directory is left";
  auto again = fresh->acquire(key_, spec());
  EXPECT_TRUE(std::filesystem::exists(socket)) << "the keeper socket was not given back";
  EXPECT_EQ(text(sh(*again, "cat kept.txt")), "kept\n");
  backend_ = fresh;
}

TEST_F(GvisorSnapshot, AResumeRunsUnderTheSpecsPosture) {
  if (!curl_image_available()) GTEST_SKIP() << "SKIPPED: the host has no /usr/bin/curl to copy";
  LoopbackServer server(LoopbackServer::Mode::http, "127.0.0.2");
  backend_ = make_backend([&](GvisorBackendConfig& config) {
    config.egress_policy.allowed_ports = {server.port()};
    config.egress_policy.allow_nonglobal_for_tests = {"127.0.0.0/8"};
  });
  const auto with = [](Egress egress) {
    return spec("posture", [egress](SandboxSpec::Fields& fields) {
      fields.image = "curl";
      fields.egress = egress;
      if (egress == Egress::allowlist) fields.egress_allow = {"127.0.0.2"};
    });
  };
  const std::string fetch =
      "curl -s -o /dev/null -w '%{http_code}' --max-time 10 --proxytunnel "
      "http://127.0.0.2:" +
      std::to_string(server.port()) + "/";
  // Saved closed, resumed allowlisted: the resumed sandbox reaches the allowed server through
  // the proxy (its keeper was saved without the proxy's variables: every command gets them).
  auto closed = acquire(with(Egress::closed));
  EXPECT_EQ(text(sh(*closed, fetch)), "000");
  const SnapshotRecord from_closed = closed->snapshot();
  EXPECT_EQ(from_closed.egress_posture, "closed");
  auto opened = backend_->acquire_from_snapshot(key_, with(Egress::allowlist), from_closed);
  EXPECT_EQ(text(sh(*opened, fetch)), "200");
  EXPECT_EQ(server.accepted(), 1);
  // Saved allowlisted, resumed closed: nothing gets out any more, though the guest's own
  // environment still names the proxy.
  const SnapshotRecord from_allowlisted = opened->snapshot();
  const SandboxKey other{key_.scope, key_.thread_id, "/closed-again"};
  auto closed_again =
      backend_->acquire_from_snapshot(other, with(Egress::closed), from_allowlisted);
  EXPECT_EQ(text(sh(*closed_again, fetch)), "000");
  EXPECT_EQ(text(sh(*closed_again, "ls -A /.airlock-egress")), "");
  EXPECT_EQ(server.accepted(), 1) << "a sandbox resumed closed reached the server";
  for (const auto& listed : backend_->list_sandboxes()) {
    if (listed.instance_id == closed_again->instance_id()) {
      EXPECT_EQ(listed.egress_posture, "closed");
    }
  }
}

}  // namespace
}  // namespace airlock::gvisor_backend::testing
