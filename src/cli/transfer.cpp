#include "cli/transfer.hpp"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "airlock/errors.hpp"
#include "airlock/outputs.hpp"
#include "base/unique_fd.hpp"

namespace airlock::cli {
namespace {

// Deeper trees are refused rather than walked: each level holds a directory open.
constexpr int kMaxPutDepth = 64;
// A guest tree with more directories than this is refused rather than walked.
constexpr std::size_t kMaxGetDirectories = 10000;

std::string read_fd(int fd, std::uint64_t cap, const std::string& what) {
  std::string content;
  char chunk[65536];
  for (;;) {
    const ssize_t got = ::read(fd, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw SystemError("cannot read '" + what + "'", errno);
    if (got == 0) return content;
    content.append(chunk, static_cast<std::size_t>(got));
    if (content.size() > cap) {
      throw TransferCapExceeded("files_in.max_bytes_per_file", what, cap, content.size());
    }
  }
}

std::string flag_check(const std::string& flag) {
  return flag.substr(flag.find_first_not_of('-'));
}

struct PutWalk {
  TransferTally tally;
  std::vector<GuestFile> files;
  std::uint64_t per_file_cap;

  void add_file(int fd, const std::string& local, std::string guest) {
    std::string content = read_fd(fd, per_file_cap, local);
    tally.add(local, content.size());
    files.push_back({std::move(guest), std::move(content)});
  }

  void walk(int directory, const std::string& local, const std::string& guest, int depth) {
    if (depth > kMaxPutDepth) {
      throw InvalidArgument("--put: '" + local + "' is more than " + std::to_string(kMaxPutDepth) +
                                " directories deep",
                            "put");
    }
    base::UniqueFd listing_fd(::dup(directory));
    if (!listing_fd) throw SystemError("cannot read the directory '" + local + "'", errno);
    DIR* listing = ::fdopendir(listing_fd.get());
    if (listing == nullptr) throw SystemError("cannot read the directory '" + local + "'", errno);
    listing_fd.release();
    std::vector<std::string> names;
    errno = 0;
    while (const dirent* entry = ::readdir(listing)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    const int read_error = errno;
    ::closedir(listing);
    if (read_error != 0) throw SystemError("cannot read the directory '" + local + "'", read_error);
    std::sort(names.begin(), names.end());
    for (const auto& name : names) {
      const std::string child_local = local + "/" + name;
      const std::string child_guest = guest + "/" + name;
      struct stat status {};
      if (::fstatat(directory, name.c_str(), &status, AT_SYMLINK_NOFOLLOW) != 0) {
        throw SystemError("cannot stat '" + child_local + "'", errno);
      }
      if (S_ISLNK(status.st_mode)) {
        throw InvalidArgument("--put: '" + child_local +
                                  "' is a link, and links are never followed: remove it, or "
                                  "--put its target under its own name",
                              "put");
      }
      if (!S_ISDIR(status.st_mode) && !S_ISREG(status.st_mode)) {
        throw InvalidArgument("--put: '" + child_local + "' is neither a file nor a directory",
                              "put");
      }
      // O_NOFOLLOW: an entry swapped for a link since the stat is refused by the kernel.
      const int flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK |
                        (S_ISDIR(status.st_mode) ? O_DIRECTORY : 0);
      base::UniqueFd child(::openat(directory, name.c_str(), flags));
      if (!child) {
        if (errno == ELOOP) {
          throw InvalidArgument("--put: '" + child_local + "' became a link while it was read",
                                "put");
        }
        throw SystemError("cannot open '" + child_local + "'", errno);
      }
      struct stat opened {};
      if (::fstat(child.get(), &opened) != 0 ||
          (opened.st_mode & S_IFMT) != (status.st_mode & S_IFMT)) {
        throw InvalidArgument("--put: '" + child_local + "' changed while it was read", "put");
      }
      if (S_ISDIR(opened.st_mode)) {
        walk(child.get(), child_local, child_guest, depth + 1);
      } else {
        add_file(child.get(), child_local, child_guest);
      }
    }
  }
};

}  // namespace

std::string read_local_file(const std::string& path, std::uint64_t cap, const std::string& flag) {
  base::UniqueFd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!file) {
    throw InvalidArgument(flag + ": cannot read the local file '" + path + "'", flag_check(flag));
  }
  struct stat status {};
  if (::fstat(file.get(), &status) != 0 || !S_ISREG(status.st_mode)) {
    throw InvalidArgument(flag + ": '" + path + "' is not a regular file", flag_check(flag));
  }
  return read_fd(file.get(), cap, path);
}

std::vector<GuestFile> read_puts(const std::vector<std::string>& puts, const TransferLimits& caps) {
  PutWalk walk{TransferTally(caps, "files_in"), {}, caps.max_bytes_per_file};
  for (const auto& put : puts) {
    const auto equals = put.find('=');
    if (equals == std::string::npos || equals == 0 || equals + 1 == put.size()) {
      throw InvalidArgument("--put expects LOCAL=GUEST, got '" + put + "'", "put");
    }
    const std::string local = put.substr(0, equals);
    std::string guest = put.substr(equals + 1);
    while (guest.size() > 1 && guest.back() == '/') guest.pop_back();
    base::UniqueFd opened(::open(local.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (!opened) {
      throw InvalidArgument("--put: cannot read the local file '" + local + "'", "put");
    }
    struct stat status {};
    if (::fstat(opened.get(), &status) != 0)
      throw SystemError("cannot stat '" + local + "'", errno);
    if (S_ISDIR(status.st_mode)) {
      walk.walk(opened.get(), local, guest, 1);
    } else if (S_ISREG(status.st_mode)) {
      walk.add_file(opened.get(), local, guest);
    } else {
      throw InvalidArgument("--put: '" + local + "' is neither a file nor a directory", "put");
    }
  }
  return std::move(walk.files);
}

std::vector<DeclaredOutput> expand_gets(Sandbox& sandbox, const std::vector<std::string>& gets,
                                        const std::string& work_dir, const TransferLimits& caps,
                                        std::vector<std::string>& notes) {
  std::vector<DeclaredOutput> outputs;
  auto declare = [&](const std::string& path) {
    DeclaredOutput output;
    output.path = path;
    outputs.push_back(std::move(output));
    if (outputs.size() > caps.max_files) {
      throw TransferCapExceeded("files_out.max_files", path, caps.max_files, outputs.size());
    }
  };
  for (const auto& get : gets) {
    const auto top = sandbox.stat_file(get, work_dir);
    if (!top || top->kind != EntryKind::directory) {
      // A file, or what collect_outputs refuses by name (missing, a link, a special file).
      declare(get);
      continue;
    }
    std::vector<std::string> pending{get};
    std::size_t directories = 0;
    while (!pending.empty()) {
      const std::string directory = pending.back();
      pending.pop_back();
      if (++directories > kMaxGetDirectories) {
        throw InvalidArgument("--get " + get + ": more than " + std::to_string(kMaxGetDirectories) +
                                  " directories to walk",
                              "get");
      }
      std::vector<SandboxEntry> entries = sandbox.list_dir(directory, work_dir);
      std::sort(entries.begin(), entries.end(),
                [](const SandboxEntry& a, const SandboxEntry& b) { return a.path < b.path; });
      std::vector<std::string> below;
      for (const auto& entry : entries) {
        switch (entry.kind) {
          case EntryKind::file:
            declare(entry.path);
            break;
          case EntryKind::directory:
            below.push_back(entry.path);
            break;
          case EntryKind::symlink:
            notes.push_back("--get " + get + ": skipped the link '" + entry.path +
                            "' (links are never followed)");
            break;
          case EntryKind::other:
            notes.push_back("--get " + get + ": skipped '" + entry.path +
                            "' (neither a file nor a directory)");
            break;
        }
      }
      pending.insert(pending.end(), below.rbegin(), below.rend());
    }
  }
  return outputs;
}

}  // namespace airlock::cli
