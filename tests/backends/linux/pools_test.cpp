// What the host and every sandbox share: one sandbox takes all it can of each kernel pool and
// holds it, and meanwhile the host (as root, and as an unprivileged user, whom root's privileges
// would not hide an exhausted pool from) and a second sandbox must still get what they ask for.
#include <fcntl.h>
#include <grp.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "backends/linux/linux_backend.hpp"
#include "linux/fixture.hpp"

namespace airlock::linux_backend::testing {
namespace {

constexpr uid_t kHostNobody = 65534;

struct Taken {
  std::string resource;
  long count = -1;
  std::string stopped_by;  // the errno name that ended the draining, or LIMIT
};

class PoolsTest : public LinuxBackendTest {
 protected:
  void SetUp() override {
    LinuxBackendTest::SetUp();
    if (!root_) return;
    // The drainer, where an unprivileged host user can run it.
    drainer_dir_ = std::make_unique<TemporaryDirectory>("airlock-pool-drainer");
    ::chmod(drainer_dir_->path().c_str(), 0755);
    drainer_ = drainer_dir_->path() / "pool_drainer";
    std::ofstream(drainer_, std::ios::binary) << testcase_bytes("pool_drainer");
    ::chmod(drainer_.c_str(), 0755);
  }

  // The attacker: small limits, so that what the kernel bounds only by memory ends soon.
  SandboxSpec attacker_spec() {
    return spec("attacker", [](SandboxSpec::Fields& fields) {
      fields.resources.memory_bytes = std::uint64_t{512} << 20;
      fields.resources.pids = 64;
      fields.resources.disk_bytes = std::uint64_t{64} << 20;
    });
  }

  // Runs `pool_drainer one RESOURCE` on the host, as `uid` (0 or nobody): "ok" or "refused …".
  std::string host_takes_one(const std::string& resource, uid_t uid) {
    int output[2];
    if (::pipe2(output, O_CLOEXEC) != 0) return "pipe failed";
    const pid_t child = ::fork();
    if (child == 0) {
      ::dup2(output[1], 1);
      if (uid != 0 && (::setgroups(0, nullptr) != 0 || ::setresgid(uid, uid, uid) != 0 ||
                       ::setresuid(uid, uid, uid) != 0)) {
        ::_exit(120);
      }
      ::execl(drainer_.c_str(), "pool_drainer", "one", resource.c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(output[1]);
    std::string text;
    char chunk[256];
    ssize_t got;
    while ((got = ::read(output[0], chunk, sizeof chunk)) > 0) text.append(chunk, got);
    ::close(output[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    while (!text.empty() && text.back() == '\n') text.pop_back();
    return text.empty() ? "exit status " + std::to_string(status) : text;
  }

  std::string sandbox_takes_one(Sandbox& sandbox, const std::string& resource) {
    const std::string drainer = install_testcase(sandbox, "pool_drainer");
    std::string out = sh(sandbox, drainer + " one " + resource).stdout_bytes;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }

  // Drains `resource` in `attacker` and, while it holds, calls `check`. Returns what it took.
  Taken drain_and_hold(Sandbox& attacker, const std::string& resource,
                       const std::function<void()>& check, std::optional<long> limit = {}) {
    const std::string drainer = install_testcase(attacker, "pool_drainer");
    const std::string marker = std::string(kWork) + "/holding";
    const std::string hold = std::string(kWork) + "/hold";
    attacker.remove("holding", kWork, false);
    ExecResult drained;
    std::exception_ptr failure;
    std::thread holder([&] {
      try {
        ExecOptions options;
        options.working_directory = kWork;
        options.timeout = std::chrono::seconds(90);
        std::vector<std::string> argv{drainer, "hold", resource, marker, hold, "60"};
        if (limit) argv.push_back(std::to_string(*limit));
        drained = attacker.exec(Command::argv(argv), options);
      } catch (...) {
        failure = std::current_exception();
      }
    });
    Taken taken;
    taken.resource = resource;
    std::string line;
    std::exception_ptr checking;
    try {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (std::chrono::steady_clock::now() < give_up) {
        try {
          line = attacker.read_file("holding", kWork, 256);
          if (!line.empty()) break;
        } catch (const NotFound&) {
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (!line.empty()) {
        std::istringstream fields(line);
        std::string name;
        fields >> name >> taken.count >> taken.stopped_by;
        check();  // while the attacker holds everything it could get
      }
    } catch (...) {
      checking = std::current_exception();
    }
    // Removing the hold file tells it to let go (a removal needs no room in a full store).
    try {
      attacker.remove("hold", kWork, false);
    } catch (const std::exception&) {
    }
    holder.join();
    if (checking) std::rethrow_exception(checking);
    if (failure) std::rethrow_exception(failure);
    // What the drain wrote stays in the store: make room for the next one.
    sh(attacker, "rm -rf /tmp/pool-drainer.fill /tmp/pool-drainer.inodes");
    EXPECT_FALSE(line.empty()) << resource << ": the drainer never held anything; it said: "
                               << drained.stdout_bytes << drained.stderr_bytes;
    return taken;
  }

  std::unique_ptr<TemporaryDirectory> drainer_dir_;
  std::filesystem::path drainer_;
};

// One case: what the attacker may get at most, and who must still get one while it holds.
struct PoolCase {
  const char* resource;
  long at_most;             // the attacker's count must not exceed this
  bool refused_outright;    // the filter refuses it: the attacker gets none (and neither may B)
  // Where only memory bounds a pool, the kernel's answer at the end is the memory cgroup's OOM
  // killer, which holds nothing: such a pool is drained to this many units instead, held, and
  // the others checked while it holds.
  std::optional<long> drain_to = std::nullopt;
};

TEST_F(PoolsTest, NoSandboxCanExhaustAPoolTheHostOrAnotherSandboxShares) {
  AIRLOCK_REQUIRE_ROOT();
  auto attacker = acquire(attacker_spec());
  auto victim = acquire(spec("victim"), SandboxKey{key_.scope + "-victim", "thread", "agent"});
  const std::vector<PoolCase> cases = {
      // inotify instances: per user and charged to each user namespace's creator, which is the
      // sandbox's own host uid: the attacker empties its own pool only.
      {"inotify", 128, false},
      // AIO contexts (fs.aio-max-nr is host-wide): the filter refuses io_setup.
      {"aio", 0, true},
      // ptys: the kernel's pool is shared by every devpts instance; each sandbox's has max=64.
      {"pty", 64, false},
      // Files held open by a mapping after their descriptor is closed, across many processes
      // (one stops at vm.max_map_count): only the memory their kernel objects take bounds them,
      // ~400 bytes each, charged to the sandbox. A million held (400 MB) leaves the host's file
      // table — and the host's and a second sandbox's open() — alone; a memory limit that could
      // hold more than half of fs.file-max is refused at acquire (FileTableShare below).
      {"mapped-file", 1000000, false, 1000000},
      // Pipe buffer pages are counted per host user: the sandbox's own.
      {"pipe-pages", 1 << 20, false},
      // Locked memory: RLIMIT_MEMLOCK 16 MiB a process (and the memory cgroup).
      {"mlock", 16, false},
      // No user namespace (nor any other) is made inside: the filter and the namespace's own
      // ceilings refuse it.
      {"userns", 0, true},
      // Threads and processes: the pids cgroup (64 here).
      {"thread", 64, false},
      // Message queues: RLIMIT_MSGQUEUE bytes, per host user.
      {"mqueue", 1000, false},
      // The kernel keyring (per-user key quotas are host-wide): the filter refuses add_key.
      {"keyring", 0, true},
  };
  for (const PoolCase& pool : cases) {
    SCOPED_TRACE(pool.resource);
    std::string host_root, host_nobody, other_sandbox;
    const Taken taken = drain_and_hold(
        *attacker, pool.resource,
        [&] {
          host_root = host_takes_one(pool.resource, 0);
          host_nobody = host_takes_one(pool.resource, kHostNobody);
          other_sandbox = sandbox_takes_one(*victim, pool.resource);
        },
        pool.drain_to);
    ASSERT_GE(taken.count, 0);
    EXPECT_LE(taken.count, pool.at_most) << "stopped by " << taken.stopped_by;
    if (pool.drain_to) {
      EXPECT_EQ(taken.stopped_by, "LIMIT") << "the drain ended before holding " << *pool.drain_to;
    } else {
      EXPECT_NE(taken.stopped_by, "LIMIT") << "the kernel never said no";
    }
    if (pool.refused_outright) {
      EXPECT_EQ(taken.count, 0);
      EXPECT_EQ(taken.stopped_by, "EPERM");
      EXPECT_EQ(other_sandbox.rfind("refused", 0), 0u) << other_sandbox;
    } else {
      EXPECT_GT(taken.count, 0) << "positive control: the attacker got some";
      EXPECT_EQ(other_sandbox, "ok") << "a second sandbox, while the attacker held "
                                     << taken.count;
    }
    if (std::string(pool.resource) != "userns" && std::string(pool.resource) != "keyring") {
      EXPECT_EQ(host_root, "ok") << "host root, while the attacker held " << taken.count;
      EXPECT_EQ(host_nobody, "ok") << "an unprivileged host user, while the attacker held "
                                   << taken.count;
    }
    std::cout << "[pool] " << pool.resource << ": the attacker took " << taken.count
              << " before " << taken.stopped_by << "; host root " << host_root
              << ", host nobody " << host_nobody << ", second sandbox " << other_sandbox
              << std::endl;
  }
}

// The acquire-time guard on the host's file table: a memory limit under which one sandbox could
// keep more than half of fs.file-max open through mappings is refused, naming the sysctl.
TEST(FileTableShare, AMemoryLimitThatCouldHoldHalfTheHostsFileTableIsRefused) {
  constexpr std::uint64_t kDefaultTableHere = 2466165;  // the kernel's default on a 24 GiB host
  EXPECT_NO_THROW(check_file_table_share(std::nullopt, kDefaultTableHere));
  EXPECT_NO_THROW(check_file_table_share(std::uint64_t{256} << 20, kDefaultTableHere));
  EXPECT_NO_THROW(check_file_table_share(std::uint64_t{2} << 30, 9223372036854775807ull));
  try {
    check_file_table_share(std::uint64_t{2} << 30, kDefaultTableHere);
    ADD_FAILURE() << "2 GiB of memory could hold ~6.7M files, more than half of 2466165";
  } catch (const InvalidArgument& refused) {
    const std::string message = refused.what();
    EXPECT_NE(message.find("fs.file-max = 2466165"), std::string::npos) << message;
    EXPECT_NE(message.find("sysctl -w fs.file-max="), std::string::npos) << message;
    EXPECT_EQ(refused.check(), "resources.memory_bytes");
  }
}

// Disk and inodes: everything a guest writes lands in its own bounded store; the host
// filesystem beneath the state directory does not lose a byte or an inode to it.
TEST_F(PoolsTest, NoSandboxCanFillTheHostsDiskOrInodes) {
  AIRLOCK_REQUIRE_ROOT();
  auto attacker = acquire(attacker_spec());
  auto victim = acquire(spec("victim"), SandboxKey{key_.scope + "-victim", "thread", "agent"});
  for (const char* resource : {"disk", "inodes"}) {
    SCOPED_TRACE(resource);
    struct statvfs before {};
    ASSERT_EQ(::statvfs(state_->path().c_str(), &before), 0);
    struct statvfs during {};
    std::string other_sandbox;
    const Taken taken = drain_and_hold(*attacker, resource, [&] {
      ::statvfs(state_->path().c_str(), &during);
      other_sandbox = sandbox_takes_one(*victim, resource);
    });
    EXPECT_EQ(taken.stopped_by, "ENOSPC");
    if (std::string(resource) == "disk") {
      EXPECT_LE(taken.count, 64);  // MiB: the spec's disk_bytes
      EXPECT_GE(taken.count, 60);  // positive control: it really filled its store
      // The host's filesystem did not lose what the guest wrote (slack for what other tests
      // write meanwhile on a busy host: half of the guest's 64 MiB).
      const double lost = (static_cast<double>(before.f_bavail) - during.f_bavail) *
                          static_cast<double>(before.f_frsize);
      EXPECT_LT(lost, 32.0 * (1 << 20)) << "the host filesystem lost " << lost << " bytes";
    } else {
      EXPECT_LE(taken.count, 16384);  // one inode per 4 KiB of the 64 MiB store
      EXPECT_GE(taken.count, 1000);
      EXPECT_LT(static_cast<double>(before.f_favail) - during.f_favail, 8000.0);
    }
    EXPECT_EQ(other_sandbox, "ok");
  }
}

}  // namespace
}  // namespace airlock::linux_backend::testing
