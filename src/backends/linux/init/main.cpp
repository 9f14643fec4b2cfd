// airlock-init: the helper the linux backend starts once per sandbox.
//
// It runs in two roles, one after the other:
//   monitor  in the host's namespaces (as the library's user): joins the sandbox's cgroups,
//            builds the root filesystem in a private mount namespace (as root), clones the init
//            into new user, pid, mount, network, ipc, uts and cgroup namespaces, writes its
//            uid/gid maps, releases it, and exits;
//   init     PID 1 of the sandbox: mounts /proc and /sys, pivots into the root, brings up `lo`,
//            and serves the control socket until it is killed (which ends the sandbox: the
//            kernel kills every process of a pid namespace whose init dies).
// Only the library starts it (see spawn_config.hpp for the descriptors it expects).
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/sched.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/linux/file_agent.hpp"
#include "backends/linux/init/report.hpp"
#include "backends/linux/init/root_builder.hpp"
#include "backends/linux/init/server.hpp"
#include "backends/linux/protocol.hpp"
#include "backends/linux/spawn_config.hpp"
#include "backends/linux/syscalls.hpp"
#include "backends/linux/wire.hpp"
#include "base/openat2.hpp"
#include "base/unique_fd.hpp"

namespace airlock::linux_backend::init {
namespace {

SpawnConfig read_config() {
  struct stat info {};
  if (::fstat(kConfigFd, &info) != 0) fail("read the spawn configuration", errno);
  std::string bytes(static_cast<std::size_t>(info.st_size), '\0');
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::pread(kConfigFd, bytes.data() + done, bytes.size() - done,
                                static_cast<off_t>(done));
    if (got <= 0) fail("read the spawn configuration", got < 0 ? errno : EIO);
    done += static_cast<std::size_t>(got);
  }
  ::close(kConfigFd);
  SpawnConfig config;
  if (!decode_spawn_config(bytes, config)) fail("decode the spawn configuration", EINVAL);
  return config;
}

void write_file(const std::string& path, const std::string& content, const std::string& step) {
  base::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) fail(step, errno);
  if (::write(fd.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size())) {
    fail(step, errno);
  }
}

void mount_at(int root, const char* directory, const char* type, unsigned long flags,
              const std::string& step) {
  base::UniqueFd target(::openat(root, directory, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!target) fail(step, errno);
  const std::string path = "/proc/self/fd/" + std::to_string(target.get());
  if (::mount(type, path.c_str(), type, flags, nullptr) != 0) fail(step, errno);
}

void bring_up_loopback() {
  base::UniqueFd socket(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!socket) fail("loopback socket", errno);
  struct ifreq request {};
  std::strncpy(request.ifr_name, "lo", IFNAMSIZ - 1);
  if (::ioctl(socket.get(), SIOCGIFFLAGS, &request) != 0) fail("loopback flags", errno);
  request.ifr_flags = static_cast<short>(request.ifr_flags | IFF_UP | IFF_RUNNING);
  if (::ioctl(socket.get(), SIOCSIFFLAGS, &request) != 0) fail("bring up loopback", errno);
}

void write_namespace_limits(const SpawnConfig& config) {
  // The init's own user namespace's ceilings (writable by a holder of CAP_SYS_RESOURCE in it,
  // which the init is and no guest command is): no namespace of any kind made inside, and a
  // bound on what the namespace's processes may hold in the per-user kernel pools.
  for (const auto& limit : config.namespace_limits) {
    write_file("/proc/sys/user/" + limit.name, std::to_string(limit.value),
               "limit " + limit.name);
  }
}

// A user namespace whose uid/gid maps show host ids `from`+k as `to`+k (k < count): the
// idmapping of a stored image's lower layer for a sandbox whose ids are a range of their own.
// Made with a short-lived child (a namespace needs a process to exist), never waited for here:
// it is killed, and reaped by whoever adopts it once this monitor exits.
base::UniqueFd make_idmap_namespace(std::uint32_t from, std::uint32_t to, std::uint32_t count) {
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) fail("idmap pipe", errno);
  struct clone_args arguments {};
  arguments.flags = CLONE_NEWUSER;
  arguments.exit_signal = SIGCHLD;
  const long pid = sys::clone3_fork(&arguments);
  if (pid < 0) fail("clone the idmap namespace", errno);
  if (pid == 0) {
    char byte;
    ::close(ready[1]);
    while (::read(ready[0], &byte, 1) < 0 && errno == EINTR) {
    }
    ::_exit(0);
  }
  ::close(ready[0]);
  const std::string prefix = "/proc/" + std::to_string(pid);
  const std::string map =
      std::to_string(from) + " " + std::to_string(to) + " " + std::to_string(count) + "\n";
  write_file(prefix + "/uid_map", map, "write the idmap's uid_map");
  write_file(prefix + "/gid_map", map, "write the idmap's gid_map");
  base::UniqueFd ns(::open((prefix + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC));
  if (!ns) fail("open the idmap namespace", errno);
  ::close(ready[1]);  // the child exits
  return ns;
}

// The image's rootfs as the init's lower layer: as it is, or — for a stored image owned by
// image_uid_base+k — a detached idmapped mount showing it as uid_base+k.
base::UniqueFd open_lower(const SpawnConfig& config) {
  base::UniqueFd lower(::open(config.lower_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!lower) fail("open the image's rootfs", errno);
  if (config.image_uid_base == 0 || config.image_uid_base == config.uid_base) return lower;
  base::UniqueFd tree(static_cast<int>(
      ::syscall(SYS_open_tree, lower.get(), "",
                OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE)));
  if (!tree) fail("clone the image's rootfs mount", errno);
  base::UniqueFd ns = make_idmap_namespace(config.image_uid_base, config.uid_base, config.id_count);
  struct mount_attr attributes {};
  attributes.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY;
  attributes.userns_fd = static_cast<std::uint64_t>(ns.get());
  if (sys::mount_setattr(tree.get(), "", AT_EMPTY_PATH | AT_RECURSIVE, &attributes) != 0) {
    fail("idmap the image's rootfs", errno);
  }
  return tree;
}

// What the monitor hands the init. The init starts with <sandbox> as its working directory: a
// clone into a new mount namespace carries the working directory over into the new namespace,
// so the init reaches root/, storage/ and egress/ by relative paths resolved in its OWN mount
// namespace (a descriptor the monitor opened names the monitor's mounts, where the init may not
// mount anything) and without walking the private state directory above.
struct InitHandles {
  int release = -1;         // read end of the release pipe
  int command_cgroup = -1;  // O_PATH the delegated v2 directory for per-command leaves
};

base::UniqueFd open_relative(const char* name, const std::string& step) {
  base::UniqueFd fd(::openat(AT_FDCWD, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) fail(step, errno);
  return fd;
}

[[noreturn]] void run_init(const SpawnConfig& config, const InitHandles& handles) {
  char byte = 0;
  ssize_t got;
  do {
    got = ::read(handles.release, &byte, 1);
  } while (got < 0 && errno == EINTR);
  if (got != 1) ::_exit(1);  // the monitor failed and has said why
  ::close(handles.release);
  const bool privileged = (config.flags & kMapFullRange) != 0;
  base::UniqueFd new_root;
  if (privileged) {
    // The root was built by the monitor in the host's user namespace, so here every mount of it
    // is locked (this namespace may not unmount or remount what a more privileged one made),
    // and pivot_root refuses a locked new root. A recursive bind of it onto itself is a new,
    // unlocked mount whose children stay locked.
    if (::mount("root", "root", nullptr, MS_BIND | MS_REC, nullptr) != 0) {
      fail("bind the root onto itself", errno);
    }
    new_root = open_relative("root", "open the root");
  }
  if (::setresgid(0, 0, 0) != 0) fail("become the guest root group", errno);
  if (::setresuid(0, 0, 0) != 0) fail("become the guest root", errno);
  if ((config.flags & kSubordinateIds) != 0 && ::setgroups(0, nullptr) != 0) {
    fail("drop supplementary groups", errno);
  }

  if (!privileged) {
    // Unprivileged: the root is built here, inside the user namespace.
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      fail("make mounts private", errno);
    }
    base::UniqueFd sandbox = open_relative(".", "open the sandbox's directory");
    base::UniqueFd lower;
    if (config.root_kind == RootKind::directory) lower = open_lower(config);
    BuiltRoot built = build_root(config, sandbox.get(), lower.get());
    new_root = std::move(built.root);
    report_step("root mounts");
  }
  base::UniqueFd storage = open_relative("storage", "open the sandbox's storage");
  base::UniqueFd egress;
  if ((config.flags & kEgressBridge) != 0) egress = open_relative("egress", "open the egress directory");
  write_namespace_limits(config);

  // /proc must be mounted by a process inside the new pid namespace, and while the old root
  // (with the host's /proc) is still attached: in a user namespace the kernel refuses a new
  // proc or sysfs mount unless a fully visible one already exists in the mount namespace.
  mount_at(new_root.get(), "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mount /proc");
  mount_at(new_root.get(), "sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
           "mount /sys");
  harden_proc(new_root.get());
  if (::fchdir(new_root.get()) != 0) fail("enter the root", errno);
  if (sys::pivot_root(".", ".") != 0) fail("pivot_root", errno);
  if (::umount2(".", MNT_DETACH) != 0) fail("detach the host root", errno);
  if (::chdir("/") != 0) fail("chdir /", errno);
  new_root.reset();
  report_step("proc, sys, pivot_root");

  base::UniqueFd root_fd(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root_fd) fail("open /", errno);
  auto opened_host_tools =
      base::openat2(storage.get(), "host-tools", O_PATH | O_DIRECTORY, base::kResolveConfined);
  if (!opened_host_tools) fail("open the host-tools directory", opened_host_tools.error);
  base::UniqueFd host_tools = std::move(opened_host_tools.fd);
  bring_up_loopback();
  if (::sethostname(config.hostname.data(), config.hostname.size()) != 0) {
    fail("set the hostname", errno);
  }
  // Guest processes share this uid: without this they could read the init's descriptors
  // (the control socket among them) through /proc/1/fd.
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) fail("PR_SET_DUMPABLE", errno);

  sigset_t all;
  ::sigfillset(&all);
  ::sigprocmask(SIG_BLOCK, &all, nullptr);
  sigset_t child;
  ::sigemptyset(&child);
  ::sigaddset(&child, SIGCHLD);
  base::UniqueFd signals(::signalfd(-1, &child, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!signals) fail("signalfd", errno);

  report_ready();
  close_status();

  ServerResources resources;
  resources.listener = kControlFd;
  resources.root = root_fd.get();
  resources.host_tools = host_tools.get();
  resources.storage = storage.get();
  resources.egress = egress.release();
  resources.command_cgroup = handles.command_cgroup;
  resources.signals = signals.get();
  if ((config.flags & kPooled) != 0) {
    if (::fcntl(kPoolLeashFd, F_SETFD, FD_CLOEXEC) != 0) fail("hold the pool's leash", errno);
    resources.leash = kPoolLeashFd;
  }
  serve(config, resources);
}

void write_identity_maps(pid_t child, const SpawnConfig& config) {
  const std::string prefix = "/proc/" + std::to_string(child);
  if ((config.flags & kSubordinateIds) != 0) {
    // The setuid helpers check /etc/subuid and /etc/subgid for us; they leave setgroups
    // allowed, and the init drops the caller's supplementary groups itself.
    for (const bool users : {true, false}) {
      const std::string& helper = users ? config.uid_mapper : config.gid_mapper;
      const std::string pid = std::to_string(child);
      const std::string inside = "0";
      const std::string outside = std::to_string(users ? config.uid_base : config.gid_base);
      const std::string count = std::to_string(config.id_count);
      const pid_t mapper = ::fork();
      if (mapper < 0) fail("run " + helper, errno);
      if (mapper == 0) {
        char* no_environment[] = {nullptr};
        ::execle(helper.c_str(), helper.c_str(), pid.c_str(), inside.c_str(), outside.c_str(),
                 count.c_str(), static_cast<char*>(nullptr), no_environment);
        ::_exit(127);
      }
      int status = 0;
      while (::waitpid(mapper, &status, 0) < 0 && errno == EINTR) {
      }
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fail(helper + " refused the subordinate range", EPERM);
      }
    }
    return;
  }
  write_file(prefix + "/setgroups", "deny", "write setgroups");
  write_file(prefix + "/uid_map",
             "0 " + std::to_string(config.uid_base) + " " + std::to_string(config.id_count) + "\n",
             "write uid_map");
  write_file(prefix + "/gid_map",
             "0 " + std::to_string(config.gid_base) + " " + std::to_string(config.id_count) + "\n",
             "write gid_map");
}

[[noreturn]] void run_monitor(bool cgroups_joined) {
  const SpawnConfig config = read_config();
  report_step("spawn");
  const bool privileged = (config.flags & kMapFullRange) != 0;

  if (privileged && ::setgroups(0, nullptr) != 0) fail("drop supplementary groups", errno);
  if (!cgroups_joined) {
    for (const auto& procs : config.cgroup_procs) write_file(procs, "0", "join " + procs);
  }
  report_step("cgroup joins");
  InitHandles handles;
  if (!config.command_cgroup.empty()) {
    handles.command_cgroup =
        ::open(config.command_cgroup.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (handles.command_cgroup < 0) fail("open the command cgroup", errno);
  }
  if (privileged) {
    if (::unshare(CLONE_NEWNS) != 0) fail("unshare the mount namespace", errno);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      fail("make mounts private", errno);
    }
  }
  // Opened in the namespace the root is built in: a mount may only be made there, and overlay
  // takes no layer from another namespace's mounts.
  base::UniqueFd sandbox(
      ::open(config.sandbox_dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!sandbox) fail("open the sandbox's directory", errno);
  if (privileged) {
    base::UniqueFd lower;
    if (config.root_kind == RootKind::directory) lower = open_lower(config);
    (void)build_root(config, sandbox.get(), lower.get());
    report_step("root mounts");
  }
  if (::fchdir(sandbox.get()) != 0) fail("enter the sandbox's directory", errno);
  sandbox.reset();

  int release[2];
  if (::pipe2(release, O_CLOEXEC) != 0) fail("release pipe", errno);
  handles.release = release[0];
  struct clone_args arguments {};
  arguments.flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC |
                    CLONE_NEWUTS | CLONE_NEWCGROUP;
  arguments.exit_signal = SIGCHLD;
  // As root, the sandbox's user namespace is created *by its guest root's host uid*: the kernel
  // charges what a namespace's processes hold in the per-user pools (inotify instances and
  // watches, pending signals, message queues, locked shared memory) to the namespace's creator
  // as well, so each sandbox draws on a pool of its own instead of on host root's.
  if (privileged && ::setresuid(static_cast<uid_t>(-1), config.uid_base, 0) != 0) {
    fail("take the guest root's host uid", errno);
  }
  const long pid = sys::clone3_fork(&arguments);
  if (pid == 0) {
    ::close(release[1]);
    run_init(config, handles);
  }
  const int clone_error = errno;
  if (privileged && ::setresuid(static_cast<uid_t>(-1), 0, 0) != 0) {
    fail("become root again", errno);
  }
  if (pid < 0) fail("clone the init into new namespaces", clone_error);
  report_step("namespaces (clone)");
  ::close(release[0]);
  write_identity_maps(static_cast<pid_t>(pid), config);
  report_step("id maps");
  report_init_pid(pid);
  if (::write(release[1], "1", 1) != 1) fail("release the init", errno);
  // The init now belongs to whoever adopts orphans here; the sandbox outlives this process on
  // purpose (that is what makes it durable).
  ::_exit(0);
}

// Standby: started ahead of need, so that the spawn and the cgroup joins (a grace period of
// the kernel's cgroup lock, each time) are paid before a sandbox is asked for. Descriptor 3 is a
// unix socket pair to the library:
//   1. a message of cgroup.procs paths: joined, answered with one byte ('j'; 'e' on failure);
//   2. a message carrying the sandbox's descriptors (config, status, control[, pin]): from here
//      on, exactly a monitor started with them.
// End of stream on either step (the library discarded the standby, or died) ends it; so does
// the death of the parent that started it (PR_SET_PDEATHSIG).
[[noreturn]] void run_standby(pid_t parent) {
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || ::getppid() != parent) ::_exit(0);
  const int channel = ::fcntl(3, F_DUPFD_CLOEXEC, 20);
  if (channel < 0) ::_exit(1);
  ::close(3);
  std::string bytes;
  std::vector<base::UniqueFd> fds;
  if (protocol::receive_message(channel, bytes, fds, 64 * 1024) <= 0) ::_exit(0);
  wire::Reader reader(bytes);
  const std::vector<std::string> procs = reader.strings(16);
  char answer = 'j';
  if (!reader.finished()) answer = 'e';
  for (const auto& path : procs) {
    if (answer != 'j') break;
    base::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd || ::write(fd.get(), "0", 1) != 1) answer = 'e';
  }
  if (::write(channel, &answer, 1) != 1 || answer != 'j') ::_exit(1);
  if (protocol::receive_message(channel, bytes, fds, 1024) <= 0 || fds.size() < 3 ||
      fds.size() > 5) {
    ::_exit(0);
  }
  // Where each descriptor goes, as the library says; only the numbers a monitor knows.
  wire::Reader where(bytes);
  const std::vector<std::string> numbers = where.strings(8);
  if (!where.finished() || numbers.size() != fds.size()) ::_exit(1);
  std::vector<int> targets;
  for (const auto& number : numbers) {
    const int target = std::atoi(number.c_str());
    if (target < kConfigFd || target > kIdSlotFd) ::_exit(1);
    targets.push_back(target);
  }
  // Park the descriptors above the targets, then place them where a monitor expects them.
  std::vector<int> parked;
  for (auto& fd : fds) {
    const int moved = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, 30);
    if (moved < 0) ::_exit(1);
    parked.push_back(moved);
  }
  fds.clear();
  for (std::size_t i = 0; i < parked.size(); ++i) {
    if (::dup2(parked[i], targets[i]) != targets[i]) ::_exit(1);
    ::close(parked[i]);
  }
  ::close(channel);
  run_monitor(true);
}

}  // namespace
}  // namespace airlock::linux_backend::init

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--files") == 0) {
    airlock::linux_backend::serve_file_agent();
  }
  if (argc == 3 && std::strcmp(argv[1], "--standby") == 0) {
    airlock::linux_backend::init::run_standby(static_cast<pid_t>(std::atol(argv[2])));
  }
  if (argc != 2 || std::strcmp(argv[1], "--sandbox") != 0) {
    std::fprintf(stderr,
                 "airlock-init: this helper is started by the airlock library, not by hand\n");
    return 2;
  }
  struct stat info {};
  for (int fd : {airlock::linux_backend::kConfigFd, airlock::linux_backend::kStatusFd,
                 airlock::linux_backend::kControlFd}) {
    if (::fstat(fd, &info) != 0) {
      std::fprintf(stderr, "airlock-init: descriptor %d is not open\n", fd);
      return 2;
    }
  }
  airlock::linux_backend::init::run_monitor(false);
}
