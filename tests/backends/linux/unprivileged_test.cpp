// Run by a host user without privileges (where unprivileged user namespaces are allowed): no
// sandbox at all unless cgroups are delegated to it (nothing else would bound a guest's memory
// and processes), and with them the same boundary as root's.
#include <grp.h>
#include <sys/mount.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <sstream>

#include "backends/kit/cgroups.hpp"
#include "backends/linux/state_store.hpp"
#include "linux/fixture.hpp"

namespace airlock::linux_backend::testing {
namespace {

constexpr uid_t kNobody = 65534;

// Runs the host helper's probe as nobody against `state`, with `delegated` as the backend's
// delegated_cgroups; returns what it printed, and its exit status through `status`.
// With `subordinate` set, the probe runs in a private mount namespace whose /etc/subuid and
// /etc/subgid give nobody that range (the setuid newuidmap and newgidmap read them there): the
// host's own files are never touched.
std::string probe_as_nobody(const std::filesystem::path& base, const std::filesystem::path& state,
                            const std::string& delegated, int& status,
                            std::optional<std::uint32_t> subordinate = std::nullopt,
                            const std::string& user_secret = {}) {
  const auto output = base / "output";
  {
    std::ofstream touch(output, std::ios::trunc);
  }
  if (::chown(output.c_str(), kNobody, kNobody) != 0) return "cannot chown the output";
  const auto ranges = base / "subids";
  if (subordinate) {
    std::ofstream(ranges) << "nobody:" << *subordinate << ":65536\n";
    ::chmod(ranges.c_str(), 0644);
  }
  const pid_t child = ::fork();
  if (child == 0) {
    if (::freopen(output.c_str(), "w", stdout) == nullptr) ::_exit(120);
    ::dup2(::fileno(stdout), 2);
    if (subordinate) {
      if (::unshare(CLONE_NEWNS) != 0 ||
          ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
          ::mount(ranges.c_str(), "/etc/subuid", nullptr, MS_BIND, nullptr) != 0 ||
          ::mount(ranges.c_str(), "/etc/subgid", nullptr, MS_BIND, nullptr) != 0) {
        ::_exit(122);
      }
    }
    if (!user_secret.empty()) ::setenv("AIRLOCK_TEST_USER_SECRET", user_secret.c_str(), 1);
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
  const backend_kit::CgroupLayout layout = backend_kit::CgroupLayout::detect();
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
        "file=round trip\n", "link=refused\n", "file_conformance=passed\n",
        // Without per-command cgroup leaves only the process group is killed: a daemon that
        // left it would live on, so the kill is never claimed confirmed.
        "timeout_confirmed=0\n", "limits=accepted\n", "pids=bounded\n", "purged="}) {
    EXPECT_NE(facts.find(fact), std::string::npos) << "missing " << fact << " in:\n" << facts;
  }
  EXPECT_NE(facts.find("procs="), std::string::npos);
  // Without subordinate ids (this run's host gives nobody none), guest root is nobody itself.
  EXPECT_NE(facts.find("init_host_uid=65534\n"), std::string::npos) << facts;
  EXPECT_TRUE(StateStore(state).ids().empty());

  // Where the host gives the user subordinate ids, the guest runs on them: its root is not the
  // user, so even a file only the user may read, in a directory the guest is shown, is not
  // readable inside — and the file plane still works (it runs inside, as the guest's root).
  if (::access("/usr/bin/newuidmap", X_OK) != 0 || ::access("/usr/bin/newgidmap", X_OK) != 0) {
    GTEST_SKIP() << "SKIPPED: the subordinate-id half needs newuidmap and newgidmap (package "
                    "uidmap; scripts/bootstrap --test installs it)";
  }
  VisibleHostDirectory shown("airlock-user-secret");
  const auto secret = shown.path() / "id_ed25519";
  std::ofstream(secret) << "the user's key\n";
  ASSERT_EQ(::chown(secret.c_str(), kNobody, kNobody), 0);
  ASSERT_EQ(::chmod(secret.c_str(), 0600), 0);
  constexpr std::uint32_t kRange = 1200000000;
  const std::string on_subids = probe_as_nobody(base.path(), state, memory.path() + ":" +
                                                pids.path(), status, kRange, secret.string());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << "\n"
                                                             << on_subids;
  for (const char* fact : {"uid=0\n", "Seccomp:2\n", "file=round trip\n", "link=refused\n",
                           "file_conformance=passed\n", "user_secret=denied\n", "limits=accepted\n", "pids=bounded\n",
                           "purged="}) {
    EXPECT_NE(on_subids.find(fact), std::string::npos) << "missing " << fact << " in:\n"
                                                       << on_subids;
  }
  EXPECT_NE(on_subids.find("init_host_uid=" + std::to_string(kRange) + "\n"), std::string::npos)
      << on_subids;
  EXPECT_TRUE(StateStore(state).ids().empty());
}

}  // namespace
}  // namespace airlock::linux_backend::testing
