#include "backends/linux/tree_removal.hpp"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <vector>

#include "base/unique_fd.hpp"

namespace airlock::linux_backend {
namespace {

constexpr std::size_t kHeldLevels = 32;

int open_directory_at(int parent, const std::string& name) {
  int fd = ::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == EACCES && ::fchmodat(parent, name.c_str(), 0700, 0) == 0) {
    fd = ::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  }
  return fd;
}

int unlink_entry(int parent, const std::string& name, int flags) {
  if (::unlinkat(parent, name.c_str(), flags) == 0 || errno == ENOENT) return 0;
  if (errno == EACCES || errno == EPERM) {
    // The directory we remove from may have been made read-only by its owner.
    struct stat info {};
    if (::fstat(parent, &info) == 0 && ::fchmod(parent, (info.st_mode & 07777) | 0700) == 0 &&
        (::unlinkat(parent, name.c_str(), flags) == 0 || errno == ENOENT)) {
      return 0;
    }
  }
  return errno;
}

std::string join(const std::vector<std::string>& path, std::size_t count) {
  std::string out;
  for (std::size_t i = 0; i < count && i < path.size(); ++i) {
    if (i != 0) out += '/';
    out += path[i];
  }
  return out;
}

}  // namespace

TreeRemoval remove_tree(int parent_fd, const std::string& name) {
  // path[i] is a directory name; fds[i] is path[0..i] opened, or invalid when dropped to bound
  // the descriptors held (re-opened by walking the names from the deepest one still held).
  std::vector<std::string> path{name};
  std::vector<base::UniqueFd> fds;
  {
    const int fd = open_directory_at(parent_fd, name);
    if (fd < 0) {
      if (errno == ENOENT) return {};
      if (errno == ELOOP || errno == ENOTDIR) {
        const int error = unlink_entry(parent_fd, name, 0);
        return {error, error != 0 ? name : std::string()};
      }
      return {errno, name};
    }
    fds.emplace_back(fd);
  }
  auto parent_of = [&](std::size_t depth) { return depth == 0 ? parent_fd : fds[depth - 1].get(); };
  auto reopen = [&]() -> int {
    std::size_t valid = fds.size();
    while (valid > 0 && !fds[valid - 1]) --valid;
    for (std::size_t depth = valid; depth < fds.size(); ++depth) {
      const int fd = open_directory_at(parent_of(depth), path[depth]);
      if (fd < 0) return errno;
      fds[depth].reset(fd);
    }
    return 0;
  };

  while (!fds.empty()) {
    if (!fds.back()) {
      if (const int error = reopen(); error != 0) return {error, join(path, path.size())};
    }
    const int current = fds.back().get();
    const int listing = ::fcntl(current, F_DUPFD_CLOEXEC, 0);
    if (listing < 0) return {errno, join(path, path.size())};
    DIR* directory = ::fdopendir(listing);
    if (directory == nullptr) {
      const int error = errno;
      ::close(listing);
      return {error, join(path, path.size())};
    }
    // The duplicate shares the directory offset with every earlier pass: start from the top.
    ::rewinddir(directory);
    std::string subdirectory;
    int error = 0;
    std::string failed;
    errno = 0;
    while (struct dirent* entry = ::readdir(directory)) {
      const std::string child = entry->d_name;
      if (child == "." || child == "..") continue;
      struct stat info {};
      if (::fstatat(current, child.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) continue;
        error = errno;
        failed = child;
        break;
      }
      if (S_ISDIR(info.st_mode)) {
        subdirectory = child;
        break;
      }
      if (const int unlink_error = unlink_entry(current, child, 0); unlink_error != 0) {
        error = unlink_error;
        failed = child;
        break;
      }
    }
    ::closedir(directory);
    if (error != 0) return {error, join(path, path.size()) + "/" + failed};
    if (!subdirectory.empty()) {
      const int fd = open_directory_at(current, subdirectory);
      if (fd < 0) {
        if (errno == ENOENT) continue;
        if (errno == ELOOP || errno == ENOTDIR) {
          // Swapped for a link or a file while we looked: unlink it, never follow.
          if (const int unlink_error = unlink_entry(current, subdirectory, 0); unlink_error != 0) {
            return {unlink_error, join(path, path.size()) + "/" + subdirectory};
          }
          continue;
        }
        return {errno, join(path, path.size()) + "/" + subdirectory};
      }
      path.push_back(subdirectory);
      fds.emplace_back(fd);
      if (fds.size() > kHeldLevels) fds[fds.size() - 1 - kHeldLevels].reset();
      continue;
    }
    // Empty now: remove it from its parent and go back up.
    const std::string done = path.back();
    fds.pop_back();
    path.pop_back();
    if (!fds.empty() && !fds.back()) {
      if (const int reopen_error = reopen(); reopen_error != 0) {
        return {reopen_error, join(path, path.size())};
      }
    }
    const int parent = fds.empty() ? parent_fd : fds.back().get();
    if (const int unlink_error = unlink_entry(parent, done, AT_REMOVEDIR); unlink_error != 0) {
      return {unlink_error, join(path, path.size()) + (path.empty() ? "" : "/") + done};
    }
  }
  return {};
}

}  // namespace airlock::linux_backend
