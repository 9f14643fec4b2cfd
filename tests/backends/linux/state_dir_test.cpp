// The state directory, attacked by a local user: root must never follow a path that user
// planted, nor keep sockets where that user can reach them. And a state directory deep enough
// that its socket paths outgrow sun_path (108 bytes) still works.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "airlock/state_dir.hpp"
#include "linux/fixture.hpp"

namespace airlock::linux_backend::testing {
namespace {

constexpr uid_t kLocalUser = 65534;  // nobody: a host user who is not root and not us

using StateDirTest = LinuxBackendTest;

// Acquire through a backend on `state` must be refused, naming `why`, and leave nothing in
// `attacker_owned` (where the attacker wanted root's sockets and records).
void expect_refused(LinuxBackendTest& test, const std::filesystem::path& state,
                    const std::string& why, const std::filesystem::path& attacker_owned) {
  LinuxBackendConfig config;
  config.state_dir = state;
  auto backend = make_linux_backend(config);
  SandboxSpec::Fields fields;
  fields.kind = "state";
  fields.work_dir = kWork;
  try {
    backend->acquire(SandboxKey{"state-test", "thread", "agent"}, SandboxSpec(std::move(fields)));
    ADD_FAILURE() << state << " was accepted";
  } catch (const InvalidArgument& refused) {
    EXPECT_EQ(refused.check(), "state_dir");
    EXPECT_NE(std::string(refused.what()).find(why), std::string::npos) << refused.what();
  }
  std::error_code error;
  EXPECT_TRUE(std::filesystem::is_empty(attacker_owned, error))
      << "root made something in " << attacker_owned;
  (void)test;
}

TEST_F(StateDirTest, ALinkPlantedWhereTheStateDirectoryWouldBeIsRefused) {
  AIRLOCK_REQUIRE_ROOT();
  TemporaryDirectory scratch("airlock-planted");
  ::chmod(scratch.path().c_str(), 01777);  // like /tmp: anyone may plant here
  // The attacker's own directory, open to all, and a link to it where root's state would go.
  const auto theirs = scratch.path() / "theirs";
  std::filesystem::create_directory(theirs);
  ::chmod(theirs.c_str(), 0777);
  ASSERT_EQ(::chown(theirs.c_str(), kLocalUser, kLocalUser), 0);
  const auto state = scratch.path() / "state";
  ASSERT_EQ(::symlink(theirs.c_str(), state.c_str()), 0);
  ASSERT_EQ(::lchown(state.c_str(), kLocalUser, kLocalUser), 0);
  expect_refused(*this, state, "symbolic link", theirs);
  // A link deeper down, in a directory airlock would create: refused too.
  expect_refused(*this, state / "linux-state", "symbolic link", theirs);
}

TEST_F(StateDirTest, ADirectoryAnotherUserOwnsOrOthersMayWriteIsRefused) {
  AIRLOCK_REQUIRE_ROOT();
  TemporaryDirectory scratch("airlock-foreign");
  ::chmod(scratch.path().c_str(), 0755);
  // Owned by another user: they could swap what lies beneath.
  const auto foreign = scratch.path() / "foreign";
  std::filesystem::create_directory(foreign);
  ASSERT_EQ(::chown(foreign.c_str(), kLocalUser, kLocalUser), 0);
  expect_refused(*this, foreign / "state", "owned by another user", foreign);
  // Writable by everyone, without the sticky bit.
  const auto open_to_all = scratch.path() / "open";
  std::filesystem::create_directory(open_to_all);
  ::chmod(open_to_all.c_str(), 0777);
  expect_refused(*this, open_to_all / "state", "writable by others", open_to_all);
  // The state directory itself writable by others.
  const auto loose = scratch.path() / "loose";
  std::filesystem::create_directory(loose);
  ::chmod(loose.c_str(), 0777);
  expect_refused(*this, loose, "writable by its group or by others", loose);
}

TEST_F(StateDirTest, MissingDirectoriesAreMadeOneByOneAndNeverThroughALink) {
  AIRLOCK_REQUIRE_ROOT();
  TemporaryDirectory scratch("airlock-made");
  const auto state = scratch.path() / "a" / "b" / "state";
  prepare_state_directory(state);
  for (const auto& made : {scratch.path() / "a", scratch.path() / "a" / "b", state}) {
    struct stat info {};
    ASSERT_EQ(::lstat(made.c_str(), &info), 0) << made;
    EXPECT_TRUE(S_ISDIR(info.st_mode)) << made;
    EXPECT_EQ(info.st_mode & 07777, 0711u) << made;
    EXPECT_EQ(info.st_uid, ::geteuid()) << made;
  }
  // A link of root's own, in a directory nobody else may change, is an ordinary way there.
  const auto alias = scratch.path() / "alias";
  ASSERT_EQ(::symlink((scratch.path() / "a").c_str(), alias.c_str()), 0);
  EXPECT_NO_THROW(prepare_state_directory(alias / "b" / "state"));
  EXPECT_THROW(prepare_state_directory("relative/state"), InvalidArgument);
}

// sun_path holds 108 bytes: the control socket, the egress socket and the host-tool sockets of
// a sandbox in a deep state directory are reached through descriptors instead. Allowlisted
// egress (the proxy's socket) works from such a directory: the guest reaches the proxy, which
// answers for itself (a denied host is its 403).
TEST_F(StateDirTest, ADeepStateDirectoryStillServesEgressAndCommands) {
  AIRLOCK_REQUIRE_ROOT();
  std::filesystem::path state = state_->path();
  while (state.string().size() < 160) state /= "deep-state-directory-component";
  auto backend = make_backend([&](LinuxBackendConfig& config) { config.state_dir = state; });
  auto sandbox = acquire(spec("deep", [](SandboxSpec::Fields& fields) {
                           fields.egress = Egress::allowlist;
                           fields.egress_allow = {"allowed.invalid"};
                         }),
                         std::nullopt, backend.get());
  ASSERT_GT((state / "linux" / sandbox->record().id / "egress" / "egress.sock").string().size(),
            108u);
  const ExecResult proxy = sh(*sandbox,
      "python3 -c \"import socket; s=socket.create_connection(('127.0.0.1', 3128), 5); "
      "s.sendall(b'CONNECT denied.invalid:443 HTTP/1.1\\\\r\\\\nHost: denied.invalid:443\\\\r\\\\n\\\\r\\\\n'); "
      "print(s.recv(64).split(b'\\\\r\\\\n')[0].decode())\"");
  EXPECT_EQ(proxy.exit_code, 0) << proxy.stderr_bytes;
  EXPECT_NE(proxy.stdout_bytes.find(" 403"), std::string::npos) << proxy.stdout_bytes;
  EXPECT_EQ(sh(*sandbox, "echo deep").stdout_bytes, "deep\n");
  sandbox.reset();
  backend->purge_all();
  backend.reset();
  audit_.expect_clean(state);
}

}  // namespace
}  // namespace airlock::linux_backend::testing
