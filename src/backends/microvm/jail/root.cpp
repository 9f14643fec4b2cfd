#include "backends/microvm/jail/root.hpp"

#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "backends/microvm/jail/report.hpp"
#include "base/openat2.hpp"
#include "base/unique_fd.hpp"

namespace airlock::microvm_jail {
namespace {

using base::UniqueFd;

// Where the new root is attached before the pivot: a directory every system has. Its tmpfs
// covers it only inside the warden's mount namespace, and only until the pivot.
constexpr const char* kStaging = "/tmp";

// The top-level system paths a dynamically linked program is looked up through. /usr is
// required; the others are recreated as the host has them (link, directory) or left out.
constexpr const char* kSystemPaths[] = {"/usr",   "/bin",   "/sbin",  "/lib",
                                        "/lib32", "/lib64", "/libx32"};

constexpr std::uint64_t kReadOnly = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
constexpr std::uint64_t kReadWrite = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;

// A detached copy of a host mount tree, made before the new root covers anything, and where it
// goes in the new root.
struct Bind {
  std::string path;  // absolute, the same outside and inside
  UniqueFd tree;
  bool directory = true;
};

std::string relative(const std::string& absolute) {
  const auto first = absolute.find_first_not_of('/');
  return first == std::string::npos ? std::string(".") : absolute.substr(first);
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

void set_attributes(int tree, std::uint64_t set, bool recursive, const std::string& step) {
  mount_attr attributes{};
  attributes.attr_set = set;
  attributes.propagation = MS_PRIVATE;
  if (::mount_setattr(tree, "", AT_EMPTY_PATH | (recursive ? AT_RECURSIVE : 0), &attributes,
                      sizeof attributes) != 0) {
    fail(step, errno);
  }
}

// A detached, recursive copy of the mounts at `path`, with `attributes` on every mount of it.
Bind clone_tree(const std::string& path, std::uint64_t attributes, bool recursive) {
  Bind bind;
  bind.path = path;
  bind.tree.reset(
      ::open_tree(AT_FDCWD, path.c_str(),
                  OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | (recursive ? AT_RECURSIVE : 0)));
  if (!bind.tree) fail("open_tree " + path, errno);
  struct stat info {};
  if (::fstat(bind.tree.get(), &info) != 0) fail("stat " + path, errno);
  bind.directory = S_ISDIR(info.st_mode);
  if (!bind.directory && !S_ISREG(info.st_mode) && !S_ISCHR(info.st_mode)) {
    fail("bind " + path + ": neither a directory, a file nor a character device", EINVAL);
  }
  set_attributes(bind.tree.get(), attributes, recursive, "mount_setattr " + path);
  return bind;
}

// A new, detached file system of `type` with `options` (key=value, or a bare key for a flag).
UniqueFd new_filesystem(const char* type,
                        const std::vector<std::pair<const char*, const char*>>& options,
                        std::uint64_t attributes, const std::string& step) {
  UniqueFd context(::fsopen(type, FSOPEN_CLOEXEC));
  if (!context) fail(step + ": fsopen", errno);
  for (const auto& [key, value] : options) {
    const int command = value != nullptr ? FSCONFIG_SET_STRING : FSCONFIG_SET_FLAG;
    if (::fsconfig(context.get(), command, key, value, 0) != 0) {
      fail(step + ": fsconfig " + key, errno);
    }
  }
  if (::fsconfig(context.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) {
    fail(step + ": fsconfig create", errno);
  }
  UniqueFd mount(::fsmount(context.get(), FSMOUNT_CLOEXEC, static_cast<unsigned>(attributes)));
  if (!mount) fail(step + ": fsmount", errno);
  return mount;
}

// Creates what is missing of `path` beneath `root` (directories 0755, the last one a directory
// or an empty file), never through a link, and returns an O_PATH descriptor of it. What exists
// must already be of the kind asked for: a directory is never bound over a file.
UniqueFd mount_point(int root, const std::string& path, bool directory, const std::string& step) {
  const auto parts = components(path);
  UniqueFd current(::fcntl(root, F_DUPFD_CLOEXEC, 0));
  if (!current) fail(step, errno);
  for (std::size_t index = 0; index < parts.size(); ++index) {
    const char* part = parts[index].c_str();
    const bool last = index + 1 == parts.size();
    const bool want_directory = !last || directory;
    auto next = base::openat2(current.get(), part, O_PATH | (want_directory ? O_DIRECTORY : 0),
                              base::kResolveConfined);
    if (next.error == ENOENT) {
      if (want_directory) {
        if (::mkdirat(current.get(), part, 0755) != 0 && errno != EEXIST) {
          fail(step + ": mkdir " + parts[index], errno);
        }
      } else {
        UniqueFd file(::openat(current.get(), part,
                               O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
        if (!file) fail(step + ": create " + parts[index], errno);
      }
      next = base::openat2(current.get(), part, O_PATH | (want_directory ? O_DIRECTORY : 0),
                           base::kResolveConfined);
    }
    if (!next) fail(step + ": " + parts[index], next.error);
    if (last && !directory) {
      struct stat info {};
      if (::fstat(next.fd.get(), &info) != 0) fail(step, errno);
      if (S_ISDIR(info.st_mode)) fail(step + ": a directory is in the way", EISDIR);
    }
    current = std::move(next.fd);
  }
  return current;
}

void attach(int tree, int target, const std::string& step) {
  if (::move_mount(tree, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) != 0) {
    fail(step, errno);
  }
}

void symlink_beneath(int root, const char* target, const std::string& path,
                     const std::string& step) {
  if (::symlinkat(target, root, relative(path).c_str()) != 0) fail(step, errno);
}

// The system paths, each as the host has it: a link is recreated (a merged-/usr system's
// /lib -> usr/lib), a directory becomes a read-only bind, an absent one is left out.
void collect_system(std::vector<Bind>& binds,
                    std::vector<std::pair<std::string, std::string>>& links) {
  for (const char* path : kSystemPaths) {
    struct stat info {};
    if (::lstat(path, &info) != 0) {
      if (errno == ENOENT && std::string_view(path) != "/usr") continue;
      fail(std::string("lstat ") + path, errno);
    }
    if (S_ISLNK(info.st_mode)) {
      char target[4096];
      const ssize_t size = ::readlink(path, target, sizeof target);
      if (size < 0) fail(std::string("readlink ") + path, errno);
      if (static_cast<std::size_t>(size) >= sizeof target) {
        fail(std::string("readlink ") + path, ENAMETOOLONG);
      }
      links.emplace_back(path, std::string(target, static_cast<std::size_t>(size)));
    } else if (S_ISDIR(info.st_mode)) {
      binds.push_back(clone_tree(path, kReadOnly, true));
    } else {
      fail(std::string("system path ") + path + ": neither a directory nor a link", ENOTDIR);
    }
  }
}

void build_dev(int root, const Options& options) {
  UniqueFd point = mount_point(root, "/dev", true, "mount point /dev");
  UniqueFd dev =
      new_filesystem("tmpfs", {{"size", "64k"}, {"nr_inodes", "64"}, {"mode", "0755"}},
                     MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, "mount /dev");
  attach(dev.get(), point.get(), "attach /dev");
  // Each node keeps the host's inode (so its owner and mode are the host's: /dev/kvm is used
  // only if the host grants the program's uid or gid), on a bind of its own that nothing else
  // of the host's /dev comes with.
  for (const auto& name : options.devices) {
    const std::string host = "/dev/" + name;
    struct stat info {};
    if (::stat(host.c_str(), &info) != 0) fail("stat " + host, errno);
    if (!S_ISCHR(info.st_mode)) fail(host + ": not a character device", ENODEV);
    Bind node = clone_tree(host, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false);
    UniqueFd target = mount_point(dev.get(), "/" + name, false, "mount point " + host);
    attach(node.tree.get(), target.get(), "bind " + host);
  }
  symlink_beneath(dev.get(), "/proc/self/fd", "/fd", "link /dev/fd");
  symlink_beneath(dev.get(), "/proc/self/fd/0", "/stdin", "link /dev/stdin");
  symlink_beneath(dev.get(), "/proc/self/fd/1", "/stdout", "link /dev/stdout");
  symlink_beneath(dev.get(), "/proc/self/fd/2", "/stderr", "link /dev/stderr");
  set_attributes(dev.get(), MOUNT_ATTR_RDONLY, false, "read-only /dev");
}

void pivot(int root) {
  if (::fchdir(root) != 0) fail("chdir into the new root", errno);
  // pivot_root(".", "."): the old root is stacked on the new one, and detached at once.
  if (::syscall(SYS_pivot_root, ".", ".") != 0) fail("pivot_root", errno);
  if (::umount2(".", MNT_DETACH) != 0) fail("detach the host's root", errno);
  if (::chdir("/") != 0) fail("chdir /", errno);
}

}  // namespace

void enter_root(const Options& options) {
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    fail("make every mount private", errno);
  }

  // Every host tree is cloned before the new root covers the staging directory, so a --ro path
  // below it is still the host's.
  std::vector<Bind> binds;
  std::vector<std::pair<std::string, std::string>> links;
  collect_system(binds, links);
  for (const auto& path : options.read_only) binds.push_back(clone_tree(path, kReadOnly, true));
  for (const auto& path : options.read_write) binds.push_back(clone_tree(path, kReadWrite, true));
  // A parent before its children (a prefix sorts first), so a nested bind lands on the outer one.
  std::stable_sort(binds.begin(), binds.end(), [](const Bind& left, const Bind& right) {
    return components(left.path) < components(right.path);
  });

  UniqueFd root = new_filesystem("tmpfs", {{"size", "1m"}, {"nr_inodes", "1024"}, {"mode", "0755"}},
                                 MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, "mount the new root");
  {
    UniqueFd staging(::open(kStaging, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!staging) fail(std::string("open ") + kStaging, errno);
    attach(root.get(), staging.get(), std::string("attach the new root at ") + kStaging);
  }

  for (const auto& [path, target] : links) {
    symlink_beneath(root.get(), target.c_str(), path, "link " + path);
  }
  build_dev(root.get(), options);
  {
    UniqueFd point = mount_point(root.get(), "/proc", true, "mount point /proc");
    UniqueFd proc =
        new_filesystem("proc", {{"hidepid", "invisible"}, {"subset", "pid"}},
                       MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, "mount /proc");
    attach(proc.get(), point.get(), "attach /proc");
  }
  {
    UniqueFd point = mount_point(root.get(), "/tmp", true, "mount point /tmp");
    UniqueFd tmp =
        new_filesystem("tmpfs", {{"size", "4m"}, {"nr_inodes", "256"}, {"mode", "1777"}},
                       MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, "mount /tmp");
    attach(tmp.get(), point.get(), "attach /tmp");
  }
  for (auto& bind : binds) {
    // Looked up afresh: a descriptor opened before an outer bind names what that bind covers.
    UniqueFd target =
        mount_point(root.get(), bind.path, bind.directory, "mount point " + bind.path);
    attach(bind.tree.get(), target.get(), "bind " + bind.path);
    bind.tree.reset();
  }

  pivot(root.get());
  root.reset();
  // The root tmpfs only (not recursive): nothing can be created beside the binds.
  mount_attr attributes{};
  attributes.attr_set = MOUNT_ATTR_RDONLY;
  if (::mount_setattr(AT_FDCWD, "/", 0, &attributes, sizeof attributes) != 0) {
    fail("read-only /", errno);
  }
}

}  // namespace airlock::microvm_jail
