// What the sandbox's container is held to beyond the engine's defaults, proven against the real
// engine: the linux backend's seccomp policy (the static probe gets the same answers), a store
// bounded by resources.disk_bytes that costs the host's disk nothing, no container log, and a
// forced stop that ends every command without emptying that store.
#include <sys/statvfs.h>

#include <fstream>
#include <sstream>

#include "airlock/encoding.hpp"
#include "airlock/json.hpp"
#include "backends/seccomp_probe_answers.hpp"
#include "engine_fixture.hpp"

namespace airlock::docker::test {
namespace {

std::string file_bytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << file.rdbuf();
  return bytes.str();
}

std::map<std::string, std::string> answers_of(const std::string& text) {
  std::map<std::string, std::string> answers;
  std::istringstream stream(text);
  std::string line;
  while (std::getline(stream, line)) {
    const auto equals = line.find('=');
    if (equals != std::string::npos) answers[line.substr(0, equals)] = line.substr(equals + 1);
  }
  return answers;
}

// Free bytes of the filesystem holding `path` on this host.
std::uint64_t free_bytes(const char* path) {
  struct statvfs status {};
  if (::statvfs(path, &status) != 0) return 0;
  return static_cast<std::uint64_t>(status.f_bavail) * status.f_frsize;
}

TEST_F(EngineTest, TheGuestAnswersAsUnderTheLinuxBackendsFilter) {
  auto sandbox = acquire();
  sandbox->write_file("seccomp_probe", file_bytes(AIRLOCK_SECCOMP_PROBE), kWork);
  ASSERT_EQ(sh(*sandbox, "chmod 0755 seccomp_probe", kWork).exit_code, 0);
  const ExecResult result = sh(*sandbox, "./seccomp_probe", kWork);
  ASSERT_EQ(result.exit_code, 0) << result.stderr_text() << result.stdout_text();
  const auto answers = answers_of(result.stdout_text());
  const auto expected = test_support::expected_probe_answers();
  const auto late = test_support::late_syscall_attempts();
  EXPECT_GT(answers.size(), 100u);
  for (const auto& [name, answer] : answers) {
    const auto found = expected.find(name);
    ASSERT_NE(found, expected.end()) << "the probe tried " << name << ", unknown to this test";
    if (late.contains(name) && answer == "ENOSYS") continue;  // refused either way
    EXPECT_EQ(answer, found->second) << name;
  }
  // i386 and x32 numbers mean other syscalls: the runtime kills (SIGSYS, 128 + 31).
  EXPECT_EQ(sh(*sandbox, "./seccomp_probe x32", kWork).exit_code, 159);
  EXPECT_EQ(sh(*sandbox, "./seccomp_probe i386", kWork).exit_code, 159);
}

TEST_F(EngineTest, ThreadsAndProcessesStillWorkUnderThePolicy) {
  // glibc's pthread_create calls clone3 and falls back to clone on ENOSYS only: a profile whose
  // default the engine answers with EPERM would stop every thread.
  const std::string image =
      environment("AIRLOCK_DOCKER_PYTHON_IMAGE", "airlock-test/python:latest");
  if (client_->call("GET", "/images/" + url_encode(image) + "/json").status != 200) {
    GTEST_SKIP() << "SKIPPED: no python image '" << image << "' on the engine";
  }
  auto sandbox =
      backend_->acquire(key(), SandboxSpec({.kind = "py", .image = image, .work_dir = kWork}));
  const ExecResult result =
      sh(*sandbox,
         "python3 -c 'import threading, subprocess, multiprocessing\n"
         "t = threading.Thread(target=print, args=(\"thread\",)); t.start(); "
         "t.join()\n"
         "print(subprocess.run([\"echo\", \"child\"], capture_output=True, "
         "text=True).stdout.strip())\n"
         "with multiprocessing.Pool(2) as p: print(sum(p.map(abs, [-1, -2])))'",
         kWork);
  EXPECT_EQ(result.stdout_text(), "thread\nchild\n3\n") << result.stderr_text();
}

TEST_F(EngineTest, TheStorageHoldsItsBoundAndCostsTheHostsDiskNothing) {
  constexpr std::uint64_t kDisk = 256ull << 20;
  auto sandbox = backend_->acquire(key(), spec("bounded", {.disk_bytes = kDisk}));
  const std::uint64_t before = std::min(free_bytes("/"), free_bytes("/tmp"));
  // Each place takes its share and no more: the work dir's parent half, /tmp a quarter, /dev/shm
  // an eighth (in MiB, as dd counts them).
  const std::pair<const char*, std::uint64_t> places[] = {
      {"/srv/work/fill", kDisk / 2}, {"/tmp/fill", kDisk / 4}, {"/dev/shm/fill", kDisk / 8}};
  std::uint64_t stored = 0;
  for (const auto& [path, share] : places) {
    const ExecResult filled =
        sh(*sandbox, std::string("dd if=/dev/zero of=") + path + " bs=1M 2>&1; wc -c < " + path);
    std::istringstream words(filled.stdout_text());
    std::string word, last;
    while (words >> word) last = word;
    const std::uint64_t bytes = std::stoull(last.empty() ? "0" : last);
    EXPECT_NE(filled.stdout_text().find("No space left on device"), std::string::npos)
        << path << ": the fill was not refused: " << filled.stdout_text();
    EXPECT_LE(bytes, share) << path;
    EXPECT_GE(bytes, share - (2ull << 20)) << path << " took less than its share";
    stored += bytes;
  }
  const std::uint64_t after = std::min(free_bytes("/"), free_bytes("/tmp"));
  // What the guest stored is memory: the host's filesystems lose at most a fraction of it
  // (other writers on this machine are the noise).
  EXPECT_LT(before > after ? before - after : 0, stored / 2)
      << "the guest's " << stored << " bytes landed on a host filesystem";
  if (!podman()) {
    // Inodes too (Podman refuses nr_inodes: there memory alone bounds them).
    const ExecResult files = sh(*sandbox,
                                "rm -f /tmp/fill; i=0; while 2>/dev/null true > /tmp/f$i; do "
                                "i=$((i+1)); done; echo $i");
    EXPECT_LE(std::stoull(files.stdout_text()), (kDisk / 4) / 4096) << files.stderr_text();
  }
}

TEST_F(EngineTest, NothingTheGuestPrintsReachesTheEnginesLog) {
  auto sandbox = acquire();
  // PID 1 and the keeper are the guest's own uid: their stdout is reachable from inside.
  sh(*sandbox, "head -c 1048576 /dev/zero > /proc/1/fd/1; echo done");
  const auto inspected = json::parse_text(
      client_->call("GET", "/containers/" + sandbox->instance_id() + "/json").body, "inspect");
  EXPECT_EQ(inspected["HostConfig"]["LogConfig"]["Type"], "none");
  const auto logs =
      client_->call("GET", "/containers/" + sandbox->instance_id() + "/logs?stdout=1&stderr=1");
  EXPECT_LT(logs.body.size(), 4096u) << "the engine kept what the guest wrote to PID 1's output";
}

TEST_F(EngineTest, ATimeoutUnderAFullPidsLimitStopsEverythingAndKeepsTheFiles) {
  auto sandbox = backend_->acquire(key(), spec("pids", {.pids = 48}));
  sh(*sandbox, "echo kept > /tmp/state; echo kept > state", kWork);
  sandbox->write_file("fork_bomb", file_bytes(AIRLOCK_FORK_BOMB), kWork);
  ASSERT_EQ(sh(*sandbox, "chmod 0755 fork_bomb", kWork).exit_code, 0);
  try {
    // It forks until refused and holds every pid the container may have: nothing can start
    // inside it then.
    ExecOptions options;
    options.working_directory = kWork;
    options.timeout = std::chrono::seconds(3);
    sandbox->exec(Command::argv({"./fork_bomb"}), options);
    ADD_FAILURE() << "the fork bomb returned";
  } catch (const Timeout& error) {
    EXPECT_EQ(error.kill_confirmed(), true) << error.what();
  }
  // Stopped in place: the same container, its storage intact, nothing of the bomb left.
  EXPECT_EQ(backend_->acquire(key(), spec("pids", {.pids = 48}))->instance_id(),
            sandbox->instance_id());
  EXPECT_EQ(sh(*sandbox, "cat /tmp/state state", kWork).stdout_bytes, "kept\nkept\n");
  EXPECT_EQ(sh(*sandbox, "ps -o args | grep -c fork_bom[b]").stdout_bytes, "0\n");
}

}  // namespace
}  // namespace airlock::docker::test
