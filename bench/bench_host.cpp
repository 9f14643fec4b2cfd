// Host baselines for airlock-bench (see bench_host.hpp). The floor is written here against libc
// and syscall(2) directly, not through the linux backend's code: it is what the backend is
// measured against.
#include "bench_host.hpp"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#ifndef MOUNT_ATTR_RDONLY
#include <linux/mount.h>  // struct mount_attr, when the C library's headers do not define it
#endif

extern char** environ;

namespace airlock::bench::host_baseline {
namespace {

void wait_success(pid_t child, const char* what) {
  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error(std::string(what) + ": waitpid failed");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw std::runtime_error(std::string(what) + " failed (wait status " +
                             std::to_string(status) + ")");
  }
}

struct FloorArguments {
  const char* scratch;
  int release;
};

// Through syscall(2): neither has a wrapper in every C library we build with.
int sys_mount_setattr(int dirfd, const char* path, unsigned int flags,
                      struct mount_attr* attributes) {
  return static_cast<int>(
      ::syscall(SYS_mount_setattr, dirfd, path, flags, attributes, sizeof *attributes));
}
int sys_pivot_root(const char* new_root, const char* put_old) {
  return static_cast<int>(::syscall(SYS_pivot_root, new_root, put_old));
}

int floor_child(void* opaque) {
  auto* arguments = static_cast<FloorArguments*>(opaque);
  char byte;
  if (::read(arguments->release, &byte, 1) != 1) return 10;
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return 11;
  if (::mount("/", arguments->scratch, nullptr, MS_BIND | MS_REC, nullptr) != 0) return 12;
  const std::string proc = std::string(arguments->scratch) + "/proc";
  if (::mount("proc", proc.c_str(), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
    return 13;
  }
  struct mount_attr attributes {};
  attributes.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  if (sys_mount_setattr(AT_FDCWD, arguments->scratch, AT_RECURSIVE, &attributes) != 0) {
    return 14;
  }
  if (::chdir(arguments->scratch) != 0) return 15;
  if (sys_pivot_root(".", ".") != 0) return 16;
  if (::umount2(".", MNT_DETACH) != 0) return 17;
  if (::chdir("/") != 0) return 18;
  char* argv[] = {const_cast<char*>("true"), nullptr};
  ::execve("/bin/true", argv, environ);
  return 19;
}

}  // namespace

void fork_exec_true() {
  const pid_t child = ::fork();
  if (child == 0) {
    char* argv[] = {const_cast<char*>("true"), nullptr};
    ::execve("/bin/true", argv, environ);
    ::_exit(127);
  }
  if (child < 0) throw std::runtime_error("fork failed");
  wait_success(child, "fork+exec /bin/true");
}

void clone_pivot_true(const std::filesystem::path& scratch) {
  static constexpr std::size_t kStack = 256 * 1024;
  void* stack = ::mmap(nullptr, kStack, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) throw std::runtime_error("mmap failed");
  int release[2];
  if (::pipe2(release, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  const std::string target = scratch.string();
  FloorArguments arguments{target.c_str(), release[0]};
  const pid_t child =
      ::clone(floor_child, static_cast<char*>(stack) + kStack,
              CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC |
                  CLONE_NEWUTS | SIGCHLD,
              &arguments);
  ::close(release[0]);
  if (child < 0) {
    ::close(release[1]);
    ::munmap(stack, kStack);
    throw std::runtime_error(std::string("clone failed: ") + std::strerror(errno));
  }
  const std::string prefix = "/proc/" + std::to_string(child);
  auto write_file = [](const std::string& path, const std::string& text) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const bool done = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ::close(fd);
    return done;
  };
  const std::string uid = std::to_string(::geteuid());
  const std::string gid = std::to_string(::getegid());
  const bool mapped = write_file(prefix + "/setgroups", "deny") &&
                      write_file(prefix + "/uid_map", "0 " + uid + " 1\n") &&
                      write_file(prefix + "/gid_map", "0 " + gid + " 1\n");
  if (mapped) {
    ssize_t ignored = ::write(release[1], "1", 1);
    (void)ignored;
  }
  ::close(release[1]);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::munmap(stack, kStack);
  if (!mapped || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw std::runtime_error("the clone+pivot_root floor failed (status " +
                             std::to_string(status) + ")");
  }
}

std::optional<std::string> find_bwrap() {
  for (const char* candidate : {"/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"}) {
    if (::access(candidate, X_OK) == 0) return std::string(candidate);
  }
  return std::nullopt;
}

namespace {

// Runs argv (argv[0] a path), its output to `log`; the exit status, or -1 when it could not start.
int run_logged(const std::vector<std::string>& argv, const std::filesystem::path& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  pid_t child = 0;
  const int spawned = ::posix_spawn(&child, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return -1;
  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string first_line_of(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

std::optional<OciPeer> OciPeer::prepare(const std::string& runtime,
                                        const std::filesystem::path& scratch, std::string& why) {
  std::string binary;
  for (const char* directory : {"/usr/sbin/", "/usr/bin/", "/usr/local/bin/", "/usr/local/sbin/"}) {
    if (::access((directory + runtime).c_str(), X_OK) == 0) {
      binary = directory + runtime;
      break;
    }
  }
  if (binary.empty()) {
    why = runtime + " is not installed (apt-get install " + runtime + ")";
    return std::nullopt;
  }
  const std::filesystem::path bundle = scratch / runtime;
  const std::filesystem::path log = scratch / (runtime + ".log");
  std::filesystem::create_directories(bundle / "rootfs" / "usr");
  for (const char* link : {"bin", "lib", "lib64", "sbin"}) {
    std::error_code ignored;
    std::filesystem::create_symlink(std::string("usr/") + link, bundle / "rootfs" / link, ignored);
  }
  if (run_logged({binary, "spec", "--bundle", bundle.string()}, log) != 0) {
    why = runtime + " spec failed: " + first_line_of(log);
    return std::nullopt;
  }
  nlohmann::json config;
  {
    std::ifstream in(bundle / "config.json");
    config = nlohmann::json::parse(in, nullptr, false);
  }
  if (config.is_discarded() || !config.contains("process") || !config.contains("mounts")) {
    why = runtime + " spec wrote a config.json this bench cannot read";
    return std::nullopt;
  }
  config["process"]["terminal"] = false;
  config["process"]["args"] = {"/bin/true"};
  config["root"] = {{"path", (bundle / "rootfs").string()}, {"readonly", true}};
  config["mounts"].push_back({{"destination", "/usr"},
                              {"type", "bind"},
                              {"source", "/usr"},
                              {"options", {"rbind", "ro", "nosuid", "nodev"}}});
  {
    std::ofstream out(bundle / "config.json");
    out << config.dump(1);
  }
  OciPeer peer(runtime, binary, bundle);
  const std::string id = "airlock-bench-probe-" + std::to_string(::getpid());
  if (run_logged({binary, "run", "--bundle", bundle.string(), id}, log) != 0) {
    why = runtime + " cannot run a container here: " + first_line_of(log);
    return std::nullopt;
  }
  return peer;
}

void OciPeer::run_true() {
  const std::string id =
      "airlock-bench-" + std::to_string(::getpid()) + "-" + std::to_string(next_++);
  char* argv[] = {const_cast<char*>(name_.c_str()), const_cast<char*>("run"),
                  const_cast<char*>("--bundle"), const_cast<char*>(bundle_.c_str()),
                  const_cast<char*>(id.c_str()), nullptr};
  pid_t child = 0;
  if (::posix_spawn(&child, binary_.c_str(), nullptr, nullptr, argv, environ) != 0) {
    throw std::runtime_error(name_ + " could not be started");
  }
  wait_success(child, (name_ + " run true").c_str());
}

void bwrap_true(const std::string& bwrap) {
  char* argv[] = {const_cast<char*>("bwrap"), const_cast<char*>("--ro-bind"),
                  const_cast<char*>("/"), const_cast<char*>("/"),
                  const_cast<char*>("--unshare-all"), const_cast<char*>("--dev"),
                  const_cast<char*>("/dev"), const_cast<char*>("--proc"),
                  const_cast<char*>("/proc"), const_cast<char*>("true"), nullptr};
  pid_t child = 0;
  if (::posix_spawn(&child, bwrap.c_str(), nullptr, nullptr, argv, environ) != 0) {
    throw std::runtime_error("bwrap could not be started");
  }
  wait_success(child, "bwrap true");
}

}  // namespace airlock::bench::host_baseline
