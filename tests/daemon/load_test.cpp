// The daemon under load, as a separate process: 50 conversations at once acquire, move files,
// execute and purge through a real airlockd, round after round; then nothing may be left —
// no handle record, no sandbox in the backend's durable state, no process under the daemon
// beyond what a backend keeps warm by design (measured after a warm-up conversation), no cgroup
// of any instance the load used, no mount under the daemon's directory, the daemon's descriptor
// count back where it was, and — once the daemon has stopped — no helper process of this build.
//
// Not registered with CTest: scripts/test.d/50-daemon.sh runs it against the `testing` backend
// (served by the test-only airlockd-testing, or $AIRLOCKD_TESTING) and, when this build has it,
// the `linux` backend (served by $AIRLOCKD). Bounded: rounds stop being started after
// AIRLOCK_LOAD_SECONDS (default 90); latencies are printed (p50/p99 per operation) and never
// asserted — this machine is shared and noisy.
//
//   AIRLOCK_LOAD_BACKEND=testing daemon_load_test
//   AIRLOCKD=build/dev/src/daemon/airlockd AIRLOCK_LOAD_BACKEND=linux daemon_load_test
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <future>
#include <iostream>
#include <set>
#include <sstream>
#include <thread>

#include "daemon/support.hpp"

namespace airlock::daemon::test {
namespace {

using Clock = std::chrono::steady_clock;

std::string env_or(const char* name, std::string fallback) {
  const char* value = std::getenv(name);
  return value && *value ? value : fallback;
}

std::size_t count_entries(const std::filesystem::path& directory) {
  std::error_code error;
  std::size_t count = 0;
  for (auto it = std::filesystem::directory_iterator(directory, error);
       !error && it != std::filesystem::directory_iterator(); it.increment(error)) {
    ++count;
  }
  return count;
}

// Mount points at or under `directory`, in this process's mount namespace.
std::vector<std::string> mounts_under(const std::filesystem::path& directory) {
  std::ifstream mountinfo("/proc/self/mountinfo");
  std::vector<std::string> found;
  const std::string prefix = directory.string();
  std::string line;
  while (std::getline(mountinfo, line)) {
    std::istringstream fields(line);
    std::string id, parent, device, root, point;
    fields >> id >> parent >> device >> root >> point;
    if (point.rfind(prefix, 0) == 0) found.push_back(point);
  }
  return found;
}

// Processes whose parent is `pid` (sandbox init processes the daemon started, if any).
std::vector<int> children_of(int pid) {
  std::vector<int> children;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string text;
    std::getline(stat, text);
    const auto close_paren = text.rfind(')');
    if (close_paren == std::string::npos) continue;
    std::istringstream rest(text.substr(close_paren + 2));
    char state = 0;
    int parent = 0;
    rest >> state >> parent;
    if (parent == pid) children.push_back(std::stoi(name));
  }
  return children;
}

// Cgroup directories (in any hierarchy) named by one of `instances`: a backend names each
// instance's cgroups after the instance, so these are exactly the ones this run could leave.
std::vector<std::string> cgroups_of(const std::set<std::string>& instances) {
  std::vector<std::string> found;
  std::error_code error;
  for (auto it = std::filesystem::recursive_directory_iterator(
           "/sys/fs/cgroup", std::filesystem::directory_options::skip_permission_denied, error);
       !error && it != std::filesystem::recursive_directory_iterator(); it.increment(error)) {
    if (it.depth() > 3) {
      it.disable_recursion_pending();
      continue;
    }
    if (instances.count(it->path().filename().string()) != 0) found.push_back(it->path());
  }
  return found;
}

struct Percentiles {
  double p50 = 0;
  double p99 = 0;
  double max = 0;
  std::size_t count = 0;
};

Percentiles percentiles(std::vector<double> samples) {
  Percentiles out;
  out.count = samples.size();
  if (samples.empty()) return out;
  std::sort(samples.begin(), samples.end());
  auto at = [&](double fraction) {
    return samples[static_cast<std::size_t>(fraction * static_cast<double>(samples.size() - 1))];
  };
  out.p50 = at(0.50);
  out.p99 = at(0.99);
  out.max = samples.back();
  return out;
}

class Airlockd {
 public:
  Airlockd(const std::filesystem::path& dir, const std::string& backend) {
    socket_ = (dir / "airlockd.sock").string();
    state_ = dir / "state";
    const auto config = dir / "config.json";
    const auto ready = dir / "ready.json";
    json::Json document;
    if (backend == "linux") {
      // Its own state directory: the backend's durable state must end empty, and other suites
      // running on this machine keep theirs elsewhere.
      document = {
          {"backends", {{{"type", "linux"}, {"state_dir", (dir / "linux-state").string()}}}},
          {"min_isolation", "container"}};
    } else {
      document = {
          {"backends",
           {{{"type", "testing"},
             {"capabilities", {"exec", "files_in", "files_out", "files_list", "files_delete"}}}}},
          {"min_isolation", "none"}};
    }
    std::ofstream(config) << document.dump();
    // The shipped airlockd has no testing backend: the fake is served by the test-only build.
    const std::string binary = backend == "testing"
                                   ? env_or("AIRLOCKD_TESTING", AIRLOCKD_TESTING_PATH)
                                   : env_or("AIRLOCKD", "build/dev/src/daemon/airlockd");
    pid_ = fork();
    if (pid_ == 0) {
      execl(binary.c_str(), binary.c_str(), "--config", config.c_str(), "--socket", socket_.c_str(),
            "--state-dir", state_.c_str(), "--ready-file", ready.c_str(), "--log-level", "warn",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    const auto deadline = Clock::now() + 30s;
    while (!std::filesystem::exists(ready)) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("airlockd exited at start (" + binary + ")");
      }
      if (Clock::now() > deadline) throw std::runtime_error("airlockd did not start in 30 s");
      std::this_thread::sleep_for(10ms);
    }
  }
  ~Airlockd() { stop(); }

  int stop() {
    if (pid_ <= 0) return 0;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  int pid() const { return pid_; }
  const std::string& socket() const { return socket_; }
  const std::filesystem::path& state() const { return state_; }
  std::size_t fds() const { return count_entries("/proc/" + std::to_string(pid_) + "/fd"); }

 private:
  int pid_ = -1;
  std::string socket_;
  std::filesystem::path state_;
};

TEST(DaemonLoad, FiftyConversationsLeaveNoSandboxProcessMountCgroupOrDescriptor) {
  const std::string backend = env_or("AIRLOCK_LOAD_BACKEND", "testing");
  const int conversations = std::stoi(env_or("AIRLOCK_LOAD_CONVERSATIONS", "50"));
  const int rounds = std::stoi(env_or("AIRLOCK_LOAD_ROUNDS", "10"));
  const auto budget = std::chrono::seconds(std::stoi(env_or("AIRLOCK_LOAD_SECONDS", "90")));
  const bool real_shell = backend != "testing";

  TempDir dir;
  const std::size_t helpers_before = airlock_helper_processes();
  Airlockd daemon(dir.path(), backend);
  const Client client(daemon.socket());
  ASSERT_EQ(client.get("/v1/health").status, 200);
  const std::string backend_name = client.get("/v1/backends").json()["selected"];
  const json::Json spec{{"kind", "deepagents"}, {"requires", {"exec", "files_in", "files_out"}}};

  // One conversation first, so that what a backend keeps between sandboxes by design (linux
  // keeps a standby init warm for the next acquire: a child and its channel) is in the baseline.
  {
    const json::Json warm{{"scope", "warm-up"}, {"thread_id", "warm-up"}, {"agent_dir", "agent"}};
    const Reply acquired = client.post("/v1/sandboxes", {{"key", warm}, {"spec", spec}});
    ASSERT_EQ(acquired.status, 201) << acquired.body;
    const std::string base = "/v1/sandboxes/" + acquired.json()["sandbox"].get<std::string>();
    ASSERT_EQ(client.post(base + "/exec", {{"shell", "true"}}).status, 200);
    if (real_shell) {
      // The leak checks below can see what they look for: a live sandbox's cgroups and helper.
      EXPECT_FALSE(cgroups_of({acquired.json()["instance_id"].get<std::string>()}).empty());
      EXPECT_GT(airlock_helper_processes(), helpers_before);
    }
    ASSERT_EQ(client.post("/v1/purge", {{"scope", "warm-up"}}).status, 200);
  }
  std::this_thread::sleep_for(500ms);
  const std::size_t fds_before = daemon.fds();
  const std::size_t children_before = children_of(daemon.pid()).size();

  std::mutex mutex;
  std::map<std::string, std::vector<double>> latencies;
  std::vector<std::string> failures;
  std::set<std::string> instances;  // every instance the load was served by
  std::atomic<int> rounds_done{0};
  const auto stop_starting = Clock::now() + budget;

  auto timed = [&](const std::string& operation, auto&& request) {
    const auto start = Clock::now();
    Reply reply = request();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    std::lock_guard lock(mutex);
    latencies[operation].push_back(ms);
    return reply;
  };
  auto fail = [&](const std::string& what) {
    std::lock_guard lock(mutex);
    if (failures.size() < 20) failures.push_back(what);
  };

  const auto started = Clock::now();
  std::vector<std::future<void>> workers;
  for (int c = 0; c < conversations; ++c) {
    workers.push_back(std::async(std::launch::async, [&, c] {
      const std::string thread = "conversation-" + std::to_string(c);
      const json::Json key{{"scope", "load"}, {"thread_id", thread}, {"agent_dir", "agent"}};
      const std::string content = std::string(4096, static_cast<char>('a' + c % 26));
      for (int r = 0; r < rounds && Clock::now() < stop_starting; ++r) {
        try {
          const Reply acquired = timed("acquire", [&] {
            return client.post("/v1/sandboxes", {{"key", key}, {"spec", spec}});
          });
          if (acquired.status != 201) {
            fail(thread + " acquire: " + std::to_string(acquired.status) + " " + acquired.body);
            continue;
          }
          const std::string base = "/v1/sandboxes/" + acquired.json()["sandbox"].get<std::string>();
          {
            std::lock_guard lock(mutex);
            instances.insert(acquired.json()["instance_id"].get<std::string>());
          }
          const Reply put = timed(
              "put 4 KiB", [&] { return client.put(base + "/files?path=input.txt", content); });
          if (put.status != 200) fail(thread + " put: " + put.body);
          const Reply exec = timed("exec", [&] {
            return client.post(base + "/exec",
                               {{"shell", "wc -c < input.txt"}, {"timeout_ms", 30000}});
          });
          if (exec.status != 200) {
            fail(thread + " exec: " + exec.body);
          } else if (real_shell && exec.json()["result"]["stdout"] != "4096\n") {
            fail(thread + " exec answered " + exec.body);
          }
          const Reply got =
              timed("get 4 KiB", [&] { return client.get(base + "/files?path=input.txt"); });
          if (got.status != 200 || got.body != content) fail(thread + " get: the bytes differ");
          const Reply stat =
              timed("stat", [&] { return client.get(base + "/stat?path=input.txt"); });
          if (stat.json()["entry"]["size_bytes"] != 4096) fail(thread + " stat: " + stat.body);
          const Reply removed =
              timed("delete file", [&] { return client.del(base + "/files?path=input.txt"); });
          if (removed.status != 200) fail(thread + " delete: " + removed.body);
          const Reply purged = timed("purge", [&] {
            return client.post("/v1/purge", {{"scope", "load"}, {"thread_id", thread}});
          });
          if (purged.status != 200 || purged.json()["handles_forgotten"] != 1) {
            fail(thread + " purge: " + purged.body);
          }
          ++rounds_done;
        } catch (const std::exception& error) {
          fail(thread + ": " + error.what());
        }
      }
    }));
  }
  for (auto& worker : workers) worker.get();
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();

  // A last purge of the whole scope, as a host's conversation-delete path would.
  EXPECT_EQ(client.post("/v1/purge", {{"scope", "load"}}).status, 200);

  std::cout << "\nload: " << instances.size() << " sandboxes served " << conversations
            << " conversations, " << rounds_done << " rounds in " << seconds << " s against the '"
            << backend << "' backend\n";
  json::Json numbers = json::Json::object();
  std::cout << "  operation        count     p50 ms     p99 ms     max ms\n";
  for (const auto& [operation, samples] : latencies) {
    const Percentiles p = percentiles(samples);
    std::printf("  %-14s %7zu %10.2f %10.2f %10.2f\n", operation.c_str(), p.count, p.p50, p.p99,
                p.max);
    numbers[operation] = {
        {"count", p.count}, {"p50_ms", p.p50}, {"p99_ms", p.p99}, {"max_ms", p.max}};
  }
  std::cout << "LOAD-NUMBERS "
            << json::Json{{"backend", backend},
                          {"conversations", conversations},
                          {"rounds", rounds_done.load()},
                          {"seconds", seconds},
                          {"operations", numbers}}
                   .dump()
            << std::endl;

  for (const auto& failure : failures) ADD_FAILURE() << failure;
  EXPECT_GE(rounds_done.load(), conversations) << "every conversation completed at least a round";

  // ---- nothing leaked ----------------------------------------------------------------------
  EXPECT_TRUE(client.get("/v1/sandboxes").json()["sandboxes"].empty())
      << "a handle record survived";
  EXPECT_TRUE(client.get("/v1/backends/" + backend_name + "/sandboxes").json()["sandboxes"].empty())
      << "a sandbox survived in the backend's durable state";
  EXPECT_EQ(count_entries(daemon.state()), 0u) << "a record file survived in the state directory";
  std::size_t fds_after = daemon.fds();
  for (int i = 0; i < 100 && fds_after > fds_before; ++i) {
    std::this_thread::sleep_for(50ms);  // connections the clients just closed
    fds_after = daemon.fds();
  }
  EXPECT_LE(fds_after, fds_before)
      << "the daemon holds " << fds_after - fds_before << " more descriptors than before the load";
  std::size_t children = children_of(daemon.pid()).size();
  for (int i = 0; i < 100 && children > children_before; ++i) {
    std::this_thread::sleep_for(50ms);
    children = children_of(daemon.pid()).size();
  }
  EXPECT_LE(children, children_before)
      << children - children_before << " more process(es) under the daemon than after warm-up";
  EXPECT_EQ(cgroups_of(instances), std::vector<std::string>{})
      << "a cgroup of a purged sandbox was left behind";
  EXPECT_EQ(mounts_under(dir.path()), std::vector<std::string>{})
      << "a mount under the daemon's directory was left behind";
  EXPECT_EQ(daemon.stop(), 0) << "airlockd exits cleanly on SIGTERM";
  std::size_t helpers_after = airlock_helper_processes();
  for (int i = 0; i < 100 && helpers_after > helpers_before; ++i) {
    std::this_thread::sleep_for(50ms);
    helpers_after = airlock_helper_processes();
  }
  EXPECT_LE(helpers_after, helpers_before)
      << "an airlock helper process (a sandbox's init, or the standby) outlived its purge and "
         "the daemon";
  EXPECT_EQ(cgroups_of(instances), std::vector<std::string>{});
  EXPECT_EQ(mounts_under(dir.path()), std::vector<std::string>{});
  EXPECT_FALSE(std::filesystem::exists(daemon.socket())) << "the socket is removed on shutdown";
}

}  // namespace
}  // namespace airlock::daemon::test
