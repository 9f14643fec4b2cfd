#include "backends/docker/host_plane.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <fstream>
#include <random>
#include <sstream>

#include "airlock/errors.hpp"
#include "airlock/paths.hpp"
#include "base/openat2.hpp"
#include "backends/kit/guest_paths.hpp"
#include "base/syscall_error.hpp"

namespace airlock::docker {
namespace {

using backend_kit::entry_path;
using backend_kit::parent_of;

// A recursive removal refuses trees deeper than this rather than recurse without bound.
constexpr int kMaxDepth = 512;

std::string relative(const std::string& absolute) {
  return absolute == "/" ? "." : absolute.substr(1);
}

std::string name_of(const std::string& absolute) {
  return absolute.substr(absolute.rfind('/') + 1);
}

[[noreturn]] void fail_errno(const std::string& what, int error, const std::string& absolute) {
  throw SystemError(what + ": " + base::errno_text(error), error, absolute);
}

// A path whose resolution the kernel refused: a link anywhere is an escape, a file where a
// directory belongs is NotADirectory, anything else the kernel's own words (a kernel without
// openat2 says so).
[[noreturn]] void fail_resolution(int error, const std::string& absolute) {
  if (error == ELOOP || error == EXDEV) {
    throw ConfinementError("'" + absolute + "' passes through a link");
  }
  if (error == ENOTDIR) {
    throw NotADirectory("a component of " + absolute + " is not a directory", absolute);
  }
  throw SystemError("cannot resolve " + absolute + ": " + base::errno_text(error, "openat2"), error,
                    absolute);
}

// The directory at `absolute`, as an O_PATH descriptor; invalid when it does not exist.
base::UniqueFd open_directory(int root, const std::string& absolute) {
  auto opened =
      base::openat2(root, relative(absolute).c_str(), O_PATH | O_DIRECTORY, base::kResolveConfined);
  if (opened) return std::move(opened.fd);
  if (opened.error == ENOENT) return {};
  fail_resolution(opened.error, absolute);
}

EntryKind kind_of(const struct stat& status) {
  if (S_ISLNK(status.st_mode)) return EntryKind::symlink;
  if (S_ISDIR(status.st_mode)) return EntryKind::directory;
  // A regular file with another name elsewhere may be a file outside the working directory:
  // it fails closed as `other`, never read.
  if (S_ISREG(status.st_mode)) return status.st_nlink > 1 ? EntryKind::other : EntryKind::file;
  return EntryKind::other;
}

std::optional<struct stat> stat_entry(int directory, const std::string& name,
                                      const std::string& absolute) {
  struct stat status {};
  if (::fstatat(directory, name.c_str(), &status, AT_SYMLINK_NOFOLLOW) == 0) return status;
  if (errno == ENOENT) return std::nullopt;
  fail_errno("cannot stat " + absolute, errno, absolute);
}

std::string random_suffix() {
  static thread_local std::mt19937_64 generator{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::uint64_t bits = generator(), i = 0; i < 16; ++i, bits >>= 4) out += kHex[bits & 0xf];
  return out;
}

void remove_tree(int parent, const std::string& name, const std::string& absolute, int depth) {
  if (depth > kMaxDepth) {
    throw SystemError("'" + absolute + "' is nested deeper than " + std::to_string(kMaxDepth) +
                          " directories; it is not removed",
                      ELOOP, absolute);
  }
  auto opened = base::openat2(parent, name.c_str(), O_RDONLY | O_DIRECTORY, base::kResolveConfined);
  if (!opened) {
    if (opened.error == ENOENT) return;
    // Swapped for a link or a file since it was looked at: unlink the entry itself.
    if (opened.error == ELOOP || opened.error == ENOTDIR) {
      if (::unlinkat(parent, name.c_str(), 0) != 0 && errno != ENOENT) {
        fail_errno("cannot remove " + absolute, errno, absolute);
      }
      return;
    }
    fail_errno("cannot open " + absolute, opened.error, absolute);
  }
  DIR* listing = ::fdopendir(opened.fd.get());
  if (listing == nullptr) fail_errno("cannot list " + absolute, errno, absolute);
  opened.fd.release();  // the listing owns it now
  struct CloseDir {
    DIR* listing;
    ~CloseDir() { ::closedir(listing); }
  } close_listing{listing};
  const int directory = ::dirfd(listing);
  while (const dirent* entry = ::readdir(listing)) {
    const std::string child = entry->d_name;
    if (child == "." || child == "..") continue;
    const std::string child_path = absolute + "/" + child;
    const auto status = stat_entry(directory, child, child_path);
    if (!status) continue;
    if (S_ISDIR(status->st_mode)) {
      remove_tree(directory, child, child_path, depth + 1);
    } else if (::unlinkat(directory, child.c_str(), 0) != 0 && errno != ENOENT) {
      fail_errno("cannot remove " + child_path, errno, child_path);
    }
  }
  if (::unlinkat(parent, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
    fail_errno("cannot remove " + absolute, errno, absolute);
  }
}

}  // namespace

// ---- attaching --------------------------------------------------------------------------------

std::optional<HostRoot> HostRoot::attach(const std::string& container_id, int init_pid,
                                         const std::string& runtime, std::string& why) {
  static constexpr std::array<const char*, 5> kRuncFamily = {"", "runc", "crun", "oci",
                                                             "io.containerd.runc.v2"};
  if (std::find(kRuncFamily.begin(), kRuncFamily.end(), runtime) == kRuncFamily.end()) {
    why = "the container runs under runtime '" + runtime + "', whose root is not its process's";
    return std::nullopt;
  }
  if (init_pid <= 0) {
    why = "the engine reports no init process for the container";
    return std::nullopt;
  }
  HostRoot root;
  // The pidfd pins the process: everything read through /proc/<pid> below is checked against
  // it afterwards, so a pid reused in between is caught.
  root.pidfd_.reset(static_cast<int>(::syscall(SYS_pidfd_open, init_pid, 0)));
  if (!root.pidfd_) {
    why = "pid " + std::to_string(init_pid) + " is not visible here (" + base::errno_text(errno) +
          ")";
    return std::nullopt;
  }
  const std::string proc = "/proc/" + std::to_string(init_pid);
  std::ifstream cgroups(proc + "/cgroup");
  std::stringstream text;
  text << cgroups.rdbuf();
  if (container_id.size() < 32 || text.str().find(container_id) == std::string::npos) {
    why = "pid " + std::to_string(init_pid) +
          " here is not the container's init (another pid "
          "namespace: a remote or nested engine)";
    return std::nullopt;
  }
  std::array<char, 64> ours{};
  std::array<char, 64> theirs{};
  const auto our_length = ::readlink("/proc/self/ns/user", ours.data(), ours.size() - 1);
  const auto their_length =
      ::readlink((proc + "/ns/user").c_str(), theirs.data(), theirs.size() - 1);
  if (our_length <= 0 || their_length <= 0 ||
      std::string_view(ours.data(), static_cast<std::size_t>(our_length)) !=
          std::string_view(theirs.data(), static_cast<std::size_t>(their_length))) {
    why = "the container has a user namespace of its own (root here is not root there)";
    return std::nullopt;
  }
  root.root_.reset(::open((proc + "/root").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root.root_) {
    why = "the container's root cannot be opened from here (" + base::errno_text(errno) + ")";
    return std::nullopt;
  }
  if (!root.alive()) {
    why = "the container's init ended while its root was opened";
    return std::nullopt;
  }
  return root;
}

bool HostRoot::alive() const noexcept {
  return pidfd_ && ::syscall(SYS_pidfd_send_signal, pidfd_.get(), 0, nullptr, 0) == 0;
}

// ---- the file methods -------------------------------------------------------------------------

namespace host_plane {

std::optional<SandboxEntry> stat(int root, const std::string& absolute,
                                 std::string_view working_directory) {
  struct stat status {};
  if (absolute == "/") {
    if (::fstat(root, &status) != 0) fail_errno("cannot stat /", errno, absolute);
  } else {
    const base::UniqueFd directory = open_directory(root, parent_of(absolute));
    if (!directory) return std::nullopt;
    const auto found = stat_entry(directory.get(), name_of(absolute), absolute);
    if (!found) return std::nullopt;
    status = *found;
  }
  SandboxEntry entry;
  entry.path = entry_path(absolute, working_directory);
  entry.kind = kind_of(status);
  if (entry.kind == EntryKind::file) entry.size_bytes = static_cast<std::uint64_t>(status.st_size);
  return entry;
}

std::string read(int root, const std::string& absolute, std::string_view path,
                 std::uint64_t max_bytes) {
  const std::string quoted = "'" + std::string(path) + "'";
  const base::UniqueFd directory = open_directory(root, parent_of(absolute));
  if (!directory) throw NotFound(quoted + " does not exist", absolute);
  const std::string name = name_of(absolute);
  const auto status = stat_entry(directory.get(), name, absolute);
  if (!status) throw NotFound(quoted + " does not exist", absolute);
  const auto judge = [&](const struct stat& seen) {
    if (S_ISLNK(seen.st_mode)) {
      throw SystemError(quoted + " is a link; links are never read", ELOOP, absolute);
    }
    if (S_ISDIR(seen.st_mode)) throw IsADirectory(quoted + " is a directory", absolute);
    if (!S_ISREG(seen.st_mode)) throw SystemError(quoted + " is not a regular file", 0, absolute);
    if (seen.st_nlink > 1) {
      throw SystemError(quoted + " is a hard link (it may name a file outside); never read", EMLINK,
                        absolute);
    }
    if (static_cast<std::uint64_t>(seen.st_size) > max_bytes) {
      throw TransferCapExceeded("max_bytes", std::string(path), max_bytes,
                                static_cast<std::uint64_t>(seen.st_size));
    }
  };
  judge(*status);
  // O_NOFOLLOW: a link swapped in since the stat is refused, not followed; O_NONBLOCK: a FIFO
  // swapped in does not hang the open.
  const base::UniqueFd file(::openat(directory.get(), name.c_str(),
                                     O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!file) {
    if (errno == ELOOP) {
      throw SystemError(quoted + " is a link; links are never read", ELOOP, absolute);
    }
    if (errno == ENOENT) throw NotFound(quoted + " does not exist", absolute);
    fail_errno("cannot open " + quoted, errno, absolute);
  }
  struct stat opened {};
  if (::fstat(file.get(), &opened) != 0) fail_errno("cannot stat " + quoted, errno, absolute);
  judge(opened);
  std::string content;
  content.resize(static_cast<std::size_t>(opened.st_size));
  std::size_t filled = 0;
  char probe = 0;
  while (true) {
    // Read one byte past what was stat-ed: a file that grew past the cap is refused, never cut.
    char* target = filled < content.size() ? content.data() + filled : &probe;
    const std::size_t want = filled < content.size() ? content.size() - filled : 1;
    const ssize_t got = ::read(file.get(), target, want);
    if (got < 0) {
      if (errno == EINTR) continue;
      fail_errno("cannot read " + quoted, errno, absolute);
    }
    if (got == 0) break;
    if (filled >= content.size()) {
      content.push_back(probe);
      if (content.size() > max_bytes) {
        throw TransferCapExceeded("max_bytes", std::string(path), max_bytes);
      }
    }
    filled += static_cast<std::size_t>(got);
  }
  content.resize(filled);
  return content;
}

void write(int root, const std::string& absolute, std::string_view path, std::string_view content) {
  const std::string quoted = "'" + std::string(path) + "'";
  // Parents one component at a time, each created if missing and then opened without following.
  auto opened_root = base::openat2(root, ".", O_PATH | O_DIRECTORY, base::kResolveConfined);
  if (!opened_root) fail_errno("cannot open the sandbox's root", opened_root.error, "/");
  base::UniqueFd directory = std::move(opened_root.fd);
  const std::string parent = parent_of(absolute);
  std::string walked;
  for (std::size_t start = 1; start < parent.size();) {
    std::size_t end = parent.find('/', start);
    if (end == std::string::npos) end = parent.size();
    const std::string component = parent.substr(start, end - start);
    walked += "/" + component;
    auto next = base::openat2(directory.get(), component.c_str(), O_PATH | O_DIRECTORY,
                              base::kResolveConfined);
    if (next.error == ENOENT) {
      if (::mkdirat(directory.get(), component.c_str(), 0755) != 0 && errno != EEXIST) {
        fail_errno("cannot create " + walked, errno, walked);
      }
      next = base::openat2(directory.get(), component.c_str(), O_PATH | O_DIRECTORY,
                           base::kResolveConfined);
    }
    if (!next) fail_resolution(next.error, walked);
    directory = std::move(next.fd);
    start = end + 1;
  }
  const std::string name = name_of(absolute);
  if (const auto existing = stat_entry(directory.get(), name, absolute)) {
    if (S_ISLNK(existing->st_mode)) {
      throw ConfinementError(quoted +
                             " is a link; a write replaces a file and never follows a link");
    }
    if (S_ISDIR(existing->st_mode)) throw IsADirectory(quoted + " is a directory", absolute);
  }
  // Written aside, then renamed over the name: a reader never sees half a file, and a link
  // raced onto the name is replaced, never written through.
  const std::string staged = ".airlock-write-" + random_suffix();
  base::UniqueFd file(::openat(directory.get(), staged.c_str(),
                               O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!file) fail_errno("cannot write " + quoted, errno, absolute);
  const auto discard = [&] { ::unlinkat(directory.get(), staged.c_str(), 0); };
  ::fchmod(file.get(), 0644);
  for (std::size_t written = 0; written < content.size();) {
    const ssize_t step = ::write(file.get(), content.data() + written, content.size() - written);
    if (step < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      discard();
      fail_errno("cannot write " + quoted, error, absolute);
    }
    written += static_cast<std::size_t>(step);
  }
  if (::close(file.release()) != 0) {
    const int error = errno;
    discard();
    fail_errno("cannot write " + quoted, error, absolute);
  }
  if (::renameat(directory.get(), staged.c_str(), directory.get(), name.c_str()) != 0) {
    const int error = errno;
    discard();
    if (error == EISDIR) throw IsADirectory(quoted + " is a directory", absolute);
    fail_errno("cannot write " + quoted, error, absolute);
  }
}

std::vector<SandboxEntry> list(int root, const std::string& absolute,
                               std::string_view working_directory) {
  auto opened = base::openat2(root, relative(absolute).c_str(), O_RDONLY | O_DIRECTORY,
                              base::kResolveConfined);
  if (!opened) {
    if (opened.error == ENOENT) throw NotFound("'" + absolute + "' does not exist", absolute);
    if (opened.error == ENOTDIR) {
      throw NotADirectory("'" + absolute + "' is not a directory", absolute);
    }
    fail_resolution(opened.error, absolute);
  }
  DIR* listing = ::fdopendir(opened.fd.get());
  if (listing == nullptr) fail_errno("cannot list " + absolute, errno, absolute);
  opened.fd.release();  // the listing owns it now
  struct CloseDir {
    DIR* listing;
    ~CloseDir() { ::closedir(listing); }
  } close_listing{listing};
  const std::string base = entry_path(absolute, working_directory);
  std::vector<SandboxEntry> entries;
  while (const dirent* entry = ::readdir(listing)) {
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    const std::string child = absolute == "/" ? "/" + name : absolute + "/" + name;
    const auto status = stat_entry(::dirfd(listing), name, child);
    if (!status) continue;  // gone since the listing began
    SandboxEntry item;
    item.path = base == "." ? name : base + "/" + name;
    item.kind = kind_of(*status);
    if (item.kind == EntryKind::file) item.size_bytes = static_cast<std::uint64_t>(status->st_size);
    entries.push_back(std::move(item));
  }
  std::sort(entries.begin(), entries.end(),
            [](const SandboxEntry& a, const SandboxEntry& b) { return a.path < b.path; });
  return entries;
}

void remove(int root, const std::string& absolute, std::string_view path, bool recursive) {
  const base::UniqueFd directory = open_directory(root, parent_of(absolute));
  if (!directory) return;  // a missing path is success
  const std::string name = name_of(absolute);
  const auto status = stat_entry(directory.get(), name, absolute);
  if (!status) return;
  if (S_ISDIR(status->st_mode)) {
    if (!recursive) {
      throw SystemError("'" + std::string(path) + "' is a directory; removing it needs recursive",
                        EISDIR, absolute);
    }
    remove_tree(directory.get(), name, absolute, 0);
    return;
  }
  // A link is unlinked, never followed.
  if (::unlinkat(directory.get(), name.c_str(), 0) != 0 && errno != ENOENT) {
    if (errno == EISDIR) {
      throw SystemError("'" + std::string(path) + "' is a directory; removing it needs recursive",
                        EISDIR, absolute);
    }
    fail_errno("cannot remove '" + std::string(path) + "'", errno, absolute);
  }
}

}  // namespace host_plane
}  // namespace airlock::docker
