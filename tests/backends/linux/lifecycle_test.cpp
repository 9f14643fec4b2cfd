// Lifecycle: get-or-create across threads and processes, durable state that outlives the
// process that made it, and disposal and purge found from that state.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "airlock/json.hpp"
#include "backends/linux/linux_backend.hpp"
#include "backends/linux/state_store.hpp"
#include "backends/linux/syscalls.hpp"
#include "linux/fixture.hpp"

#ifndef AIRLOCK_TEST_HOST_HELPER
#error "AIRLOCK_TEST_HOST_HELPER must name the linux_test_host program"
#endif

namespace airlock::linux_backend::testing {
namespace {

using LifecycleTest = LinuxBackendTest;

// A child process running linux_test_host; its stdout is read line by line.
class HostProcess {
 public:
  explicit HostProcess(std::vector<std::string> arguments) {
    int output[2];
    if (::pipe2(output, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(output[1], 1);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(AIRLOCK_TEST_HOST_HELPER));
      for (auto& argument : arguments) argv.push_back(argument.data());
      argv.push_back(nullptr);
      ::execv(AIRLOCK_TEST_HOST_HELPER, argv.data());
      ::_exit(127);
    }
    ::close(output[1]);
    output_ = ::fdopen(output[0], "r");
  }
  ~HostProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (output_ != nullptr) ::fclose(output_);
  }
  std::optional<std::string> line() {
    char buffer[512];
    if (::fgets(buffer, sizeof buffer, output_) == nullptr) return std::nullopt;
    std::string text = buffer;
    if (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
  }
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  void kill_now() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  FILE* output_ = nullptr;
};

// Every record in the state directory — sandboxes and standby monitors, made by other
// processes — for the audit.
void track_all(LeakAudit& audit, const std::filesystem::path& state_dir) {
  StateStore store(state_dir);
  for (const auto& id : store.ids()) {
    if (auto record = store.read(id)) audit.track(*record);
  }
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(store.base() / "standby", error)) {
    if (entry.path().extension() != ".json") continue;
    std::stringstream text;
    text << std::ifstream(entry.path()).rdbuf();
    try {
      const auto value = json::Json::parse(text.str());
      RecordFile standby;
      standby.instance_id = value.at("instance_id").get<std::string>();
      standby.init_pid = value.at("pid").get<long>();
      standby.init_start_time = value.at("start_time").get<std::uint64_t>();
      standby.cgroups = value.at("cgroups").get<std::vector<std::string>>();
      audit.track(standby);
    } catch (const std::exception&) {
      // Being rewritten while we looked; the next look sees it.
    }
  }
}

TEST_F(LifecycleTest, AcquireIsGetOrCreatePerKeyKindAndEgress) {
  auto first = acquire(spec("alpha"));
  auto again = acquire(spec("alpha"));
  EXPECT_EQ(first->instance_id(), again->instance_id());
  EXPECT_EQ(first.get(), again.get());
  auto other_kind = acquire(spec("beta"));
  EXPECT_NE(other_kind->instance_id(), first->instance_id());
  auto allowlisted = acquire(spec("alpha", [](SandboxSpec::Fields& fields) {
    fields.egress = Egress::allowlist;
    fields.egress_allow = {"example.org"};
  }));
  EXPECT_NE(allowlisted->instance_id(), first->instance_id());
  SandboxKey other_key = key_;
  other_key.thread_id = "another-thread";
  EXPECT_NE(acquire(spec("alpha"), other_key)->instance_id(), first->instance_id());
}

TEST_F(LifecycleTest, HundredConcurrentAcquiresForOneKeyYieldOneSandbox) {
  std::vector<std::thread> threads;
  std::mutex mutex;
  std::set<std::string> instances;
  std::atomic<int> failures{0};
  for (int i = 0; i < 100; ++i) {
    threads.emplace_back([&] {
      try {
        auto sandbox = backend_->acquire(key_, spec("crowd"));
        std::lock_guard lock(mutex);
        instances.insert(sandbox->instance_id());
      } catch (const std::exception& error) {
        ++failures;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(instances.size(), 1u);
  track_all(audit_, state_->path());
  EXPECT_EQ(StateStore(state_->path()).ids().size(), 1u);
}

TEST_F(LifecycleTest, ConcurrentAcquiresFromManyProcessesYieldOneSandbox) {
  std::vector<std::unique_ptr<HostProcess>> processes;
  for (int i = 0; i < 8; ++i) {
    processes.push_back(std::make_unique<HostProcess>(
        std::vector<std::string>{state_->path().string(), "acquire", key_.scope, "shared"}));
  }
  std::set<std::string> instances;
  for (auto& process : processes) {
    const auto id = process->line();
    ASSERT_TRUE(id);
    instances.insert(*id);
    EXPECT_EQ(process->wait(), 0);
  }
  track_all(audit_, state_->path());
  EXPECT_EQ(instances.size(), 1u);
  // This process adopts the same sandbox, and it works.
  SandboxKey key{key_.scope, "thread", "agent"};
  SandboxSpec::Fields fields;
  fields.kind = "shared";
  auto adopted = acquire(SandboxSpec(fields), key);
  EXPECT_EQ(adopted->instance_id(), *instances.begin());
  ExecOptions options;
  options.working_directory = kDefaultWorkDir;
  EXPECT_EQ(adopted->exec(Command::argv({"echo", "adopted"}), options).stdout_bytes, "adopted\n");
}

TEST_F(LifecycleTest, DisposeScopeFromAnotherProcessFindsTheSandboxes) {
  {
    HostProcess maker({state_->path().string(), "hold", key_.scope, "3"});
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(maker.line());
    ASSERT_EQ(maker.line(), std::optional<std::string>("ready"));
    track_all(audit_, state_->path());
    maker.kill_now();
  }
  // A fresh backend (no memory of them) finds all three from the state directory.
  auto fresh = make_backend();
  EXPECT_EQ(fresh->dispose_scope("some-other-scope", std::nullopt), 0);
  EXPECT_EQ(fresh->dispose_scope(key_.scope, std::string("other-thread")), 0);
  EXPECT_EQ(fresh->dispose_scope(key_.scope, std::string("thread")), 3);
  EXPECT_TRUE(StateStore(state_->path()).ids().empty());
}

TEST_F(LifecycleTest, ASigkilledHostLeavesSandboxesThatPurgeReclaims) {
  HostProcess maker({state_->path().string(), "hold", key_.scope, "3"});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(maker.line());
  ASSERT_EQ(maker.line(), std::optional<std::string>("ready"));
  maker.kill_now();
  track_all(audit_, state_->path());
  // Durable on purpose: the sandboxes outlived their creator.
  auto fresh = make_backend();
  const auto listed = fresh->list_sandboxes();
  ASSERT_EQ(listed.size(), 3u);
  for (const auto& entry : listed) EXPECT_EQ(entry.state, "running");
  EXPECT_EQ(fresh->purge_all(), 3);
  // The audit at teardown checks inits, cgroups, mounts and state; check the inits now too.
  StateStore store(state_->path());
  EXPECT_TRUE(store.ids().empty());
}

TEST_F(LifecycleTest, AHostKilledAtAnyStepLeavesNothingPurgeCannotReclaim) {
  std::mt19937 random{std::random_device{}()};
  for (int round = 0; round < 6; ++round) {
    HostProcess churner(
        {state_->path().string(), "churn", key_.scope + "-" + std::to_string(round)});
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::uniform_int_distribution<int>(20, 400)(random)));
    track_all(audit_, state_->path());
    churner.kill_now();
    track_all(audit_, state_->path());
  }
  make_backend()->purge_all();
  EXPECT_TRUE(StateStore(state_->path()).ids().empty());
  // The audit at teardown checks every tracked init, standby and cgroup is gone.
}

// A host that dies holding a standby leaves its record and its (empty) cgroups; no purge of
// everything is needed to reclaim them: the next backend on the state directory does.
TEST_F(LifecycleTest, ADeadHostsStandbyIsReclaimedByTheNextBackendNotOnlyByPurge) {
  const auto standby_dir = state_->path() / "linux" / "standby";
  std::string dead_standby;
  std::vector<std::string> dead_cgroups;
  {
    HostProcess holder({state_->path().string(), "hold", key_.scope + "-holder", "1"});
    ASSERT_TRUE(holder.line());  // the held sandbox's instance id
    // Its backend prepares a standby after that first acquire: wait until one has started.
    for (int attempt = 0; attempt < 400 && dead_standby.empty(); ++attempt) {
      std::error_code error;
      for (const auto& entry : std::filesystem::directory_iterator(standby_dir, error)) {
        if (entry.path().extension() != ".json") continue;
        std::stringstream text;
        text << std::ifstream(entry.path()).rdbuf();
        try {
          const auto value = json::Json::parse(text.str());
          if (value.at("pid").get<long>() > 0) {
            dead_standby = value.at("instance_id").get<std::string>();
            dead_cgroups = value.at("cgroups").get<std::vector<std::string>>();
          }
        } catch (const std::exception&) {
        }
      }
      if (dead_standby.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    track_all(audit_, state_->path());
    ASSERT_FALSE(dead_standby.empty()) << "the host never prepared a standby";
    holder.kill_now();
  }
  ASSERT_FALSE(dead_cgroups.empty());
  EXPECT_TRUE(std::filesystem::exists(standby_dir / (dead_standby + ".json")));
  // A new backend's first acquire, of another conversation entirely.
  auto sandbox = acquire(spec("next"), SandboxKey{key_.scope + "-next", "thread", "agent"});
  EXPECT_EQ(sh(*sandbox, "echo alive").stdout_bytes, "alive\n");
  EXPECT_FALSE(std::filesystem::exists(standby_dir / (dead_standby + ".json")))
      << "the dead host's standby record was kept";
  for (const auto& cgroup : dead_cgroups) {
    EXPECT_FALSE(std::filesystem::exists(cgroup)) << cgroup << " was left behind";
  }
  // The held sandbox itself is durable by design, and is purged as usual.
  sandbox.reset();
  track_all(audit_, state_->path());
  backend_->purge_all();
}

TEST_F(LifecycleTest, TheStandbyServesTheNextColdAcquireAndGoesWithItsBackend) {
  auto first = acquire(spec("first"));
  // The backend prepares a standby after its first acquire.
  auto* linux = dynamic_cast<LinuxBackend*>(backend_.get());
  ASSERT_NE(linux, nullptr);
  const auto standby_dir = state_->path() / "linux" / "standby";
  std::string standby_id;
  for (int attempt = 0; attempt < 200 && standby_id.empty(); ++attempt) {
    standby_id = linux->ready_standby();
    if (standby_id.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(standby_id.empty()) << "no standby was prepared";
  EXPECT_TRUE(std::filesystem::exists(standby_dir / (standby_id + ".json")));
  track_all(audit_, state_->path());
  auto second = acquire(spec("second"));
  EXPECT_EQ(second->instance_id(), standby_id);
  EXPECT_EQ(sh(*second, "echo from-standby").stdout_bytes, "from-standby\n");
  EXPECT_FALSE(std::filesystem::exists(standby_dir / (standby_id + ".json")))
      << "the claimed standby's record was kept";
  // A spec needing other cgroups (a CPU limit) does not take the standby's.
  auto third = acquire(
      spec("third", [](SandboxSpec::Fields& fields) { fields.resources.cpu_millis = 500; }));
  EXPECT_EQ(sh(*third, "echo direct").stdout_bytes, "direct\n");
  // The next standby, too, goes with the backend: nothing of it stays (the teardown audit).
  track_all(audit_, state_->path());
  first.reset();
  second.reset();
  third.reset();
  backend_->purge_all();
  track_all(audit_, state_->path());
  backend_.reset();
  std::error_code error;
  EXPECT_TRUE(std::filesystem::is_empty(standby_dir, error));
}

// ---- The warm pool ----

std::string spec_posture(const SandboxSpec& spec) { return spec.egress_posture(); }

// The instance ids of the pool's ready sandboxes, once there are at least `count` (waits up
// to 30 s; fewer when it never gets there).
std::vector<std::string> wait_for_pooled(SandboxBackend& backend, std::size_t count,
                                         const std::set<std::string>& besides = {}) {
  std::vector<std::string> pooled;
  for (int attempt = 0; attempt < 600; ++attempt) {
    pooled.clear();
    for (const auto& entry : backend.list_sandboxes()) {
      if (entry.state == "pooled" && besides.count(entry.instance_id) == 0) {
        pooled.push_back(entry.instance_id);
      }
    }
    if (pooled.size() >= count) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pooled;
}

// A pooled sandbox is handed out once, to one conversation, and has nothing of anyone in it:
// not the files or processes of the conversation before it, nor of another pool member. And
// once claimed it is a sandbox like any other: it outlives the pool that built it.
TEST_F(LifecycleTest, APooledSandboxIsFreshServesOneConversationAndOutlivesItsPool) {
  backend_ = make_backend([](LinuxBackendConfig& config) { config.pool.size = 1; });
  // A miss: built the ordinary way, and the shape is learned.
  auto first = acquire(spec("agent"));
  track_all(audit_, state_->path());
  ASSERT_EQ(sh(*first, "echo secret-of-a > note.txt; echo a > /tmp/a; "
                       "sleep 1000 > /dev/null 2>&1 &")
                .exit_code,
            0);
  const auto pooled = wait_for_pooled(*backend_, 1);
  ASSERT_EQ(pooled.size(), 1u) << "the pool never built a sandbox";
  track_all(audit_, state_->path());
  // The pool's sandbox is its own: a state directory entry of its own, no conversation's labels.
  for (const auto& entry : backend_->list_sandboxes()) {
    if (entry.instance_id == pooled[0]) {
      EXPECT_TRUE(entry.labels.empty());
      EXPECT_TRUE(entry.kind.empty());
    }
  }

  const SandboxKey other{key_.scope + "-b", "thread", "agent"};
  auto second = acquire(spec("agent"), other);
  EXPECT_EQ(second->instance_id(), pooled[0]) << "the pool's sandbox did not serve the acquire";
  EXPECT_NE(second->instance_id(), first->instance_id());
  const ExecResult looked =
      sh(*second, "ls -A; ls -A /tmp; grep -l sleep /proc/[0-9]*/comm 2>/dev/null | wc -l");
  EXPECT_EQ(looked.stdout_bytes, "0\n") << "the claimed sandbox is not empty";
  EXPECT_THROW(second->read_file("note.txt", kWork, 100), NotFound);
  // Claimed: a running sandbox of the conversation, found by its key like any other.
  for (const auto& entry : backend_->list_sandboxes()) {
    if (entry.instance_id == second->instance_id()) {
      EXPECT_EQ(entry.state, "running");
    }
  }
  EXPECT_EQ(acquire(spec("agent"), other)->instance_id(), second->instance_id());
  ASSERT_EQ(sh(*second, "echo secret-of-b > note.txt").exit_code, 0);

  // The next member is another sandbox entirely; the claimed one is never handed out again,
  // even once its conversation disposed of it.
  const auto refilled = wait_for_pooled(*backend_, 1, {pooled[0]});
  ASSERT_EQ(refilled.size(), 1u) << "the pool was not refilled";
  track_all(audit_, state_->path());
  EXPECT_TRUE(backend_->dispose_kind(other, "agent", second->instance_id()));
  const SandboxKey third_key{key_.scope + "-c", "thread", "agent"};
  auto third = acquire(spec("agent"), third_key);
  EXPECT_EQ(third->instance_id(), refilled[0]);
  EXPECT_EQ(sh(*third, "ls -A").stdout_bytes, "");

  // Another shape (a CPU limit) is not served by this shape's member.
  const auto again = wait_for_pooled(*backend_, 1, {pooled[0], refilled[0]});
  ASSERT_EQ(again.size(), 1u);
  track_all(audit_, state_->path());
  auto limited = acquire(
      spec("agent", [](SandboxSpec::Fields& fields) { fields.resources.cpu_millis = 500; }),
      SandboxKey{key_.scope + "-d", "thread", "agent"});
  EXPECT_NE(limited->instance_id(), again[0]);

  // The pool goes with its backend; what it handed out stays, and a new process adopts it.
  const std::string kept = third->instance_id();
  ASSERT_EQ(sh(*third, "echo kept > kept.txt").exit_code, 0);
  first.reset();
  second.reset();
  third.reset();
  limited.reset();
  track_all(audit_, state_->path());
  backend_.reset();
  backend_ = make_backend();
  for (const auto& entry : backend_->list_sandboxes()) {
    EXPECT_NE(entry.state, "pooled") << entry.instance_id << " outlived its pool";
  }
  auto adopted = acquire(spec("agent"), third_key);
  EXPECT_EQ(adopted->instance_id(), kept) << "the claimed sandbox died with the pool";
  EXPECT_EQ(adopted->read_file("kept.txt", kWork, 100), "kept\n");
}

// The egress posture is part of a pooled sandbox's shape: a closed one is never handed to an
// allowlisted acquire, nor the other way round, and an allowlisted one comes with its bridge.
TEST_F(LifecycleTest, APooledSandboxServesOnlyItsOwnEgressPosture) {
  backend_ = make_backend([](LinuxBackendConfig& config) { config.pool.size = 1; });
  auto allowlisted = [](const std::string& host) {
    return spec("agent", [&](SandboxSpec::Fields& fields) {
      fields.egress = Egress::allowlist;
      fields.egress_allow = {host};
    });
  };
  auto first = acquire(allowlisted("example.com"));
  const auto pooled = wait_for_pooled(*backend_, 1);
  ASSERT_EQ(pooled.size(), 1u) << "the pool never built an allowlisted sandbox";
  track_all(audit_, state_->path());
  auto closed = acquire(spec("agent"), SandboxKey{key_.scope + "-closed", "thread", "agent"});
  EXPECT_NE(closed->instance_id(), pooled[0]) << "an allowlisted member served egress closed";
  EXPECT_EQ(sh(*closed, "grep -c ':0C38 00000000:0000 0A' /proc/net/tcp").stdout_bytes, "0\n");
  auto other = acquire(allowlisted("example.org"),
                       SandboxKey{key_.scope + "-other", "thread", "agent"});
  EXPECT_EQ(other->instance_id(), pooled[0]);
  // Its bridge listens inside, and its netns has loopback only, as a sandbox built on demand.
  EXPECT_EQ(sh(*other, "grep -c ':0C38 00000000:0000 0A' /proc/net/tcp").stdout_bytes, "1\n");
  EXPECT_EQ(sh(*other, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").stdout_bytes,
            "lo\n");
  EXPECT_EQ(other->record().egress_posture, spec_posture(allowlisted("example.org")));
  track_all(audit_, state_->path());
}

TEST(LinuxPoolConfig, TheConfigIsReadAndMistakesAreRefusedNamingTheKey) {
  const LinuxBackendConfig parsed = parse_linux_backend_config(
      json::parse_text(R"({"pool": {"size": 2, "idle_timeout_ms": 60000,
                        "memory_ceiling_bytes": 1048576, "prewarm": true, "max_shapes": 3}})",
                       "test"),
      "linux");
  EXPECT_EQ(parsed.pool.size, 2u);
  EXPECT_EQ(parsed.pool.idle_timeout, std::chrono::milliseconds(60000));
  EXPECT_EQ(parsed.pool.memory_ceiling_bytes, 1048576u);
  EXPECT_TRUE(parsed.pool.prewarm);
  EXPECT_EQ(parsed.pool.max_shapes, 3u);
  EXPECT_EQ(LinuxBackendConfig{}.pool.size, 0u) << "the pool is off unless configured";
  const auto refusal = [](const char* text) -> std::string {
    try {
      (void)parse_linux_backend_config(json::parse_text(text, "test"), "linux");
    } catch (const InvalidArgument& error) {
      return error.what();
    }
    return "accepted";
  };
  EXPECT_NE(refusal(R"({"pool": {"sise": 1}})").find("linux.pool.sise"), std::string::npos);
  EXPECT_NE(refusal(R"({"pool": {"size": 65}})").find("linux.pool.size"), std::string::npos);
  EXPECT_NE(refusal(R"({"pool": {"size": -1}})").find("linux.pool.size"), std::string::npos);
  EXPECT_NE(refusal(R"({"pool": {"idle_timeout_ms": 0}})").find("linux.pool.idle_timeout_ms"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"pool": {"max_shapes": 0}})").find("linux.pool.max_shapes"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"pool": 3})").find("linux.pool"), std::string::npos);
}

TEST_F(LifecycleTest, PurgeReclaimsThePoolAndListShowsIt) {
  backend_ = make_backend([](LinuxBackendConfig& config) {
    config.pool.size = 2;
    config.pool.prewarm = true;
  });
  const auto pooled = wait_for_pooled(*backend_, 2);
  ASSERT_EQ(pooled.size(), 2u) << "the pool never filled";
  track_all(audit_, state_->path());
  auto held = acquire(spec("held"));
  track_all(audit_, state_->path());
  held.reset();
  // Purge by another process, while this one's pool holds its leashes.
  const int purged = make_backend()->purge_all();
  EXPECT_GE(purged, 2);
  // This process's pool finds its members gone and builds no sandbox out of a dead record.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (const auto& entry : backend_->list_sandboxes()) {
    EXPECT_TRUE(std::find(pooled.begin(), pooled.end(), entry.instance_id) == pooled.end())
        << entry.instance_id << " survived the purge";
  }
  // A purge by the pool's own backend leaves nothing, and nothing is refilled after it.
  wait_for_pooled(*backend_, 1);
  track_all(audit_, state_->path());
  backend_->purge_all();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(StateStore(state_->path()).ids().empty());
  EXPECT_TRUE(dynamic_cast<LinuxBackend&>(*backend_).pooled_ids().empty());
}

// The pool's owner is SIGKILLed: its pooled sandboxes end with their leashes, and what they
// left (records, cgroups) is reclaimed by the next backend on the state directory, not only by
// a purge.
TEST_F(LifecycleTest, ASigkilledPoolOwnersSandboxesEndAndAreReclaimed) {
  std::vector<std::string> pooled;
  std::vector<RecordFile> records;
  {
    HostProcess owner({state_->path().string(), "pool", key_.scope, "2"});
    for (auto line = owner.line(); line && *line != "ready"; line = owner.line()) {
      pooled.push_back(*line);
    }
    ASSERT_EQ(pooled.size(), 2u) << "the owner's pool never filled";
    StateStore store(state_->path());
    for (const auto& id : store.ids()) {
      if (auto record = store.read(id)) {
        EXPECT_EQ(record->state, "pooled");
        records.push_back(*record);
      }
    }
    track_all(audit_, state_->path());
    owner.kill_now();
  }
  ASSERT_EQ(records.size(), 2u);
  for (const auto& record : records) {
    bool ended = false;
    for (int attempt = 0; attempt < 200 && !ended; ++attempt) {
      ended = !process_alive(record.init_pid, record.init_start_time);
      if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    EXPECT_TRUE(ended) << "pooled init " << record.init_pid << " outlived its owner";
  }
  // The next backend's first acquire reclaims them.
  auto sandbox = acquire(spec("next"));
  EXPECT_EQ(sh(*sandbox, "echo alive").stdout_bytes, "alive\n");
  for (const auto& record : records) {
    EXPECT_FALSE(std::filesystem::exists(state_->path() / "linux" / record.id))
        << record.id << " was left behind";
    for (const auto& cgroup : record.cgroups) {
      EXPECT_FALSE(std::filesystem::exists(cgroup)) << cgroup << " was left behind";
    }
  }
  EXPECT_EQ(backend_->list_sandboxes().size(), 1u);
}

TEST_F(LifecycleTest, ADeadSandboxIsReplacedOnTheNextAcquire) {
  auto first = acquire(spec("phoenix"));
  const RecordFile record = first->record();
  base::UniqueFd init = open_verified_init(record);
  ASSERT_TRUE(init);
  ASSERT_EQ(sys::pidfd_send_signal(init.get(), SIGKILL), 0);
  struct pollfd exited {
    init.get(), POLLIN, 0
  };
  ASSERT_EQ(::poll(&exited, 1, 5000), 1);
  EXPECT_FALSE(first->is_live());
  auto second = acquire(spec("phoenix"));
  EXPECT_NE(second->instance_id(), record.instance_id);
  EXPECT_EQ(sh(*second, "echo reborn").stdout_bytes, "reborn\n");
  for (const auto& cgroup : record.cgroups) EXPECT_FALSE(std::filesystem::exists(cgroup)) << cgroup;
}

TEST_F(LifecycleTest, ADisposedHandleRefusesEveryCall) {
  auto sandbox = acquire(spec("short-lived"));
  EXPECT_TRUE(backend_->dispose_kind(key_, "short-lived", sandbox->instance_id()));
  EXPECT_THROW(sh(*sandbox, "true"), BackendError);
  EXPECT_THROW(sandbox->write_file("x", "y", kWork), BackendError);
  EXPECT_THROW(sandbox->read_file("x", kWork, 10), BackendError);
  // dispose_kind for an instance already gone is success.
  EXPECT_TRUE(backend_->dispose_kind(key_, "short-lived", sandbox->instance_id()));
  auto replacement = acquire(spec("short-lived"));
  EXPECT_NE(replacement->instance_id(), sandbox->instance_id());
  // …and naming the old instance does not touch the new one.
  EXPECT_TRUE(backend_->dispose_kind(key_, "short-lived", sandbox->instance_id()));
  EXPECT_EQ(sh(*replacement, "echo still-here").stdout_bytes, "still-here\n");
}

TEST_F(LifecycleTest, DisposeRemovesEveryKindOfTheKeyOnly) {
  auto a = acquire(spec("a"));
  auto b = acquire(spec("b"));
  SandboxKey neighbour = key_;
  neighbour.agent_dir = "neighbour";
  auto c = acquire(spec("a"), neighbour);
  backend_->dispose(key_);
  EXPECT_FALSE(a->is_live());
  EXPECT_FALSE(b->is_live());
  EXPECT_TRUE(c->is_live());
  EXPECT_EQ(sh(*c, "echo untouched").stdout_bytes, "untouched\n");
}

TEST_F(LifecycleTest, RecordsCarryHashedLabelsOnly) {
  SandboxKey secretive{
      "tenant:acme/conversation 42 with a very long identifier that exceeds "
      "sixty-three characters",
      "thread", "agent"};
  auto sandbox = acquire(spec("labelled"), secretive);
  const auto listed = backend_->list_sandboxes();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].labels.at("airlock.scope"), map_label_value(secretive.scope));
  EXPECT_EQ(listed[0].labels.at("airlock.scope").rfind("sha256-", 0), 0u);
  std::ifstream record(state_->path() / "linux" / sandbox->record().id / "record.json");
  std::stringstream text;
  text << record.rdbuf();
  EXPECT_EQ(text.str().find("acme"), std::string::npos) << "a raw key value was stored";
  EXPECT_EQ(backend_->dispose_scope(secretive.scope, std::nullopt), 1);
}

TEST_F(LifecycleTest, AFailedCreationLeavesNothing) {
  // A work dir that cannot exist under image "host": inside a read-only host directory.
  EXPECT_THROW(acquire(spec("broken",
                            [](SandboxSpec::Fields& fields) {
                              fields.work_dir = "/usr/share/airlock-cannot-exist/work";
                            })),
               InvalidArgument);
  EXPECT_THROW(acquire(spec("broken-link",
                            [](SandboxSpec::Fields& fields) {
                              fields.work_dir = "/bin/work";  // /bin is a link on merged-/usr hosts
                            })),
               InvalidArgument);
  EXPECT_THROW(
      acquire(spec("broken2", [](SandboxSpec::Fields& fields) { fields.work_dir = "/proc/work"; })),
      InvalidArgument);
  EXPECT_THROW(acquire(spec("broken3",
                            [](SandboxSpec::Fields& fields) { fields.image = "relative/image"; })),
               InvalidArgument);
  EXPECT_TRUE(StateStore(state_->path()).ids().empty());
}

TEST_F(LifecycleTest, UnrestrictedEgressIsNeverGranted) {
  EXPECT_THROW(
      acquire(
          spec("open", [](SandboxSpec::Fields& fields) { fields.egress = Egress::unrestricted; })),
      InvalidArgument);
}

TEST_F(LifecycleTest, DeclarationsAreWhatTheBackendEnforces) {
  EXPECT_EQ(backend_->name(), "linux");
  EXPECT_EQ(backend_->isolation(), Isolation::container);
  EXPECT_EQ(backend_->egress_modes(),
            std::optional<EgressSet>(EgressSet{Egress::closed, Egress::allowlist}));
  EXPECT_EQ(backend_->os_families(), std::optional<OsFamilySet>(OsFamilySet{OsFamily::posix}));
  // host_tools: exec detaches (a command's leftovers outlive the call, so the files channel's
  // launcher works) and every sandbox offers the socket channel. snapshot: as root (these tests
  // are), files only — the frozen copy of the guest's storage (snapshot_test.cpp).
  const CapabilitySet expected{Capability::exec,       Capability::run_code,
                               Capability::files_in,   Capability::files_out,
                               Capability::files_list, Capability::files_delete,
                               Capability::host_tools, Capability::snapshot};
  EXPECT_EQ(backend_->capabilities(), std::optional<CapabilitySet>(expected));
  EXPECT_EQ(backend_->snapshot_content(), std::optional<SnapshotContent>(SnapshotContent::filesystem));
}

}  // namespace
}  // namespace airlock::linux_backend::testing
