#include "backends/kit/guest/file_ops.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <vector>

#include "backends/kit/guest/file_protocol.hpp"

namespace airlock::guest_kit {
namespace {

constexpr std::size_t kBuffer = 64 * 1024;

bool write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t wrote = ::write(fd, data, size);
    if (wrote < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += wrote;
    size -= static_cast<std::size_t>(wrote);
  }
  return true;
}

std::string random_suffix() {
  unsigned char bytes[8] = {};
  if (::getrandom(bytes, sizeof bytes, 0) != static_cast<ssize_t>(sizeof bytes)) {
    const auto fallback =
        static_cast<unsigned long>(::getpid()) ^ static_cast<unsigned long>(::time(nullptr));
    std::memcpy(bytes, &fallback, sizeof bytes < sizeof fallback ? sizeof bytes : sizeof fallback);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char byte : bytes) {
    out.push_back(kHex[byte >> 4]);
    out.push_back(kHex[byte & 0xF]);
  }
  return out;
}

bool print(const std::string& text) {
  return write_all(1, text.data(), text.size());
}

// A regular file with other hard links is "other": a second name may be one outside the work
// directory, and describing it as a file would invite a read of that file through it.
bool plain_file(const struct stat& info) {
  return S_ISREG(info.st_mode) && info.st_nlink <= 1;
}

std::string kind_word(const struct stat& info) {
  if (S_ISREG(info.st_mode)) return plain_file(info) ? "file" : "other";
  if (S_ISDIR(info.st_mode)) return "directory";
  if (S_ISLNK(info.st_mode)) return "symlink";
  return "other";
}

// The parent of `path` opened by the walk, and the final component's name.
struct Located {
  base::UniqueFd parent;
  std::string name;
};

bool locate(const std::string& path, bool create_parents, Located& located, Failure& failure) {
  std::vector<std::string> components;
  if (!split_absolute(path, components, failure)) return false;
  if (components.empty()) {
    failure = {kFileUsage, "the root itself is not an operand"};
    return false;
  }
  located.parent = open_directory(components, components.size() - 1, create_parents, failure);
  if (!located.parent) return false;
  located.name = components.back();
  return true;
}

Failure remove_tree(int parent, const std::string& name, const std::string& path);

Failure remove_children(int directory, const std::string& path) {
  const int listing_fd = ::openat(directory, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (listing_fd < 0) return system_failure(errno, "open", path);
  DIR* listing = ::fdopendir(listing_fd);
  if (listing == nullptr) {
    const int error = errno;
    ::close(listing_fd);
    return system_failure(error, "opendir", path);
  }
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(listing)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(listing);
  for (const auto& name : names) {
    Failure failure = remove_tree(directory, name, path + "/" + name);
    if (failure.code != kFileOk) return failure;
  }
  return {};
}

// Unlinks `name` under `parent`; a directory is opened with O_NOFOLLOW (a link swapped in for it
// fails the open and is then unlinked as the link it is) and emptied first.
Failure remove_tree(int parent, const std::string& name, const std::string& path) {
  if (::unlinkat(parent, name.c_str(), 0) == 0 || errno == ENOENT) return {};
  if (errno != EISDIR && errno != EPERM) return system_failure(errno, "unlink", path);
  const int directory =
      ::openat(parent, name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (directory < 0) {
    if (errno == ENOENT) return {};
    if (errno == ENOTDIR || errno == ELOOP) {  // swapped for a link or file meanwhile
      if (::unlinkat(parent, name.c_str(), 0) == 0 || errno == ENOENT) return {};
    }
    return system_failure(errno, "open", path);
  }
  base::UniqueFd held(directory);
  Failure failure = remove_children(held.get(), path);
  if (failure.code != kFileOk) return failure;
  if (::unlinkat(parent, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
    return system_failure(errno, "rmdir", path);
  }
  return {};
}

}  // namespace

Failure stat_path(const std::string& path) {
  Failure failure;
  if (path == "/") return print("directory\n") ? Failure{} : system_failure(errno, "write", "-");
  Located located;
  if (!locate(path, false, located, failure)) {
    if (failure.code == kFileNotFound) return print("absent\n") ? Failure{} : failure;
    return failure;
  }
  struct stat info {};
  if (::fstatat(located.parent.get(), located.name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return print("absent\n") ? Failure{} : system_failure(errno, "write", "-");
    return system_failure(errno, "stat", path);
  }
  std::string line = kind_word(info);
  if (plain_file(info)) line += " " + std::to_string(info.st_size);
  return print(line + "\n") ? Failure{} : system_failure(errno, "write", "-");
}

Failure read_path(const std::string& path, std::uint64_t max_bytes) {
  Failure failure;
  Located located;
  if (!locate(path, false, located, failure)) return failure;
  // O_NONBLOCK: a FIFO planted at the path must not hang the read; it is refused below.
  const int raw = ::openat(located.parent.get(), located.name.c_str(),
                           O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (raw < 0) {
    if (errno == ELOOP) return {kFileNotRegular, "a link is never read: " + path};
    if (errno == ENOENT) return {kFileNotFound, "no such file: " + path};
    if (errno == EISDIR) return {kFileIsDirectory, "is a directory: " + path};
    return system_failure(errno, "open", path);
  }
  base::UniqueFd file(raw);
  struct stat info {};
  if (::fstat(file.get(), &info) != 0) return system_failure(errno, "stat", path);
  if (S_ISDIR(info.st_mode)) return {kFileIsDirectory, "is a directory: " + path};
  if (!S_ISREG(info.st_mode)) return {kFileNotRegular, "not a regular file: " + path};
  if (info.st_nlink > 1) {
    return {kFileNotRegular, "has other hard links, so it could name a file outside: " + path};
  }
  if (static_cast<std::uint64_t>(info.st_size) > max_bytes) {
    return {kFileTooLarge, "size " + std::to_string(info.st_size) + " is over " +
                               std::to_string(max_bytes) + ": " + path};
  }
  ::fcntl(file.get(), F_SETFL, O_RDONLY);
  std::vector<char> buffer(kBuffer);
  std::uint64_t sent = 0;
  for (;;) {
    const ssize_t got = ::read(file.get(), buffer.data(), buffer.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      return system_failure(errno, "read", path);
    }
    if (got == 0) break;
    sent += static_cast<std::uint64_t>(got);
    if (sent > max_bytes) return {kFileTooLarge, "grew past " + std::to_string(max_bytes)};
    if (!write_all(1, buffer.data(), static_cast<std::size_t>(got))) {
      return system_failure(errno, "write", "-");
    }
  }
  return {};
}

Failure write_path(const std::string& path, std::uint64_t size) {
  Failure failure;
  Located located;
  if (!locate(path, true, located, failure)) return failure;
  const int parent = located.parent.get();
  struct stat existing {};
  mode_t mode = 0644;
  if (::fstatat(parent, located.name.c_str(), &existing, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISLNK(existing.st_mode)) return {kFileLink, "the target is a link: " + path};
    if (S_ISDIR(existing.st_mode)) return {kFileIsDirectory, "is a directory: " + path};
    if (S_ISREG(existing.st_mode)) mode = existing.st_mode & 07777;
  } else if (errno != ENOENT) {
    return system_failure(errno, "stat", path);
  }
  std::string staging;
  base::UniqueFd out;
  for (int attempt = 0; attempt < 16 && !out; ++attempt) {
    staging = ".airlock-write-" + random_suffix();
    out = base::UniqueFd(::openat(parent, staging.c_str(),
                                  O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!out && errno != EEXIST) return system_failure(errno, "create", path);
  }
  if (!out) return system_failure(EEXIST, "create", path);
  std::vector<char> buffer(kBuffer);
  std::uint64_t received = 0;
  for (;;) {
    const ssize_t got = ::read(0, buffer.data(), buffer.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      failure = system_failure(errno, "read", "stdin");
      break;
    }
    if (got == 0) break;
    received += static_cast<std::uint64_t>(got);
    if (received > size) {
      failure = {kFileUsage, "stdin carried more than the announced size"};
      break;
    }
    if (!write_all(out.get(), buffer.data(), static_cast<std::size_t>(got))) {
      failure = system_failure(errno, "write", path);
      break;
    }
  }
  if (failure.code == kFileOk && received != size) {
    failure = {kFileShortInput, "stdin ended after " + std::to_string(received) + " of " +
                                    std::to_string(size) + " bytes"};
  }
  if (failure.code == kFileOk && ::fchmod(out.get(), mode) != 0) {
    failure = system_failure(errno, "chmod", path);
  }
  if (failure.code == kFileOk &&
      ::renameat(parent, staging.c_str(), parent, located.name.c_str()) != 0) {
    failure = errno == EISDIR ? Failure{kFileIsDirectory, "is a directory: " + path}
                              : system_failure(errno, "rename", path);
  }
  if (failure.code != kFileOk) ::unlinkat(parent, staging.c_str(), 0);
  return failure;
}

Failure list_path(const std::string& path) {
  Failure failure;
  std::vector<std::string> components;
  if (!split_absolute(path, components, failure)) return failure;
  base::UniqueFd directory = open_directory(components, components.size(), false, failure);
  if (!directory) return failure;
  const int listing_fd = ::openat(directory.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (listing_fd < 0) return system_failure(errno, "open", path);
  DIR* listing = ::fdopendir(listing_fd);
  if (listing == nullptr) {
    const int error = errno;
    ::close(listing_fd);
    return system_failure(error, "opendir", path);
  }
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(listing)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(listing);
  std::sort(names.begin(), names.end());
  std::string out;
  for (const auto& name : names) {
    struct stat info {};
    if (::fstatat(directory.get(), name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;  // removed while listing
      return system_failure(errno, "stat", path + "/" + name);
    }
    const std::string size = plain_file(info) ? std::to_string(info.st_size) : "-";
    out += kind_word(info) + " " + size + " " + name;
    out.push_back('\0');
  }
  return print(out) ? Failure{} : system_failure(errno, "write", "-");
}

Failure remove_path(const std::string& path, bool recursive) {
  Failure failure;
  Located located;
  if (!locate(path, false, located, failure)) {
    return failure.code == kFileNotFound ? Failure{} : failure;
  }
  struct stat info {};
  if (::fstatat(located.parent.get(), located.name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) {
    return errno == ENOENT ? Failure{} : system_failure(errno, "stat", path);
  }
  if (S_ISDIR(info.st_mode) && !recursive) {
    return {kFileNeedsRecursive, "a directory needs recursive: " + path};
  }
  if (!S_ISDIR(info.st_mode)) {
    if (::unlinkat(located.parent.get(), located.name.c_str(), 0) == 0 || errno == ENOENT) {
      return {};
    }
    if (errno == EISDIR && !recursive) {  // swapped for a directory meanwhile
      return {kFileNeedsRecursive, "a directory needs recursive: " + path};
    }
    if (errno != EISDIR) return system_failure(errno, "unlink", path);
  }
  return remove_tree(located.parent.get(), located.name, path);
}

}  // namespace airlock::guest_kit
