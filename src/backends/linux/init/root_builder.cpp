#include "backends/linux/init/root_builder.hpp"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "backends/linux/init/report.hpp"
#include "backends/linux/syscalls.hpp"
#include "backends/linux/unique_fd.hpp"

namespace airlock::linux_backend::init {
namespace {

// Never bound from the host: each is replaced by something of the sandbox's own, or is useless.
constexpr const char* kNotFromHost[] = {"proc", "sys", "dev", "tmp", "run", "lost+found"};

bool is_not_from_host(const char* name) {
  for (const char* excluded : kNotFromHost) {
    if (std::string(name) == excluded) return true;
  }
  return false;
}

void must_mount(const std::string& source, const std::string& target, const char* type,
                unsigned long flags, const std::string& data, const std::string& step) {
  if (::mount(source.empty() ? nullptr : source.c_str(), target.c_str(), type, flags,
              data.empty() ? nullptr : data.c_str()) != 0) {
    fail(step, errno);
  }
}

std::string fd_path(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

// Changes the flags of the mount whose root is at `relative` beneath `root_fd`. A descriptor
// opened before the mount names the directory underneath it, so the path is looked up afresh.
void remount(int root_fd, const std::string& relative, unsigned long flags,
             const std::string& step) {
  const std::string path = relative.substr(relative.find_first_not_of('/'));
  UniqueFd target(sys::openat2(root_fd, path.c_str(), O_PATH | O_CLOEXEC, 0,
                               sys::kResolveConfined));
  if (!target) fail(step, errno);
  must_mount("", fd_path(target.get()), nullptr, MS_REMOUNT | MS_BIND | flags, "", step);
}

std::vector<std::string> components(const std::string& absolute) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start < absolute.size()) {
    std::size_t end = absolute.find('/', start);
    if (end == std::string::npos) end = absolute.size();
    if (end > start) parts.push_back(absolute.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

// Walks `guest_path` beneath `root_fd` without following any link, creating what is missing
// (mode 0755, owned by `owner` when owner != -1). Returns an O_PATH descriptor of the last
// component. A link or a non-directory on the way fails the step.
UniqueFd ensure_directory(int root_fd, const std::string& guest_path, int owner,
                          const std::string& step) {
  UniqueFd current(::fcntl(root_fd, F_DUPFD_CLOEXEC, 0));
  if (!current) fail(step, errno);
  for (const auto& part : components(guest_path)) {
    int next = sys::openat2(current.get(), part.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC, 0,
                            sys::kResolveConfined);
    if (next < 0 && errno == ENOENT) {
      if (::mkdirat(current.get(), part.c_str(), 0755) != 0 && errno != EEXIST) {
        fail(step + ": mkdir " + part, errno);
      }
      next = sys::openat2(current.get(), part.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC, 0,
                          sys::kResolveConfined);
      if (next >= 0 && owner != -1 &&
          ::fchownat(next, "", static_cast<uid_t>(owner), static_cast<gid_t>(owner),
                     AT_EMPTY_PATH) != 0) {
        const int error = errno;
        ::close(next);
        fail(step + ": chown " + part, error);
      }
    }
    if (next < 0) fail(step + ": " + part, errno);
    current.reset(next);
  }
  return current;
}

UniqueFd open_root(const SpawnConfig& config) {
  UniqueFd root(::open(config.root_mount.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root) fail("open the root mount", errno);
  return root;
}

void bind_host_root(const SpawnConfig& config) {
  const std::string& root = config.root_mount;
  DIR* host = ::opendir("/");
  if (host == nullptr) fail("list the host root", errno);
  while (struct dirent* entry = ::readdir(host)) {
    const std::string name = entry->d_name;
    if (name == "." || name == ".." || is_not_from_host(name.c_str())) continue;
    struct stat info {};
    if (::fstatat(::dirfd(host), name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) continue;
    const std::string target = root + "/" + name;
    if (S_ISDIR(info.st_mode)) {
      if (::mkdir(target.c_str(), 0755) != 0) fail("mkdir /" + name, errno);
      must_mount("/" + name, target, nullptr, MS_BIND | MS_REC, "", "bind /" + name);
    } else if (S_ISLNK(info.st_mode)) {
      char link[4096];
      const ssize_t length = ::readlinkat(::dirfd(host), name.c_str(), link, sizeof link - 1);
      if (length < 0) continue;
      link[length] = '\0';
      if (::symlink(link, target.c_str()) != 0) fail("link /" + name, errno);
    }
    // Top-level regular files (markers such as .dockerenv) are host furniture; not carried.
  }
  ::closedir(host);
}

void make_read_only(const std::string& target, bool recursive, const std::string& step) {
  struct mount_attr attributes {};
  attributes.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  if (sys::mount_setattr(AT_FDCWD, target.c_str(), recursive ? AT_RECURSIVE : 0, &attributes) !=
      0) {
    fail(step, errno);
  }
}

void hide_paths(const SpawnConfig& config, int root_fd) {
  for (const auto& hidden : config.hidden_paths) {
    const std::string relative = hidden.substr(hidden.find_first_not_of('/'));
    if (relative.empty()) continue;
    UniqueFd target(sys::openat2(root_fd, relative.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC, 0,
                                 sys::kResolveConfined));
    if (!target) continue;  // not visible in this root: nothing to hide
    must_mount("tmpfs", fd_path(target.get()), "tmpfs",
               MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0000,size=4k",
               "hide a state directory");
  }
}

void mount_scratch(int root_fd, const char* name, const char* mode, int owner) {
  UniqueFd directory = ensure_directory(root_fd, name, owner, std::string("/") + name);
  must_mount("tmpfs", fd_path(directory.get()), "tmpfs", MS_NOSUID | MS_NODEV,
             std::string("mode=") + mode, std::string("tmpfs /") + name);
}

void build_dev(int root_fd, int owner) {
  UniqueFd dev = ensure_directory(root_fd, "dev", owner, "/dev");
  const std::string dev_path = fd_path(dev.get());
  must_mount("tmpfs", dev_path, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k",
             "tmpfs /dev");
  // Re-open: the descriptor above names the directory *under* the new tmpfs.
  dev.reset(sys::openat2(root_fd, "dev", O_PATH | O_DIRECTORY | O_CLOEXEC, 0,
                         sys::kResolveConfined));
  if (!dev) fail("open /dev", errno);
  for (const char* node : {"null", "zero", "full", "random", "urandom", "tty"}) {
    UniqueFd placeholder(::openat(dev.get(), node, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0666));
    if (!placeholder) fail(std::string("create /dev/") + node, errno);
    UniqueFd mountpoint(::openat(dev.get(), node, O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!mountpoint) fail(std::string("open /dev/") + node, errno);
    must_mount(std::string("/dev/") + node, fd_path(mountpoint.get()), nullptr, MS_BIND, "",
               std::string("bind /dev/") + node);
  }
  const std::pair<const char*, const char*> links[] = {{"fd", "/proc/self/fd"},
                                                      {"stdin", "/proc/self/fd/0"},
                                                      {"stdout", "/proc/self/fd/1"},
                                                      {"stderr", "/proc/self/fd/2"},
                                                      {"ptmx", "pts/ptmx"}};
  for (const auto& [name, target] : links) {
    if (::symlinkat(target, dev.get(), name) != 0) fail(std::string("link /dev/") + name, errno);
  }
  for (const char* name : {"shm", "pts"}) {
    if (::mkdirat(dev.get(), name, 0755) != 0) fail(std::string("mkdir /dev/") + name, errno);
  }
  UniqueFd shm(::openat(dev.get(), "shm", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!shm) fail("open /dev/shm", errno);
  must_mount("tmpfs", fd_path(shm.get()), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777",
             "tmpfs /dev/shm");
  UniqueFd pts(::openat(dev.get(), "pts", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!pts) fail("open /dev/pts", errno);
  must_mount("devpts", fd_path(pts.get()), "devpts", MS_NOSUID | MS_NOEXEC,
             "newinstance,ptmxmode=0666,mode=620", "devpts /dev/pts");
  remount(root_fd, "dev", MS_RDONLY | MS_NOSUID | MS_NOEXEC, "make /dev read-only");
}

void bind_egress(const SpawnConfig& config, int root_fd) {
  if ((config.flags & kEgressBridge) == 0) return;
  UniqueFd directory = ensure_directory(root_fd, "run/airlock", -1, "/run/airlock");
  must_mount(config.egress_dir, fd_path(directory.get()), nullptr, MS_BIND, "",
             "bind /run/airlock");
  remount(root_fd, "run/airlock", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
          "make /run/airlock read-only");
}

// As root the monitor builds the root with host ids, so what it creates is handed to the guest
// root explicitly; unprivileged, the builder already *is* the guest root.
int guest_root_owner(const SpawnConfig& config) {
  return (config.flags & kMapFullRange) != 0 ? static_cast<int>(config.uid_base) : -1;
}

void build_host_root(const SpawnConfig& config) {
  const std::string& root = config.root_mount;
  must_mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m", "tmpfs /");
  bind_host_root(config);
  for (const char* name : {"proc", "sys", "dev", "tmp", "run"}) {
    if (::mkdir((root + "/" + name).c_str(), 0755) != 0) fail(std::string("mkdir /") + name, errno);
  }
  UniqueFd root_fd = open_root(config);
  const auto parts = components(config.guest_work_dir);
  if (parts.empty()) fail("work_dir", EINVAL);
  // A work dir whose first component the host root lacks: that component is made in the root
  // tmpfs now (while it is writable) and the work storage is bound there below.
  bool scratch_parent = false;
  {
    struct stat info {};
    if (::fstatat(root_fd.get(), parts.front().c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) {
      if (::mkdirat(root_fd.get(), parts.front().c_str(), 0755) != 0) {
        fail("work_dir mount point", errno);
      }
      scratch_parent = true;
    }
  }
  make_read_only(root, true, "make the host root read-only");
  hide_paths(config, root_fd.get());
  mount_scratch(root_fd.get(), "tmp", "1777", -1);
  mount_scratch(root_fd.get(), "run", "0755", -1);
  if (scratch_parent) {
    // The work storage becomes the new top-level directory itself, and the work dir is made
    // inside it: the work dir and its neighbours share one (disk) filesystem, as in an image.
    UniqueFd parent = ensure_directory(root_fd.get(), parts.front(), -1, "work_dir parent");
    must_mount(config.work_storage, fd_path(parent.get()), nullptr, MS_BIND, "",
               "bind the work storage");
    remount(root_fd.get(), parts.front(), MS_NOSUID | MS_NODEV, "work storage mount flags");
    (void)ensure_directory(root_fd.get(), config.guest_work_dir, guest_root_owner(config),
                           "work_dir " + config.guest_work_dir);
  } else {
    // Inside /tmp or /run (or an existing host directory) the mount point is made now; the
    // storage is bound at the work dir itself.
    UniqueFd work = ensure_directory(root_fd.get(), config.guest_work_dir, -1,
                                     "work_dir " + config.guest_work_dir);
    must_mount(config.work_storage, fd_path(work.get()), nullptr, MS_BIND, "",
               "bind the work dir");
    remount(root_fd.get(), config.guest_work_dir, MS_NOSUID | MS_NODEV, "work dir mount flags");
  }
  build_dev(root_fd.get(), -1);
  bind_egress(config, root_fd.get());
}

void build_image_root(const SpawnConfig& config) {
  const std::string options = "lowerdir=" + config.lower_dir + ",upperdir=" + config.upper_dir +
                              ",workdir=" + config.overlay_work_dir +
                              ((config.flags & kMapFullRange) == 0 ? ",userxattr" : "");
  must_mount("overlay", config.root_mount, "overlay", MS_NOSUID | MS_NODEV, options,
             "overlay root");
  UniqueFd root_fd = open_root(config);
  const int owner = guest_root_owner(config);
  for (const char* name : {"proc", "sys"}) {
    (void)ensure_directory(root_fd.get(), name, owner, std::string("/") + name);
  }
  mount_scratch(root_fd.get(), "tmp", "1777", owner);
  mount_scratch(root_fd.get(), "run", "0755", owner);
  (void)ensure_directory(root_fd.get(), config.guest_work_dir, owner,
                         "work_dir " + config.guest_work_dir);
  build_dev(root_fd.get(), owner);
  bind_egress(config, root_fd.get());
}

}  // namespace

void build_root(const SpawnConfig& config) {
  if (config.root_kind == RootKind::host) {
    build_host_root(config);
  } else if (config.root_kind == RootKind::directory) {
    build_image_root(config);
  } else {
    fail("root kind", EINVAL);
  }
}

}  // namespace airlock::linux_backend::init
