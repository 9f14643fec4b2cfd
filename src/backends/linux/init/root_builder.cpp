#include "backends/linux/init/root_builder.hpp"

#include <errno.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "backends/linux/init/report.hpp"
#include "backends/linux/snapshot_stream.hpp"
#include "backends/linux/syscalls.hpp"
#include "base/openat2.hpp"

namespace airlock::linux_backend::init {
namespace {

void must_mount(const std::string& source, const std::string& target, const char* type,
                unsigned long flags, const std::string& data, const std::string& step) {
  if (::mount(source.empty() ? nullptr : source.c_str(), target.c_str(), type, flags,
              data.empty() ? nullptr : data.c_str()) != 0) {
    fail(step, errno);
  }
}

std::string relative(const std::string& absolute) {
  const auto first = absolute.find_first_not_of('/');
  return first == std::string::npos ? std::string() : absolute.substr(first);
}

// An O_PATH descriptor of `path` beneath `dir`, never through a link. A descriptor opened before
// a mount names the directory *under* it, so callers look paths up afresh after mounting.
base::UniqueFd open_beneath(int dir, const std::string& path, const std::string& step) {
  auto opened =
      base::openat2(dir, path.empty() ? "." : path.c_str(), O_PATH, base::kResolveConfined);
  if (!opened) fail(step, opened.error);
  return std::move(opened.fd);
}

// Changes the flags of the mount whose root is at `path` beneath `root`.
void remount(int root, const std::string& path, unsigned long flags, const std::string& step) {
  base::UniqueFd target = open_beneath(root, relative(path), step);
  must_mount("", fd_path(target.get()), nullptr, MS_REMOUNT | MS_BIND | flags, "", step);
}

void bind(int source, int root, const std::string& target_path, unsigned long extra_flags,
          const std::string& step) {
  base::UniqueFd target = open_beneath(root, relative(target_path), step);
  must_mount(fd_path(source), fd_path(target.get()), nullptr, MS_BIND, "", step);
  if (extra_flags != 0) remount(root, target_path, extra_flags, step + " (flags)");
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

// Walks `path` beneath `dir` without following any link, creating what is missing (mode 0755,
// owned by `owner` when owner != -1). Returns an O_PATH descriptor of the last component.
base::UniqueFd ensure_directory(int dir, const std::string& path, int owner,
                                const std::string& step) {
  base::UniqueFd current(::fcntl(dir, F_DUPFD_CLOEXEC, 0));
  if (!current) fail(step, errno);
  for (const auto& part : components(path)) {
    auto next =
        base::openat2(current.get(), part.c_str(), O_PATH | O_DIRECTORY, base::kResolveConfined);
    if (next.error == ENOENT) {
      if (::mkdirat(current.get(), part.c_str(), 0755) != 0 && errno != EEXIST) {
        fail(step + ": mkdir " + part, errno);
      }
      next =
          base::openat2(current.get(), part.c_str(), O_PATH | O_DIRECTORY, base::kResolveConfined);
      if (next && owner != -1 &&
          ::fchownat(next.fd.get(), "", static_cast<uid_t>(owner), static_cast<gid_t>(owner),
                     AT_EMPTY_PATH) != 0) {
        fail(step + ": chown " + part, errno);
      }
    }
    if (!next) fail(step + ": " + part, next.error);
    current = std::move(next.fd);
  }
  return current;
}

// A directory of exactly `mode` (whatever the umask), owned by `owner` unless owner == -1.
void make_directory(int dir, const char* name, mode_t mode, int owner, const std::string& step) {
  if (::mkdirat(dir, name, 0700) != 0) fail(step, errno);
  if (owner != -1 && ::fchownat(dir, name, static_cast<uid_t>(owner), static_cast<gid_t>(owner),
                                AT_SYMLINK_NOFOLLOW) != 0) {
    fail(step + ": chown", errno);
  }
  if (::fchmodat(dir, name, mode, 0) != 0) fail(step + ": chmod", errno);
}

// As root the monitor builds with host ids, so what it creates is handed to the guest root
// explicitly; unprivileged, the builder already *is* the guest root.
bool privileged(const SpawnConfig& config) { return (config.flags & kMapFullRange) != 0; }
int guest_root_owner(const SpawnConfig& config) {
  return privileged(config) ? static_cast<int>(config.uid_base) : -1;
}

// A resumed sandbox's storage: what the snapshot's stream holds, before anything is mounted on
// it (the overlay reads its upper layer whole when mounted, and no guest exists yet). The
// stream's descriptor is closed here, so neither the init nor any command ever holds it.
void restore_snapshot(const SpawnConfig& config, int storage) {
  std::vector<base::UniqueFd> held;
  std::vector<snapshot_stream::Destination> destinations;
  const char* kept = config.root_kind == RootKind::host ? "work" : "upper";
  for (const char* name : {kept, "tmp"}) {
    held.push_back(open_beneath(storage, name, std::string("open storage/") + name));
    destinations.push_back({name, held.back().get()});
  }
  snapshot_stream::IdRange ids;
  ids.base = privileged(config) ? config.uid_base : 0;
  ids.count = config.id_count;
  const snapshot_stream::Outcome restored =
      snapshot_stream::restore(kSnapshotFd, destinations, ids);
  ::close(kSnapshotFd);
  if (!restored) fail("restore the snapshot: " + restored.what, restored.error);
}

base::UniqueFd mount_storage(const SpawnConfig& config, int sandbox) {
  base::UniqueFd point = open_beneath(sandbox, "storage", "the storage mount point");
  // uid/gid are read in the mounter's user namespace: the guest root is uid_base on the host,
  // and 0 inside the init's own namespace.
  const unsigned owner = privileged(config) ? config.uid_base : 0;
  const std::string options = "size=" + std::to_string(config.storage_bytes) +
                              ",nr_inodes=" + std::to_string(config.storage_inodes) +
                              ",mode=0755,uid=" + std::to_string(owner) +
                              ",gid=" + std::to_string(owner);
  // huge=within_size: a file of 2 MiB and more is held in huge pages where the kernel can
  // find them (an 8 MiB write_file runs ~8x faster than on 4 KiB pages; measured in
  // `airlock bench --only linux`); smaller files, most of them, stay on small pages, so nothing
  // is wasted. Every page still counts against size= and the memory cgroup. A kernel without
  // transparent huge pages refuses the option: the storage is then mounted without it.
  if (::mount("tmpfs", fd_path(point.get()).c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
              (options + ",huge=within_size").c_str()) != 0) {
    if (errno != EINVAL) fail("mount the sandbox's storage", errno);
    must_mount("tmpfs", fd_path(point.get()), "tmpfs", MS_NOSUID | MS_NODEV, options,
               "mount the sandbox's storage");
  }
  base::UniqueFd storage = open_beneath(sandbox, "storage", "open the sandbox's storage");
  const int guest = guest_root_owner(config);
  make_directory(storage.get(), "tmp", 01777, guest, "storage /tmp");
  make_directory(storage.get(), "run", 0755, guest, "storage /run");
  make_directory(storage.get(), "shm", 01777, guest, "storage /dev/shm");
  // Not the guest's: as root it stays host root's (nobody inside, so the guest cannot plant
  // anything in it); unprivileged it is protected by its read-only bind — and on subordinate
  // ids, where the host user is not its owner, open to the host user through the storage
  // descriptor (the guest only ever sees the read-only bind).
  make_directory(storage.get(), "host-tools", (config.flags & kSubordinateIds) != 0 ? 0777 : 0755,
                 -1, "storage host-tools");
  if (config.root_kind == RootKind::host) {
    make_directory(storage.get(), "work", 0755, guest, "storage work");
  } else {
    make_directory(storage.get(), "upper", 0755, guest, "storage overlay upper");
    make_directory(storage.get(), "ovl-work", 0700, -1, "storage overlay work");
  }
  if ((config.flags & kFromSnapshot) != 0) restore_snapshot(config, storage.get());
  return storage;
}

base::UniqueFd open_root(int sandbox) {
  return open_beneath(sandbox, "root", "open the root mount");
}

base::UniqueFd storage_entry(int storage, const char* name) {
  return open_beneath(storage, name, std::string("open storage/") + name);
}

void hide_paths(const SpawnConfig& config, int root_fd) {
  for (const auto& hidden : config.hidden_paths) {
    const std::string path = relative(hidden);
    if (path.empty()) continue;
    const base::UniqueFd target =
        base::openat2(root_fd, path.c_str(), O_PATH | O_DIRECTORY, base::kResolveConfined).fd;
    if (!target) continue;  // not visible in this root: nothing to hide
    must_mount("tmpfs", fd_path(target.get()), "tmpfs",
               MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0000,size=4k",
               "hide a state directory");
  }
}

void build_dev(const SpawnConfig& config, int root_fd, int storage) {
  const int owner = -1;  // /dev belongs to nobody the guest could be
  base::UniqueFd dev = ensure_directory(root_fd, "dev", owner, "/dev");
  must_mount("tmpfs", fd_path(dev.get()), "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k",
             "tmpfs /dev");
  dev = open_beneath(root_fd, "dev", "open /dev");
  for (const char* node : {"null", "zero", "full", "random", "urandom", "tty"}) {
    base::UniqueFd placeholder(
        ::openat(dev.get(), node, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0666));
    if (!placeholder) fail(std::string("create /dev/") + node, errno);
    base::UniqueFd mountpoint(::openat(dev.get(), node, O_PATH | O_NOFOLLOW | O_CLOEXEC));
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
  base::UniqueFd shm = storage_entry(storage, "shm");
  bind(shm.get(), root_fd, "dev/shm", MS_NOSUID | MS_NODEV | MS_NOEXEC, "bind /dev/shm");
  base::UniqueFd pts(::openat(dev.get(), "pts", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!pts) fail("open /dev/pts", errno);
  // A private instance with a ceiling of its own: the kernel's pty pool (kernel.pty.max) is
  // shared by every devpts instance, so one sandbox may never take more than max_ptys of it.
  must_mount("devpts", fd_path(pts.get()), "devpts", MS_NOSUID | MS_NOEXEC,
             "newinstance,ptmxmode=0666,mode=620,max=" + std::to_string(config.max_ptys),
             "devpts /dev/pts");
  remount(root_fd, "dev", MS_RDONLY | MS_NOSUID | MS_NOEXEC, "make /dev read-only");
}

// The host-tool socket directory, after /run is the sandbox's own.
void bind_host_tools(int root_fd, int storage) {
  const std::string guest = kHostToolsGuestDir;
  (void)ensure_directory(root_fd, guest, -1, guest);
  base::UniqueFd source = storage_entry(storage, "host-tools");
  bind(source.get(), root_fd, guest, MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
       "bind " + guest);
}

// The documented top-level host directories, read-only; top-level links (/bin → usr/bin) are
// copied as links.
void bind_host_directories(int root_fd) {
  for (const char* name : kHostRootDirectories) {
    struct stat info {};
    if (::lstat((std::string("/") + name).c_str(), &info) != 0) continue;
    if (S_ISDIR(info.st_mode)) {
      if (::mkdirat(root_fd, name, 0755) != 0) fail(std::string("mkdir /") + name, errno);
      base::UniqueFd target = open_beneath(root_fd, name, std::string("open /") + name);
      must_mount(std::string("/") + name, fd_path(target.get()), nullptr, MS_BIND | MS_REC, "",
                 std::string("bind /") + name);
    } else if (S_ISLNK(info.st_mode)) {
      char link[4096];
      const ssize_t length = ::readlink((std::string("/") + name).c_str(), link, sizeof link - 1);
      if (length < 0) continue;
      link[length] = '\0';
      if (::symlinkat(link, root_fd, name) != 0) fail(std::string("link /") + name, errno);
    }
  }
}

void make_read_only(int root_fd, const std::string& step) {
  struct mount_attr attributes {};
  attributes.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  if (sys::mount_setattr(root_fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &attributes) != 0) {
    fail(step, errno);
  }
}

void build_host_root(const SpawnConfig& config, int sandbox, int storage) {
  {
    base::UniqueFd point = open_beneath(sandbox, "root", "the root mount point");
    must_mount("tmpfs", fd_path(point.get()), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m",
               "tmpfs /");
  }
  base::UniqueFd root_fd = open_root(sandbox);
  bind_host_directories(root_fd.get());
  for (const char* name : {"proc", "sys", "dev", "tmp", "run"}) {
    if (::mkdirat(root_fd.get(), name, 0755) != 0) fail(std::string("mkdir /") + name, errno);
  }
  const auto parts = components(config.guest_work_dir);
  if (parts.empty()) fail("work_dir", EINVAL);
  // A work dir whose first component the root lacks: that component is made in the root tmpfs
  // now (while it is writable) and the work storage is bound there below.
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
  make_read_only(root_fd.get(), "make the host root read-only");
  hide_paths(config, root_fd.get());
  {
    base::UniqueFd tmp = storage_entry(storage, "tmp");
    bind(tmp.get(), root_fd.get(), "tmp", MS_NOSUID | MS_NODEV, "bind /tmp");
    base::UniqueFd run = storage_entry(storage, "run");
    bind(run.get(), root_fd.get(), "run", MS_NOSUID | MS_NODEV, "bind /run");
  }
  base::UniqueFd work_storage = storage_entry(storage, "work");
  if (scratch_parent) {
    // The work storage becomes the new top-level directory itself, and the work dir is made
    // inside it: the work dir and its neighbours share one filesystem, as in an image.
    bind(work_storage.get(), root_fd.get(), parts.front(), MS_NOSUID | MS_NODEV,
         "bind the work storage");
    (void)ensure_directory(root_fd.get(), config.guest_work_dir, guest_root_owner(config),
                           "work_dir " + config.guest_work_dir);
  } else {
    // Inside /tmp or /run (or an existing host directory) the mount point is made now; the
    // storage is bound at the work dir itself.
    (void)ensure_directory(root_fd.get(), config.guest_work_dir, -1,
                           "work_dir " + config.guest_work_dir);
    bind(work_storage.get(), root_fd.get(), config.guest_work_dir, MS_NOSUID | MS_NODEV,
         "bind the work dir");
  }
  build_dev(config, root_fd.get(), storage);
  bind_host_tools(root_fd.get(), storage);
}

void build_image_root(const SpawnConfig& config, int sandbox, int storage, int lower) {
  // The merged "/" takes the upper directory's owner and mode: make them the image's own root's
  // (as the lower layer shows them — idmapped already, for a stored image).
  struct stat top {};
  if (::fstat(lower, &top) != 0) fail("stat the image's root", errno);
  if (::fchownat(storage, "upper", top.st_uid, top.st_gid, AT_SYMLINK_NOFOLLOW) != 0 ||
      ::fchmodat(storage, "upper", top.st_mode & 07777, 0) != 0) {
    fail("give the overlay's upper layer the image root's owner", errno);
  }
  // Descriptors, not host paths: the options the guest can read in /proc/self/mountinfo name no
  // place on the host.
  const std::string storage_path = fd_path(storage);
  const std::string options = "lowerdir=" + fd_path(lower) + ",upperdir=" + storage_path +
                              "/upper,workdir=" + storage_path + "/ovl-work" +
                              (privileged(config) ? "" : ",userxattr");
  {
    base::UniqueFd point = open_beneath(sandbox, "root", "the root mount point");
    must_mount("overlay", fd_path(point.get()), "overlay", MS_NOSUID | MS_NODEV, options,
               "overlay root");
  }
  base::UniqueFd root_fd = open_root(sandbox);
  const int owner = guest_root_owner(config);
  for (const char* name : {"proc", "sys", "tmp", "run"}) {
    (void)ensure_directory(root_fd.get(), name, owner, std::string("/") + name);
  }
  {
    base::UniqueFd tmp = storage_entry(storage, "tmp");
    bind(tmp.get(), root_fd.get(), "tmp", MS_NOSUID | MS_NODEV, "bind /tmp");
    base::UniqueFd run = storage_entry(storage, "run");
    bind(run.get(), root_fd.get(), "run", MS_NOSUID | MS_NODEV, "bind /run");
  }
  (void)ensure_directory(root_fd.get(), config.guest_work_dir, owner,
                         "work_dir " + config.guest_work_dir);
  build_dev(config, root_fd.get(), storage);
  bind_host_tools(root_fd.get(), storage);
}

}  // namespace

std::string fd_path(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

BuiltRoot build_root(const SpawnConfig& config, int sandbox, int lower) {
  BuiltRoot built;
  built.storage = mount_storage(config, sandbox);
  if (config.root_kind == RootKind::host) {
    build_host_root(config, sandbox, built.storage.get());
  } else if (config.root_kind == RootKind::directory) {
    if (lower < 0) fail("open the image's rootfs", EBADF);
    build_image_root(config, sandbox, built.storage.get(), lower);
  } else {
    fail("root kind", EINVAL);
  }
  built.root = open_root(sandbox);
  return built;
}

void harden_proc(int root) {
  base::UniqueFd proc = open_beneath(root, "proc", "open /proc");
  // Read-only: the kernel's knobs. Most are host root's (nobody's inside, so no guest may write
  // them anyway); /proc/sys also holds the ones the sandbox's own namespaces own — its hostname,
  // its network namespace's settings — which the guest's root would otherwise be allowed to turn.
  for (const char* name : {"sys"}) {
    const base::UniqueFd target =
        base::openat2(proc.get(), name, O_PATH, base::kResolveConfined).fd;
    if (!target) continue;  // not on this kernel
    const std::string path = fd_path(target.get());
    must_mount(path, path, nullptr, MS_BIND | MS_REC, "", std::string("bind /proc/") + name);
    const auto bound = base::openat2(proc.get(), name, O_PATH, base::kResolveConfined);
    if (!bound) fail(std::string("reopen /proc/") + name, bound.error);
    must_mount("", fd_path(bound.fd.get()), nullptr,
               MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "",
               std::string("make /proc/") + name + " read-only");
  }
  // Masked: world-readable files that describe the host's kernel rather than the sandbox
  // (its timers, its symbols, the keys its users hold). What is host root's and unreadable to
  // others (kpage*, sysrq-trigger, …) needs no mask: the guest is nobody there.
  const auto null = base::openat2(root, "dev/null", O_PATH, base::kResolveConfined);
  if (!null) fail("open /dev/null", null.error);
  for (const char* name : {"kcore", "keys", "timer_list", "sched_debug", "kallsyms"}) {
    const base::UniqueFd target =
        base::openat2(proc.get(), name, O_PATH, base::kResolveConfined).fd;
    if (!target) continue;
    must_mount(fd_path(null.fd.get()), fd_path(target.get()), nullptr, MS_BIND, "",
               std::string("mask /proc/") + name);
  }
}

}  // namespace airlock::linux_backend::init
