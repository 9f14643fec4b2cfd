// Run by a host user without privileges (where unprivileged user namespaces are allowed): no
// sandbox at all unless cgroups are delegated to it (nothing else would bound a guest's memory
// and processes), and with them the same boundary as root's.
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "backends/linux/cgroups.hpp"
#include "backends/linux/state_store.hpp"
#include "linux/fixture.hpp"

namespace airlock::linux_backend::testing {
namespace {

constexpr uid_t kNobody = 65534;

// Runs the host helper's probe as nobody against `state`, with `delegated` as the backend's
// delegated_cgroups; returns what it printed, and its exit status through `status`.
std::string probe_as_nobody(const std::filesystem::path& base, const std::filesystem::path& state,
                            const std::string& delegated, int& status) {
  const auto output = base / "output";
  {
    std::ofstream touch(output, std::ios::trunc);
  }
  if (::chown(output.c_str(), kNobody, kNobody) != 0) return "cannot chown the output";
  const pid_t child = ::fork();
  if (child == 0) {
    if (::freopen(output.c_str(), "w", stdout) == nullptr) ::_exit(120);
    if (::setgroups(0, nullptr) != 0 || ::setresgid(kNobody, kNobody, kNobody) != 0 ||
        ::setresuid(kNobody, kNobody, kNobody) != 0) {
      ::_exit(121);
    }
    ::setenv("HOME", "/nonexistent", 1);
    if (delegated.empty()) {
      ::unsetenv("AIRLOCK_TEST_DELEGATED_CGROUPS");
    } else {
      ::setenv("AIRLOCK_TEST_DELEGATED_CGROUPS", delegated.c_str(), 1);
    }
    ::execl(AIRLOCK_TEST_HOST_HELPER, "linux_test_host", state.c_str(), "probe", "unprivileged",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::waitpid(child, &status, 0);
  std::stringstream text;
  text << std::ifstream(output).rdbuf();
  return text.str();
}

// A cgroup directory of its own in `hierarchy`, handed to nobody, removed when it goes.
class DelegatedCgroup {
 public:
  explicit DelegatedCgroup(const std::string& hierarchy) {
    path_ = hierarchy + "/airlock-unprivileged-test-" + std::to_string(::getpid());
    if (::mkdir(path_.c_str(), 0755) != 0 || ::chown(path_.c_str(), kNobody, kNobody) != 0) {
      path_.clear();
    }
  }
  ~DelegatedCgroup() {
    if (!path_.empty()) ::rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(UnprivilegedTest, AnUnprivilegedHostGetsTheSameBoundaryOrNoSandbox) {
  AIRLOCK_REQUIRE_ROOT();  // to become an unprivileged user at all
  std::ifstream enabled("/proc/sys/kernel/unprivileged_userns_clone");
  int allowed = 1;
  if (enabled >> allowed; allowed == 0) {
    GTEST_SKIP() << "SKIPPED: unprivileged user namespaces are disabled on this host";
  }
  TemporaryDirectory base("airlock-unprivileged");
  ::chmod(base.path().c_str(), 0755);
  const auto state = base.path() / "state";
  std::filesystem::create_directory(state);
  ASSERT_EQ(::chown(state.c_str(), kNobody, kNobody), 0);

  // Without cgroups of its own nothing would bound a guest's memory and processes: refused,
  // saying what would make it safe.
  int status = 0;
  const std::string refused = probe_as_nobody(base.path(), state, "", status);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << "\n"
                                                             << refused;
  EXPECT_NE(refused.find("refused=delegated_cgroups"), std::string::npos) << refused;
  EXPECT_NE(refused.find("not root and no cgroups are delegated"), std::string::npos) << refused;

  // With a memory and a pids cgroup delegated to it, as an operator would: the same boundary as
  // root's, limits enforced.
  const CgroupLayout layout = CgroupLayout::detect();
  if (!layout.memory_v1 || !layout.pids_v1) {
    GTEST_SKIP() << "SKIPPED: the second half needs cgroup v1 memory and pids hierarchies to "
                    "delegate (this host has none)";
  }
  DelegatedCgroup memory(*layout.memory_v1);
  DelegatedCgroup pids(*layout.pids_v1);
  ASSERT_FALSE(memory.path().empty());
  ASSERT_FALSE(pids.path().empty());
  const std::string facts =
      probe_as_nobody(base.path(), state, memory.path() + ":" + pids.path(), status);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << "\n"
                                                             << facts;
  for (const char* fact :
       {"uid=0\n", "CapEff:0000000000000000\n", "CapBnd:0000000000000000\n", "NoNewPrivs:1\n",
        "Seccomp:2\n", "usr=read-only\n", "shadow=denied\n", "netdev=lo\n", "home=hidden\n",
        "file=round trip\n", "link=refused\n", "timeout_confirmed=1\n", "limits=accepted\n",
        "pids=bounded\n", "purged="}) {
    EXPECT_NE(facts.find(fact), std::string::npos) << "missing " << fact << " in:\n" << facts;
  }
  EXPECT_NE(facts.find("procs="), std::string::npos);
  EXPECT_TRUE(StateStore(state).ids().empty());
}

}  // namespace
}  // namespace airlock::linux_backend::testing
