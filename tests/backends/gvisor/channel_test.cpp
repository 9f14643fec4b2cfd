// The command channel, attacked from inside the guest: the keeper socket is the one host socket
// every guest can connect to, so a guest process may pose as the keeper. It must never learn
// the token, never replace the socket, never be handed a command, never answer one.
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "airlock/errors.hpp"
#include "gvisor/fixture.hpp"

namespace airlock::gvisor_backend::testing {
namespace {

using Channel = GvisorBackendTest;

std::string read_whole(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

// The host's copy of the one sandbox's token in this test's state directory.
std::string host_token(const std::filesystem::path& state) {
  std::string token;
  for (const auto& entry : std::filesystem::directory_iterator(state / "gvisor" / "sandboxes")) {
    EXPECT_TRUE(token.empty()) << "more than one sandbox in this state directory";
    token = read_whole(entry.path() / "token");
  }
  return token;
}

TEST_F(Channel, TheGuestSeesTheKeeperSocketAloneAndCannotReplaceIt) {
  AIRLOCK_REQUIRE_GVISOR();
  auto sandbox = acquire(spec());
  EXPECT_EQ(sh(*sandbox, "ls -A /.airlock-control").stdout_bytes, "keeper.sock\n");
  // A listener of the guest's own in its place would catch the keeper's next connection.
  EXPECT_NE(sh(*sandbox, "rm /.airlock-control/keeper.sock").exit_code, 0);
  EXPECT_NE(sh(*sandbox, "mv /.airlock-control/keeper.sock /tmp/").exit_code, 0);
  EXPECT_NE(sh(*sandbox, "touch /.airlock-control/planted").exit_code, 0);
  EXPECT_NE(sh(*sandbox, "ln -s /tmp /.airlock-control/link").exit_code, 0);
  EXPECT_EQ(sh(*sandbox, "echo still-served").stdout_bytes, "still-served\n");
}

TEST_F(Channel, NoGuestProcessCanLearnTheToken) {
  AIRLOCK_REQUIRE_GVISOR();
  auto sandbox = acquire(spec());
  const std::string token = host_token(state_->path());
  ASSERT_EQ(token.size(), 32u);
  // The token reaches the script on stdin (never in an argv a /proc scan could see). The search
  // is proven able to find it: a file planted with it is found, and only that file.
  ExecOptions options;
  options.stdin_bytes = token + "\n";
  options.working_directory = kWork;
  const ExecResult search = sandbox->exec(
      Command::shell("read t; echo \"$t\" > /tmp/planted; "
                     "find / -path /proc -prune -o -path /sys -prune -o -type f -print "
                     "| xargs grep -l -F -e \"$t\" 2>/dev/null; "
                     "for f in environ cmdline; do grep -c -F -e \"$t\" /proc/1/$f; done; "
                     "dd if=/proc/1/mem bs=4096 count=1 >/dev/null 2>&1 && echo mem-read; "
                     "for f in /proc/1/fd/*; do timeout 1 cat $f 2>/dev/null; done "
                     "| grep -c -F -e \"$t\"; echo end"),
      options);
  EXPECT_EQ(search.stdout_bytes, "/tmp/planted\n0\n0\n0\nend\n") << search.stderr_bytes;
}

// gVisor lets a guest process open the keeper's descriptors through /proc/1/fd (it guards the
// keeper's memory, not those). The keeper's stdio was runsc's — the host's runsc.log among
// them, a host file outside the sandbox's bounded store. Whatever a guest writes there must
// not reach the host.
TEST_F(Channel, TheKeepersDescriptorsLeadNowhereOnTheHost) {
  AIRLOCK_REQUIRE_GVISOR();
  auto sandbox = acquire(spec());
  std::filesystem::path log;
  for (const auto& entry :
       std::filesystem::directory_iterator(state_->path() / "gvisor" / "sandboxes")) {
    log = entry.path() / "runsc.log";
  }
  ASSERT_TRUE(std::filesystem::exists(log));
  const auto before = std::filesystem::file_size(log);
  const ExecResult flood = sh(*sandbox,
                              "for f in /proc/1/fd/*; do "
                              "dd if=/dev/zero bs=65536 count=16 of=$f 2>/dev/null && echo $f; "
                              "done; echo end");
  EXPECT_NE(flood.stdout_bytes.find("end"), std::string::npos);
  EXPECT_LT(std::filesystem::file_size(log), before + 65536)
      << "a guest wrote the host's log through " << flood.stdout_bytes;
}

TEST_F(Channel, AGuestPosingAsTheKeeperIsNeverHandedACommandNorAnswersOne) {
  AIRLOCK_REQUIRE_GVISOR();
  auto sandbox = acquire(spec());
  sandbox->write_file("forger", read_whole(AIRLOCK_KEEPER_FORGER), kWork);
  // The forger keeps queueing connections with a token frame of the right shape, a forged
  // stdout and a forged exit, beside the keeper's own; meanwhile the host runs commands.
  ASSERT_EQ(sh(*sandbox,
               "chmod 755 forger && (./forger /.airlock-control/keeper.sock 60 "
               "/tmp/forged >/dev/null 2>&1 &)")
                .exit_code,
            0);
  for (int i = 0; i < 30; ++i) {
    const ExecResult real = sh(*sandbox, "echo real-" + std::to_string(i) + "; exit 3");
    EXPECT_EQ(real.stdout_bytes, "real-" + std::to_string(i) + "\n");
    EXPECT_EQ(real.exit_code, 3);
    EXPECT_EQ(sandbox->read_file("forger", kWork, 64 << 20).size(),
              read_whole(AIRLOCK_KEEPER_FORGER).size());
  }
  std::string verdict;
  for (int wait = 0; wait < 100 && verdict.empty(); ++wait) {
    verdict = sh(*sandbox, "cat /tmp/forged 2>/dev/null").stdout_bytes;
    if (verdict.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_FALSE(verdict.empty()) << "the forger never finished";
  long closed = -1;
  long received = -1;
  ASSERT_EQ(std::sscanf(verdict.c_str(), "closed %ld received %ld", &closed, &received), 2)
      << verdict;
  EXPECT_EQ(received, 0) << "the host sent an impostor something: " << verdict;
  // The attack was real: the host did take impostor connections, and refused every one.
  EXPECT_GT(closed, 0) << verdict;
}

// gVisor lets a guest process reopen another's pipes through /proc/<pid>/fd. A guest finds the
// handler of a command the host waits for (the parent of the shell that runs `sleep`) and writes
// status lines and a kill request into every descriptor of it that opens. The command's exit
// still reaches the host as it was: the status comes from the handler's own wait, and the
// connection is a socket, which no /proc path reopens. (What it writes may land in the
// command's stdout, a pipe: the guest's own stream, docs/backends/gvisor.md says so.)
TEST_F(Channel, NoGuestProcessCanForgeAnotherCommandsExitOrKillIt) {
  AIRLOCK_REQUIRE_GVISOR();
  auto sandbox = acquire(spec());
  std::optional<ExecResult> victim;
  std::thread waiting([&] { victim = sh(*sandbox, "sleep 3; echo real; exit 5"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  const ExecResult attack =
      sh(*sandbox,
         "parent() { set -- $(sed 's/.*) //' /proc/$1/stat); echo $2; }; "
         "for p in /proc/[0-9]*; do [ \"$(cat $p/comm 2>/dev/null)\" = sleep ] && s=${p#/proc/}; "
         "done; handler=$(parent $(parent $s)); echo handler $handler; "
         "for f in /proc/$handler/fd/*; do { echo 'exit 0'; echo 'killed 1'; echo k; } "
         "2>/dev/null > $f && echo opened ${f##*/}; done; echo end");
  waiting.join();
  ASSERT_TRUE(victim.has_value());
  EXPECT_EQ(victim->exit_code, 5) << attack.stdout_bytes;
  EXPECT_NE(victim->stdout_bytes.find("real\n"), std::string::npos) << victim->stdout_bytes;
  // The attack found its target.
  EXPECT_EQ(attack.stdout_bytes.rfind("handler ", 0), 0u) << attack.stderr_bytes;
  EXPECT_EQ(attack.stdout_bytes.find("handler \n"), std::string::npos) << "no handler found";
}

}  // namespace
}  // namespace airlock::gvisor_backend::testing
