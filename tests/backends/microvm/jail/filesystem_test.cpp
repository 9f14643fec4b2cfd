// What of the host's file system the jailed program sees: /usr and what it was given, read-only
// unless --rw, never /root, /work, /home, /etc, /sys, /run or the host's /tmp.
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "fixture.hpp"

namespace airlock::microvm_jail_test {
namespace {

std::string errno_word(int error) {
  return std::to_string(error);
}

TEST_F(JailTest, HostPathsAreInvisible) {
  std::vector<std::string> commands;
  const std::vector<std::string> paths = {
      "/root",    "/work",    "/home",     "/etc",        "/etc/shadow",
      "/sys",     "/run",     "/var",      "/boot",       "/mnt",
      "/opt",     "/srv",     "/proc/sys", "/proc/kcore", "/proc/sysrq-trigger",
      "/dev/vda", "/dev/mem", "/dev/kvm"};
  for (const auto& path : paths) {
    commands.push_back("exists");
    commands.push_back(path);
  }
  commands.push_back("list");
  commands.push_back("/");
  const Outcome outcome = run({"--dev", "null"}, commands);
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  for (const auto& path : paths) {
    EXPECT_EQ(line_starting(outcome.out, "exists " + path + " "),
              "exists " + path + " no " + errno_word(ENOENT));
  }
  // Only what the jail made: the system paths, /dev, /proc, /tmp (holding the probe's bind).
  const std::string root = line_starting(outcome.out, "list / ");
  for (const char* hidden : {"root", "work", "home", "etc", "sys", "run", "var"}) {
    EXPECT_EQ(("," + root.substr(7) + ",").find(std::string(",") + hidden + ","), std::string::npos)
        << root;
  }
}

// The mount table of `pid`'s mount namespace, seen from that namespace's own root (where
// setns puts a process), so even mounts hidden below a chroot are listed: "POINT TYPE" lines.
std::string namespace_mounts(pid_t pid) {
  int ends[2];
  if (::pipe(ends) != 0) return "pipe failed";
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(ends[0]);
    // /proc/self of the host's proc, opened before: the jail's /proc shows no host process.
    const int self = ::open("/proc/self", O_PATH | O_DIRECTORY);
    const int ns = ::open(("/proc/" + std::to_string(pid) + "/ns/mnt").c_str(), O_RDONLY);
    if (self < 0 || ns < 0 || ::setns(ns, CLONE_NEWNS) != 0) ::_exit(1);
    const int table = ::openat(self, "mountinfo", O_RDONLY);
    if (table < 0) ::_exit(2);
    char buffer[4096];
    for (ssize_t got; (got = ::read(table, buffer, sizeof buffer)) > 0;) {
      if (::write(ends[1], buffer, static_cast<std::size_t>(got)) != got) ::_exit(3);
    }
    ::_exit(0);
  }
  ::close(ends[1]);
  std::string text;
  char buffer[4096];
  for (ssize_t got; (got = ::read(ends[0], buffer, sizeof buffer)) > 0;) {
    text.append(buffer, static_cast<std::size_t>(got));
  }
  ::close(ends[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  std::string table;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string id, parent, device, root, point;
    fields >> id >> parent >> device >> root >> point;
    const auto dash = line.find(" - ");
    std::istringstream tail(line.substr(dash == std::string::npos ? line.size() : dash + 3));
    std::string type;
    tail >> type;
    table += point + " " + type + "\n";
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? table : "setns failed";
}

// pivot_root and the detach of the host's root, not a mere chroot: the jail's mount namespace
// holds no host mount at all, even below its root (where a chroot leaves them all).
TEST_F(JailTest, HostMountsAreDetached) {
  RunningJail jail = start({"--dev", "null"}, {"sleep"});
  ASSERT_TRUE(jail.await_output("sleeping"));
  std::ifstream children("/proc/" + std::to_string(jail.pid()) + "/task/" +
                         std::to_string(jail.pid()) + "/children");
  pid_t warden = -1;
  children >> warden;
  ASSERT_GT(warden, 0);
  const std::string table = namespace_mounts(warden);
  ASSERT_NE(table.find("/proc proc"), std::string::npos) << table;
  for (const char* type : {" sysfs", " cgroup", " cgroup2", " devpts", " mqueue"}) {
    EXPECT_EQ(table.find(std::string(type) + "\n"), std::string::npos) << type << " in\n" << table;
  }
  std::istringstream lines(table);
  std::string line;
  while (std::getline(lines, line)) {
    const std::string point = line.substr(0, line.find(' '));
    for (const char* host : {"/sys", "/work", "/etc", "/root", "/home", "/run", "/dev/shm",
                             "/dev/pts", "/tmp/tmp", "/old_root"}) {
      EXPECT_NE(point.rfind(host, 0), 0u) << line << " in\n" << table;
    }
  }
  jail.close_leash();
  jail.finish();
}

TEST_F(JailTest, HostTmpContentIsInvisible) {
  const std::string planted = "/tmp/airlock-microvm-jail-planted-" + std::to_string(::getpid());
  std::ofstream(planted) << "secret";
  const Outcome outcome = run({}, {"exists", planted, "list", "/tmp"});
  std::filesystem::remove(planted);
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  EXPECT_EQ(line_starting(outcome.out, "exists " + planted),
            "exists " + planted + " no " + errno_word(ENOENT));
  // The jail's /tmp holds only the mount point of the probe's own bind.
  const std::string workspace = std::filesystem::path(workspace_->root()).filename();
  EXPECT_EQ(line_starting(outcome.out, "list /tmp"), "list /tmp " + workspace);
}

TEST_F(JailTest, ReadOnlyPathCannotBeWritten) {
  std::ofstream(workspace_->read_only() + "/existing") << "host";
  ::chmod(workspace_->read_only().c_str(), 0777);
  ::chmod((workspace_->read_only() + "/existing").c_str(), 0666);
  const std::string inside = workspace_->read_only();
  const Outcome outcome =
      run({"--ro", inside}, {"write", inside + "/new", "write", inside + "/existing"});
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  EXPECT_EQ(line_starting(outcome.out, "write " + inside + "/new"),
            "write " + inside + "/new errno " + errno_word(EROFS));
  EXPECT_EQ(line_starting(outcome.out, "write " + inside + "/existing"),
            "write " + inside + "/existing errno " + errno_word(EROFS));
  std::ifstream existing(workspace_->read_only() + "/existing");
  std::string content;
  existing >> content;
  EXPECT_EQ(content, "host");
}

TEST_F(JailTest, SystemPathsAndRootAreReadOnly) {
  const Outcome outcome = run({"--dev", "null"}, {"write", "/usr/bin/planted", "write", "/planted",
                                                  "write", "/dev/planted", "mknod", "/tmp/null"});
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  // Not even the permission check is reached for /usr (root's, 0755): EACCES or EROFS.
  EXPECT_NE(line_starting(outcome.out, "write /usr/bin/planted errno"), "");
  EXPECT_EQ(line_starting(outcome.out, "write /planted"),
            "write /planted errno " + errno_word(EROFS));
  EXPECT_EQ(line_starting(outcome.out, "write /dev/planted"),
            "write /dev/planted errno " + errno_word(EROFS));
  EXPECT_EQ(line_starting(outcome.out, "mknod /tmp/null"),
            "mknod /tmp/null errno " + errno_word(EPERM));
  EXPECT_FALSE(std::filesystem::exists("/usr/bin/planted"));
}

TEST_F(JailTest, ReadWritePathIsWritableButNothingRunsFromIt) {
  const std::string inside = workspace_->read_write();
  // A program the host put there, and a setuid-root one: neither runs (noexec).
  std::filesystem::copy_file(workspace_->probe(), inside + "/program");
  ::chmod((inside + "/program").c_str(), 0755);
  std::filesystem::copy_file(workspace_->probe(), inside + "/setuid");
  ::chmod((inside + "/setuid").c_str(), 04755);
  const Outcome outcome =
      run({"--rw", inside}, {"write", inside + "/made", "exec", inside + "/made", "exec",
                             inside + "/program", "exec", inside + "/setuid"});
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  EXPECT_EQ(line_starting(outcome.out, "write " + inside + "/made"),
            "write " + inside + "/made ok");
  EXPECT_TRUE(std::filesystem::exists(inside + "/made"));
  for (const char* name : {"/made", "/program", "/setuid"}) {
    EXPECT_EQ(line_starting(outcome.out, "exec " + inside + name),
              "exec " + inside + name + " errno " + errno_word(EACCES));
  }
  EXPECT_TRUE(line_starting(outcome.out, "status").empty()) << outcome.out;
}

TEST_F(JailTest, DevHoldsOnlyTheNodesAsked) {
  const Outcome outcome =
      run({"--dev", "null", "--dev", "urandom"}, {"list", "/dev", "write", "/dev/null"});
  ASSERT_EQ(outcome.exit_code, 0) << outcome.err;
  EXPECT_EQ(line_starting(outcome.out, "list /dev"),
            "list /dev fd,null,stderr,stdin,stdout,urandom");
  EXPECT_EQ(line_starting(outcome.out, "write /dev/null"), "write /dev/null ok");
}

}  // namespace
}  // namespace airlock::microvm_jail_test
