#include "backends/linux/file_plane.hpp"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "airlock/errors.hpp"
#include "airlock/paths.hpp"
#include "backends/linux/tree_removal.hpp"
#include "base/openat2.hpp"
#include "base/syscall_error.hpp"
#include "base/unique_fd.hpp"

namespace airlock::linux_backend {
namespace {

// The path as the caller wrote it, for messages (a guest path: never a host path).
std::string quoted(std::string_view path) {
  return "'" + std::string(path) + "'";
}

// confine_guest_path, plus the kernel's own limit on a whole path: a guest could not name a
// longer one either, so the host plane does not make what no guest path can reach.
std::string confine(std::string_view path, std::string_view working_directory) {
  std::string absolute = confine_guest_path(path, working_directory);
  if (absolute.size() >= PATH_MAX) {
    throw SystemError("'" + std::string(path.substr(0, 48)) + "…' is longer than PATH_MAX (" +
                          std::to_string(absolute.size()) + " bytes)",
                      ENAMETOOLONG);
  }
  return absolute;
}

std::string beneath_root(const std::string& absolute) {
  return absolute == "/" ? std::string(".") : absolute.substr(1);
}

std::string parent_of(const std::string& absolute) {
  const auto slash = absolute.rfind('/');
  return slash == 0 ? std::string("/") : absolute.substr(0, slash);
}

std::string leaf_of(const std::string& absolute) {
  return absolute.substr(absolute.rfind('/') + 1);
}

[[noreturn]] void raise_errno(int error, std::string_view path, const std::string& doing) {
  switch (error) {
    case ELOOP:
      throw ConfinementError(quoted(path) + " passes through a link; links are never followed");
    case EXDEV:
      throw ConfinementError(quoted(path) + " resolves outside the sandbox");
    case ENOTDIR:
      throw NotADirectory("a parent of " + quoted(path) + " is not a directory", std::string(path));
    case ENOENT:
      throw NotFound(quoted(path) + " does not exist", std::string(path));
    case EISDIR:
      throw IsADirectory(quoted(path) + " is a directory", std::string(path));
    case EROFS:
      throw SystemError(quoted(path) + " is on a read-only part of the sandbox (" + doing + ")",
                        error, std::string(path));
    case ENOSYS:
      // Of the calls the plane makes, only openat2 (Linux 5.6) may be missing from a kernel.
      throw SystemError(
          "cannot " + doing + " " + quoted(path) + ": " + base::errno_text(error, "openat2"), error,
          std::string(path));
    default:
      throw SystemError("cannot " + doing + " " + quoted(path) + ": " + base::errno_text(error),
                        error, std::string(path));
  }
}

// The directory `absolute` beneath the root, as O_PATH.
base::Opened open_directory(int root, const std::string& absolute) {
  return base::openat2(root, beneath_root(absolute).c_str(), O_PATH | O_DIRECTORY,
                       base::kResolveConfined);
}

EntryKind kind_of(const struct stat& info) {
  if (S_ISREG(info.st_mode)) return info.st_nlink > 1 ? EntryKind::other : EntryKind::file;
  if (S_ISDIR(info.st_mode)) return EntryKind::directory;
  if (S_ISLNK(info.st_mode)) return EntryKind::symlink;
  return EntryKind::other;
}

SandboxEntry entry_for(const std::string& absolute, const std::string& working_directory,
                       const struct stat& info) {
  SandboxEntry entry;
  auto relative = guest_path_relative_to(absolute, working_directory);
  entry.path = relative && !relative->empty() ? *relative : std::string(".");
  entry.kind = kind_of(info);
  if (entry.kind == EntryKind::file) entry.size_bytes = static_cast<std::uint64_t>(info.st_size);
  return entry;
}

std::string temporary_name() {
  unsigned char random[8];
  if (::getrandom(random, sizeof random, 0) != static_cast<ssize_t>(sizeof random)) {
    throw SystemError("getrandom failed", errno);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string name = ".airlock-write-";
  for (unsigned char byte : random) {
    name += kHex[byte >> 4];
    name += kHex[byte & 15];
  }
  return name;
}

}  // namespace

void FilePlane::write_file(std::string_view path, std::string_view content,
                           std::string_view working_directory) const {
  write_with(path, content.size(), working_directory, [&](int file) {
    std::size_t done = 0;
    while (done < content.size()) {
      const ssize_t written = ::write(file, content.data() + done, content.size() - done);
      if (written < 0) {
        if (errno == EINTR) continue;
        return errno;
      }
      done += static_cast<std::size_t>(written);
    }
    return 0;
  });
}

void FilePlane::write_file_from(std::string_view path, int source, std::uint64_t size,
                                std::string_view working_directory) const {
  write_with(path, size, working_directory, [&](int file) {
    loff_t from = 0;
    while (static_cast<std::uint64_t>(from) < size) {
      const ssize_t copied =
          ::copy_file_range(source, &from, file, nullptr,
                            static_cast<std::size_t>(size - static_cast<std::uint64_t>(from)), 0);
      if (copied > 0) continue;
      if (copied < 0 && errno == EINTR) continue;
      if (copied == 0) return EIO;  // the source is shorter than it said
      if (errno != EXDEV && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
        return errno;
      }
      // A kernel that will not copy between these two filesystems: through a buffer instead.
      char buffer[1 << 16];
      while (static_cast<std::uint64_t>(from) < size) {
        const std::size_t want = static_cast<std::size_t>(
            std::min<std::uint64_t>(sizeof buffer, size - static_cast<std::uint64_t>(from)));
        const ssize_t got = ::pread(source, buffer, want, from);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return got == 0 ? EIO : errno;
        for (ssize_t put = 0; put < got;) {
          const ssize_t written = ::write(file, buffer + put, static_cast<std::size_t>(got - put));
          if (written < 0) {
            if (errno == EINTR) continue;
            return errno;
          }
          put += written;
        }
        from += got;
      }
    }
    return 0;
  });
}

void FilePlane::write_with(std::string_view path, std::uint64_t size,
                           std::string_view working_directory,
                           const std::function<int(int)>& fill) const {
  const std::string absolute = confine(path, working_directory);
  if (absolute == normalize_guest_path(working_directory)) {
    throw ConfinementError(quoted(path) +
                           " names the working directory itself; a write needs a file path");
  }
  if (size > max_write_bytes_) {
    throw TransferCapExceeded("files_in.max_bytes_per_file", std::string(path), max_write_bytes_,
                              size);
  }
  // Parents, one level at a time under held descriptors, created where missing.
  base::UniqueFd parent(::fcntl(root_, F_DUPFD_CLOEXEC, 0));
  if (!parent) throw SystemError("cannot duplicate the sandbox root descriptor", errno);
  const std::string parent_path = parent_of(absolute);
  std::size_t start = 1;
  while (start < parent_path.size()) {
    std::size_t end = parent_path.find('/', start);
    if (end == std::string::npos) end = parent_path.size();
    const std::string part = parent_path.substr(start, end - start);
    start = end + 1;
    auto next =
        base::openat2(parent.get(), part.c_str(), O_PATH | O_DIRECTORY, base::kResolveConfined);
    if (next.error == ENOENT) {
      const bool created = ::mkdirat(parent.get(), part.c_str(), 0755) == 0;
      if (!created && errno != EEXIST) raise_errno(errno, path, "create a parent directory of");
      next =
          base::openat2(parent.get(), part.c_str(), O_PATH | O_DIRECTORY, base::kResolveConfined);
      if (next && created && chown_ &&
          ::fchownat(next.fd.get(), "", owner_uid_, owner_gid_, AT_EMPTY_PATH) != 0) {
        raise_errno(errno, path, "hand a new directory to the guest for");
      }
    }
    if (!next) raise_errno(next.error, path, "open a parent directory of");
    parent = std::move(next.fd);
  }

  const std::string leaf = leaf_of(absolute);
  mode_t mode = 0644;
  struct stat existing {};
  if (::fstatat(parent.get(), leaf.c_str(), &existing, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISLNK(existing.st_mode)) {
      throw ConfinementError(quoted(path) +
                             " is a link; a write replaces a file and never follows a link");
    }
    if (S_ISDIR(existing.st_mode)) {
      throw IsADirectory(quoted(path) + " is a directory; a write needs a file path",
                         std::string(path));
    }
    if (S_ISREG(existing.st_mode)) mode = existing.st_mode & 0777;
  } else if (errno != ENOENT) {
    raise_errno(errno, path, "inspect");
  }

  // Write a sibling and rename it into place: a reader never sees half a file, and a link raced
  // into the leaf's place is replaced, not followed.
  const std::string temporary = temporary_name();
  base::UniqueFd file(::openat(parent.get(), temporary.c_str(),
                               O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!file) raise_errno(errno, path, "create");
  auto discard = [&] { ::unlinkat(parent.get(), temporary.c_str(), 0); };
  // The final size first: the storage's tmpfs then gives a large file huge pages from its first
  // byte on (huge=within_size), and the writes that follow never extend the file.
  if (size > 0 && ::ftruncate(file.get(), static_cast<off_t>(size)) != 0) {
    const int error = errno;
    discard();
    raise_errno(error, path, "size");
  }
  if (const int error = fill(file.get()); error != 0) {
    discard();
    raise_errno(error, path, "write");
  }
  if ((chown_ && ::fchown(file.get(), owner_uid_, owner_gid_) != 0) ||
      ::fchmod(file.get(), mode) != 0) {
    const int error = errno;
    discard();
    raise_errno(error, path, "hand the file to the guest for");
  }
  file.reset();
  if (::renameat(parent.get(), temporary.c_str(), parent.get(), leaf.c_str()) != 0) {
    const int error = errno;
    discard();
    raise_errno(error, path, "replace");
  }
}

std::optional<SandboxEntry> FilePlane::stat_file(std::string_view path,
                                                 std::string_view working_directory) const {
  const std::string absolute = confine(path, working_directory);
  const std::string base = normalize_guest_path(working_directory);
  struct stat info {};
  if (absolute == "/") {
    if (::fstat(root_, &info) != 0) raise_errno(errno, path, "stat");
    return entry_for(absolute, base, info);
  }
  const auto parent = open_directory(root_, parent_of(absolute));
  if (parent.error == ENOENT) return std::nullopt;
  if (!parent) raise_errno(parent.error, path, "stat");
  if (::fstatat(parent.fd.get(), leaf_of(absolute).c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return std::nullopt;
    raise_errno(errno, path, "stat");
  }
  return entry_for(absolute, base, info);
}

std::string FilePlane::read_file(std::string_view path, std::string_view working_directory,
                                 std::uint64_t max_bytes) const {
  const std::string absolute = confine(path, working_directory);
  base::UniqueFd handle;
  if (absolute == "/") {
    throw IsADirectory(quoted(path) + " is a directory", std::string(path));
  }
  {
    const auto parent = open_directory(root_, parent_of(absolute));
    if (!parent) raise_errno(parent.error, path, "read");
    // O_PATH: nothing is opened for reading yet, so a FIFO cannot block us and a device cannot
    // be touched; what it is gets decided from fstat first.
    auto leaf = base::openat2(parent.fd.get(), leaf_of(absolute).c_str(), O_PATH | O_NOFOLLOW,
                              base::kResolveConfined);
    if (!leaf) raise_errno(leaf.error, path, "read");
    handle = std::move(leaf.fd);
  }
  struct stat info {};
  if (::fstat(handle.get(), &info) != 0) raise_errno(errno, path, "read");
  if (S_ISLNK(info.st_mode)) {
    throw SystemError(quoted(path) + " is a link; a link is never read", ELOOP, std::string(path));
  }
  if (S_ISDIR(info.st_mode)) {
    throw IsADirectory(quoted(path) + " is a directory", std::string(path));
  }
  if (!S_ISREG(info.st_mode)) {
    throw SystemError(quoted(path) + " is not a regular file (a device, FIFO or socket)", EINVAL,
                      std::string(path));
  }
  if (info.st_nlink > 1) {
    throw SystemError(
        quoted(path) + " has other hard links; it could name a file the guest cannot read", EMLINK,
        std::string(path));
  }
  const auto size = static_cast<std::uint64_t>(info.st_size);
  if (size > max_bytes) throw TransferCapExceeded("max_bytes", std::string(path), max_bytes, size);

  const std::string reopen = "self/fd/" + std::to_string(handle.get());
  base::UniqueFd file(proc_ >= 0
                          ? ::openat(proc_, reopen.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY)
                          : ::open(("/proc/" + reopen).c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!file) raise_errno(errno, path, "read");
  struct stat opened {};
  if (::fstat(file.get(), &opened) != 0 || opened.st_ino != info.st_ino ||
      opened.st_dev != info.st_dev) {
    throw SystemError(quoted(path) + " changed while it was opened", EAGAIN, std::string(path));
  }
  // Read one byte past the cap so a file that grew is refused rather than cut.
  std::string content;
  content.resize(static_cast<std::size_t>(std::min<std::uint64_t>(size, max_bytes) + 1));
  std::size_t done = 0;
  for (;;) {
    if (done == content.size()) {
      if (done > max_bytes) {
        throw TransferCapExceeded("max_bytes", std::string(path), max_bytes, done);
      }
      content.resize(std::min<std::size_t>(content.size() * 2, max_bytes + 1));
    }
    const ssize_t got = ::read(file.get(), content.data() + done, content.size() - done);
    if (got < 0) {
      if (errno == EINTR) continue;
      raise_errno(errno, path, "read");
    }
    if (got == 0) break;
    done += static_cast<std::size_t>(got);
  }
  if (done > max_bytes) throw TransferCapExceeded("max_bytes", std::string(path), max_bytes, done);
  content.resize(done);
  return content;
}

std::vector<SandboxEntry> FilePlane::list_dir(std::string_view path,
                                              std::string_view working_directory) const {
  const std::string absolute = confine(path, working_directory);
  const std::string base = normalize_guest_path(working_directory);
  auto opened = base::openat2(root_, beneath_root(absolute).c_str(), O_RDONLY | O_DIRECTORY,
                              base::kResolveConfined);
  if (!opened) raise_errno(opened.error, path, "list");
  DIR* directory = ::fdopendir(opened.fd.get());
  if (directory == nullptr) raise_errno(errno, path, "list");
  opened.fd.release();  // the listing owns it now
  std::vector<SandboxEntry> entries;
  const std::string prefix = absolute == "/" ? std::string("/") : absolute + "/";
  errno = 0;
  while (struct dirent* entry = ::readdir(directory)) {
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    struct stat info {};
    if (::fstatat(::dirfd(directory), name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;  // removed while we listed
      const int error = errno;
      ::closedir(directory);
      raise_errno(error, path, "list");
    }
    entries.push_back(entry_for(prefix + name, base, info));
  }
  ::closedir(directory);
  std::sort(entries.begin(), entries.end(),
            [](const SandboxEntry& a, const SandboxEntry& b) { return a.path < b.path; });
  return entries;
}

void FilePlane::remove(std::string_view path, std::string_view working_directory,
                       bool recursive) const {
  const std::string absolute = confine(path, working_directory);
  if (absolute == normalize_guest_path(working_directory)) {
    throw ConfinementError(quoted(path) + " names the working directory itself; it is not removed");
  }
  const auto opened = open_directory(root_, parent_of(absolute));
  if (opened.error == ENOENT) return;  // nothing there: removal is already done
  if (!opened) raise_errno(opened.error, path, "remove");
  const base::UniqueFd& parent = opened.fd;
  const std::string leaf = leaf_of(absolute);
  struct stat info {};
  if (::fstatat(parent.get(), leaf.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return;
    raise_errno(errno, path, "remove");
  }
  if (S_ISDIR(info.st_mode)) {
    if (!recursive) {
      throw IsADirectory(quoted(path) + " is a directory; removing it needs recursive",
                         std::string(path));
    }
    const TreeRemoval removal = remove_tree(parent.get(), leaf);
    if (removal.error_number != 0) {
      raise_errno(removal.error_number, path, "remove (at " + removal.where + ")");
    }
    return;
  }
  // A link, a file, anything else: the name is removed, a link's target is never touched.
  if (::unlinkat(parent.get(), leaf.c_str(), 0) != 0 && errno != ENOENT) {
    if (errno == EISDIR && recursive) {
      const TreeRemoval removal = remove_tree(parent.get(), leaf);
      if (removal.error_number == 0) return;
      raise_errno(removal.error_number, path, "remove");
    }
    raise_errno(errno, path, "remove");
  }
}

}  // namespace airlock::linux_backend
