// Lifecycle: get-or-create across threads and processes, durable state that outlives the
// process that made it, and disposal and purge found from that state.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

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
  // launcher works) and every sandbox offers the socket channel.
  const CapabilitySet expected{Capability::exec,       Capability::run_code,
                               Capability::files_in,   Capability::files_out,
                               Capability::files_list, Capability::files_delete,
                               Capability::host_tools};
  EXPECT_EQ(backend_->capabilities(), std::optional<CapabilitySet>(expected));
}

}  // namespace
}  // namespace airlock::linux_backend::testing
