// Run by a host user without privileges (where unprivileged user namespaces are allowed): the
// same boundary, minus what needs root — no cgroups, so limits are refused rather than ignored.
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "backends/linux/state_store.hpp"
#include "linux/fixture.hpp"

namespace airlock::linux_backend::testing {
namespace {

constexpr uid_t kNobody = 65534;

TEST(UnprivilegedTest, AnUnprivilegedHostGetsTheSameBoundaryAndNoLimits) {
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
  const auto output = base.path() / "output";
  {
    std::ofstream touch(output);
  }
  ASSERT_EQ(::chown(output.c_str(), kNobody, kNobody), 0);

  const pid_t child = ::fork();
  if (child == 0) {
    if (::freopen(output.c_str(), "w", stdout) == nullptr) ::_exit(120);
    if (::setgroups(0, nullptr) != 0 || ::setresgid(kNobody, kNobody, kNobody) != 0 ||
        ::setresuid(kNobody, kNobody, kNobody) != 0) {
      ::_exit(121);
    }
    ::setenv("HOME", "/nonexistent", 1);
    ::execl(AIRLOCK_TEST_HOST_HELPER, "linux_test_host", state.c_str(), "probe", "unprivileged",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  std::stringstream text;
  text << std::ifstream(output).rdbuf();
  const std::string facts = text.str();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << "\n"
                                                             << facts;
  for (const char* fact :
       {"uid=0\n", "CapEff:0000000000000000\n", "CapBnd:0000000000000000\n", "NoNewPrivs:1\n",
        "Seccomp:2\n", "usr=read-only\n", "shadow=denied\n", "netdev=lo\n", "file=round trip\n",
        "link=refused\n", "timeout_confirmed=1\n", "limits=refused\n", "purged=1\n"}) {
    EXPECT_NE(facts.find(fact), std::string::npos) << "missing " << fact << " in:\n" << facts;
  }
  EXPECT_NE(facts.find("procs="), std::string::npos);
  EXPECT_TRUE(StateStore(state).ids().empty());
}

}  // namespace
}  // namespace airlock::linux_backend::testing
