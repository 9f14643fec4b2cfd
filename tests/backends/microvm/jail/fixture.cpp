#include "fixture.hpp"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace airlock::microvm_jail_test {
namespace {

using Clock = std::chrono::steady_clock;

std::string read_text(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

std::string random_suffix() {
  std::random_device device;
  std::string suffix;
  for (int index = 0; index < 8; ++index) {
    suffix += "abcdefghijklmnopqrstuvwxyz0123456789"[device() % 36];
  }
  return suffix;
}

}  // namespace

std::optional<std::string> cgroup2_mount() {
  std::ifstream mounts("/proc/self/mountinfo");
  std::string line;
  while (std::getline(mounts, line)) {
    // "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [TAGS...] - TYPE SOURCE SUPER"
    const auto separator = line.find(" - ");
    if (separator == std::string::npos) continue;
    std::istringstream tail(line.substr(separator + 3));
    std::string type;
    tail >> type;
    if (type != "cgroup2") continue;
    std::istringstream head(line.substr(0, separator));
    std::string field, mount_point;
    for (int index = 0; index < 5; ++index) head >> (index == 4 ? mount_point : field);
    return mount_point;
  }
  return std::nullopt;
}

std::optional<std::string> cgroup1_mount() {
  std::ifstream mounts("/proc/self/mountinfo");
  std::string line;
  while (std::getline(mounts, line)) {
    const auto separator = line.find(" - ");
    if (separator == std::string::npos) continue;
    std::istringstream tail(line.substr(separator + 3));
    std::string type, source, options;
    tail >> type >> source >> options;
    // A hierarchy that carries a controller (not a named one like name=systemd).
    if (type != "cgroup" || options.find("name=") != std::string::npos) continue;
    std::istringstream head(line.substr(0, separator));
    std::string field, root, mount_point;
    head >> field >> field >> field >> root >> mount_point;
    if (root == "/") return mount_point;
  }
  return std::nullopt;
}

std::vector<pid_t> cgroup_pids(const std::string& directory) {
  std::ifstream procs(directory + "/cgroup.procs");
  std::vector<pid_t> pids;
  long pid = 0;
  while (procs >> pid) pids.push_back(static_cast<pid_t>(pid));
  return pids;
}

bool gone(pid_t pid) {
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

std::string command_name(pid_t pid) {
  std::string name = read_text("/proc/" + std::to_string(pid) + "/comm");
  if (!name.empty() && name.back() == '\n') name.pop_back();
  return name;
}

std::string line_starting(const std::string& text, const std::string& prefix) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(prefix, 0) == 0) return line;
  }
  return "";
}

TestCgroup::TestCgroup(const std::string& root)
    : path_(root + "/airlock-microvm-test-" + random_suffix()) {
  if (::mkdir(path_.c_str(), 0755) != 0) {
    throw std::runtime_error("mkdir " + path_ + ": " + std::strerror(errno));
  }
}

TestCgroup::~TestCgroup() {
  const auto deadline = Clock::now() + kPatience;
  while (Clock::now() < deadline) {
    const auto pids = cgroup_pids(path_);
    if (pids.empty() && ::rmdir(path_.c_str()) == 0) return;
    for (const pid_t pid : pids) ::kill(pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ADD_FAILURE() << "the test cgroup " << path_ << " could not be removed";
}

Workspace::Workspace() {
  std::string pattern = "/tmp/airlock-microvm-jail-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp");
  root_ = pattern;
  ::chmod(root_.c_str(), 0755);
  std::filesystem::create_directory(root_ + "/bin");
  std::filesystem::create_directory(read_only());
  std::filesystem::create_directory(read_write());
  if (::chown(read_write().c_str(), kProgramUid, kProgramGid) != 0)
    throw std::runtime_error("chown");
  std::filesystem::copy_file(AIRLOCK_JAIL_PROBE, probe());
  ::chmod(probe().c_str(), 0755);
}

Workspace::~Workspace() {
  std::error_code ignored;
  std::filesystem::remove_all(root_, ignored);
}

RunningJail::RunningJail(pid_t pid, base::UniqueFd leash, base::UniqueFd out, base::UniqueFd err,
                         base::UniqueFd status)
    : pid_(pid),
      leash_(std::move(leash)),
      out_(std::move(out)),
      err_(std::move(err)),
      status_(std::move(status)) {}

RunningJail::RunningJail(RunningJail&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      leash_(std::move(other.leash_)),
      out_(std::move(other.out_)),
      err_(std::move(other.err_)),
      status_(std::move(other.status_)),
      outcome_(std::move(other.outcome_)),
      reaped_(std::exchange(other.reaped_, true)) {}

RunningJail::~RunningJail() {
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
}

bool RunningJail::pump(Clock::time_point deadline) {
  struct Source {
    base::UniqueFd* fd;
    std::string* text;
  };
  Source sources[] = {{&out_, &outcome_.out}, {&err_, &outcome_.err}, {&status_, &outcome_.status}};
  pollfd watched[3];
  int count = 0;
  Source* order[3];
  for (auto& source : sources) {
    if (!*source.fd) continue;
    watched[count] = {source.fd->get(), POLLIN, 0};
    order[count++] = &source;
  }
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return false;
  if (count == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min<long>(left, 20)));
    return true;
  }
  const int ready =
      ::poll(watched, static_cast<nfds_t>(count), static_cast<int>(std::min<long>(left, 100)));
  if (ready < 0 && errno != EINTR) return false;
  for (int index = 0; index < count; ++index) {
    if (watched[index].revents == 0) continue;
    char buffer[4096];
    const ssize_t got = ::read(watched[index].fd, buffer, sizeof buffer);
    if (got > 0) {
      order[index]->text->append(buffer, static_cast<std::size_t>(got));
    } else if (got == 0 || errno != EINTR) {
      order[index]->fd->reset();
    }
  }
  return true;
}

std::optional<std::string> RunningJail::await_line(const std::string& text_of,
                                                   const std::string& prefix) {
  const auto deadline = Clock::now() + kPatience;
  for (;;) {
    const std::string& text = text_of == "out" ? outcome_.out : outcome_.status;
    // Only whole lines count.
    const std::string whole =
        text.substr(0, text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1);
    if (std::string line = line_starting(whole, prefix); !line.empty()) return line;
    if (!out_ && !status_) return std::nullopt;  // both ended: the line never comes
    if (!pump(deadline)) return std::nullopt;
  }
}

std::optional<std::string> RunningJail::await_output(const std::string& prefix) {
  return await_line("out", prefix);
}

std::optional<std::string> RunningJail::await_status(const std::string& prefix) {
  return await_line("status", prefix);
}

Outcome RunningJail::finish() {
  const auto deadline = Clock::now() + kPatience;
  while (!reaped_) {
    int status = 0;
    const pid_t done = ::waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      reaped_ = true;
      outcome_.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (!pump(deadline)) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      reaped_ = true;
      outcome_.exit_code = -1;
      ADD_FAILURE() << "the jail did not end within " << kPatience.count() << " s";
      return outcome_;
    }
  }
  while ((out_ || err_ || status_) && pump(deadline)) {
  }
  if (out_ || err_ || status_) ADD_FAILURE() << "the jail's outputs did not reach end of file";
  return outcome_;
}

RunningJail start_jail(const std::vector<std::string>& arguments,
                       const std::vector<ExtraFd>& extra) {
  int leash[2], out[2], err[2], status[2];
  if (::pipe2(leash, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 ||
      ::pipe2(err, O_CLOEXEC) != 0 || ::pipe2(status, O_CLOEXEC) != 0) {
    throw std::runtime_error("pipe2");
  }
  std::vector<std::string> all = {AIRLOCK_MICROVM_JAIL};
  all.insert(all.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (auto& argument : all) argv.push_back(argument.data());
  argv.push_back(nullptr);

  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork");
  if (pid == 0) {
    // The descriptors are moved above every target first, so no dup2 overwrites a source.
    const int base = 100;
    int sources[4] = {leash[0], status[1], out[1], err[1]};
    for (int& source : sources) source = ::fcntl(source, F_DUPFD_CLOEXEC, base);
    std::vector<int> extra_sources;
    for (const auto& fd : extra) extra_sources.push_back(::fcntl(fd.source, F_DUPFD_CLOEXEC, base));
    // What the program must not keep of its starter: supplementary groups, and inheritable
    // capabilities (which no uid change clears), one of them ambient.
    const gid_t groups[] = {0, 4, 27};
    if (::setgroups(3, groups) != 0) ::_exit(126);
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
    if (::syscall(SYS_capget, &header, data) != 0) ::_exit(126);
    data[0].inheritable =
        (1u << CAP_NET_BIND_SERVICE) | (1u << CAP_NET_RAW) | (1u << CAP_SYS_ADMIN);
    if (::syscall(SYS_capset, &header, data) != 0 ||
        ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_NET_BIND_SERVICE, 0, 0) != 0) {
      ::_exit(126);
    }
    const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (::dup2(null, 0) < 0 || ::dup2(sources[2], 1) < 0 || ::dup2(sources[3], 2) < 0 ||
        ::dup2(sources[0], 3) < 0 || ::dup2(sources[1], 4) < 0) {
      ::_exit(126);
    }
    for (std::size_t index = 0; index < extra.size(); ++index) {
      if (::dup2(extra_sources[index], extra[index].target) < 0) ::_exit(126);
    }
    ::execv(argv[0], argv.data());
    ::_exit(126);
  }
  ::close(leash[0]);
  ::close(out[1]);
  ::close(err[1]);
  ::close(status[1]);
  return RunningJail(pid, base::UniqueFd(leash[1]), base::UniqueFd(out[0]), base::UniqueFd(err[0]),
                     base::UniqueFd(status[0]));
}

void JailTest::SetUp() {
  if (::geteuid() != 0) GTEST_SKIP() << "the jail runs as root: this test needs root";
  const auto root = cgroup2_mount();
  if (!root) GTEST_SKIP() << "no cgroup v2 hierarchy is mounted (see /proc/self/mountinfo)";
  cgroup_.emplace(*root);
  workspace_.emplace();
}

void JailTest::TearDown() {
  cgroup_.reset();
  workspace_.reset();
}

std::vector<std::string> JailTest::arguments(const std::vector<std::string>& options,
                                             const std::vector<std::string>& commands) const {
  std::vector<std::string> all = {"--leash",     "3",
                                  "--status-fd", "4",
                                  "--cgroup",    cgroup_->path(),
                                  "--uid",       std::to_string(kProgramUid),
                                  "--gid",       std::to_string(kProgramGid),
                                  "--ro",        workspace_->probe()};
  all.insert(all.end(), options.begin(), options.end());
  all.push_back("--");
  all.push_back(workspace_->probe());
  all.insert(all.end(), commands.begin(), commands.end());
  return all;
}

RunningJail JailTest::start(const std::vector<std::string>& options,
                            const std::vector<std::string>& commands,
                            const std::vector<ExtraFd>& extra) {
  return start_jail(arguments(options, commands), extra);
}

Outcome JailTest::run(const std::vector<std::string>& options,
                      const std::vector<std::string>& commands, const std::vector<ExtraFd>& extra) {
  return start(options, commands, extra).finish();
}

}  // namespace airlock::microvm_jail_test
