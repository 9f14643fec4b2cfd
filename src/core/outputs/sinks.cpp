// The file-system sink: artifacts land beneath a held root through openat2, never through a
// link (see sinks.hpp for the guarantee and its one stated residual).
#include "airlock/sinks.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "airlock/errors.hpp"
#include "core/outputs/artifact_names_detail.hpp"

namespace airlock {
namespace {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const noexcept { return fd_; }
  int release() noexcept { return std::exchange(fd_, -1); }
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

std::string errno_text(int error) {
  return std::generic_category().message(error);
}

// Resolution that cannot leave `directory` and cannot pass through any link. `name` is always a
// single component here, so RESOLVE_BENEATH matters only as defence in depth; the load-bearing
// flag is RESOLVE_NO_SYMLINKS, which the kernel applies atomically with the lookup.
int open_beneath(int directory, const std::string& name, std::uint64_t flags,
                 std::uint64_t mode = 0) {
  struct open_how how {};
  how.flags = flags | O_CLOEXEC;
  how.mode = mode;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  for (int attempt = 0;; ++attempt) {
    const long fd = ::syscall(SYS_openat2, directory, name.c_str(), &how, sizeof how);
    // EAGAIN: the kernel saw a concurrent rename and refuses to guess; a few retries are safe
    // because every retry is the same fully checked lookup.
    if (fd < 0 && errno == EAGAIN && attempt < 8) continue;
    return static_cast<int>(fd);
  }
}

std::string random_suffix() {
  unsigned char bytes[8];
  if (::getrandom(bytes, sizeof bytes, 0) != static_cast<ssize_t>(sizeof bytes)) {
    throw SystemError("the file-system sink could not draw a random temporary name", errno);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char byte : bytes) {
    out += kHex[byte >> 4];
    out += kHex[byte & 0xF];
  }
  return out;
}

std::vector<std::string> split_name(const std::string& name) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t slash = name.find('/', start);
    parts.push_back(
        name.substr(start, slash == std::string::npos ? std::string::npos : slash - start));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return parts;
}

[[noreturn]] void refuse_link(const std::string& name, const std::string& where) {
  // Names the artifact and its own relative path only: a host path could tell a model where
  // the host keeps its files.
  throw LandingNotConfined("artifact " + detail::printable_name(name) +
                               " was not landed: " + where +
                               " is a link in the landing root, and the sink never "
                               "writes through a link",
                           "landing-root");
}

[[noreturn]] void fail(const std::string& name, const std::string& what, int error) {
  const std::string message =
      "artifact " + detail::printable_name(name) + ": " + what + ": " + errno_text(error);
  if (error == ENOTDIR) throw NotADirectory(message, name);
  if (error == EISDIR) throw IsADirectory(message, name);
  throw SystemError(message, error, name);
}

struct SinkState {
  UniqueFd root;
  std::filesystem::path root_path;
  FileSystemSinkOptions options;
};

void write_all(int fd, const std::string& content, const std::string& name) {
  std::size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(name, "writing the temporary file failed", errno);
    }
    written += static_cast<std::size_t>(n);
  }
}

LandedArtifact land(const SinkState& state, const Artifact& artifact) {
  const std::string& name = artifact.name;
  validate_artifact_name(name);
  const std::vector<std::string> parts = split_name(name);

  // Walk down from the held root, creating and opening one directory at a time. Each open is
  // the kernel's own no-link, beneath-only lookup, so a directory swapped for a link between
  // the mkdirat and the open is refused rather than followed.
  UniqueFd current;
  int directory = state.root.get();
  std::string walked;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    walked += (walked.empty() ? "" : "/") + parts[i];
    if (::mkdirat(directory, parts[i].c_str(), state.options.directory_mode) != 0 &&
        errno != EEXIST) {
      fail(name, "creating directory '" + walked + "' failed", errno);
    }
    const int fd = open_beneath(directory, parts[i], O_PATH | O_DIRECTORY);
    if (fd < 0) {
      const int error = errno;
      if (error == ELOOP || error == EXDEV) refuse_link(name, "'" + walked + "'");
      if (error == ENOSYS) {
        fail(name, "the kernel has no openat2, and the sink will not resolve without it", error);
      }
      fail(name, "opening directory '" + walked + "' failed", error);
    }
    current.reset(fd);
    directory = current.get();
  }
  const std::string& leaf = parts.back();

  struct stat existing {};
  if (::fstatat(directory, leaf.c_str(), &existing, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISLNK(existing.st_mode)) refuse_link(name, "its destination");
    if (S_ISDIR(existing.st_mode)) fail(name, "its destination is a directory", EISDIR);
  }

  // O_EXCL: nothing already at the temporary name — a link included — is ever opened.
  std::string temporary;
  UniqueFd file;
  for (int attempt = 0; attempt < 8 && file.get() < 0; ++attempt) {
    temporary = ".airlock-" + random_suffix() + ".partial";
    const int fd = open_beneath(directory, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW,
                                state.options.file_mode);
    if (fd >= 0) {
      file.reset(fd);
    } else if (errno != EEXIST) {
      const int error = errno;
      if (error == ENOSYS) {
        fail(name, "the kernel has no openat2, and the sink will not resolve without it", error);
      }
      fail(name, "creating the temporary file failed", error);
    }
  }
  if (file.get() < 0) fail(name, "no free temporary name after 8 attempts", EEXIST);

  // From here on the temporary file is ours to remove on any failure.
  struct RemoveTemporary {
    int directory;
    const std::string& temporary;
    bool armed = true;
    ~RemoveTemporary() {
      if (armed) ::unlinkat(directory, temporary.c_str(), 0);
    }
  } cleanup{directory, temporary};

  write_all(file.get(), artifact.content, name);
  if (state.options.fsync && ::fsync(file.get()) != 0) {
    fail(name, "flushing the temporary file failed", errno);
  }
  file.reset();
  // rename never follows a link at the destination: one raced in after the check above is
  // replaced, and whatever it pointed at is untouched.
  if (::renameat(directory, temporary.c_str(), directory, leaf.c_str()) != 0) {
    fail(name, "moving the file into place failed", errno);
  }
  cleanup.armed = false;
  if (state.options.fsync) {
    UniqueFd synced(open_beneath(directory, ".", O_RDONLY | O_DIRECTORY));
    if (synced.get() < 0 || ::fsync(synced.get()) != 0) {
      fail(name, "flushing the landing directory failed", errno);
    }
  }

  const std::filesystem::path destination = state.root_path / name;
  LandedArtifact landed;
  landed.name = name;
  landed.display = state.options.display
                       ? state.options.display(artifact, destination)
                       : name + " (" + std::to_string(artifact.content.size()) + " bytes)";
  landed.handle = destination.string();
  return landed;
}

}  // namespace

OutputSink make_file_system_sink(const std::filesystem::path& root, FileSystemSinkOptions options) {
  if (root.empty()) throw InvalidArgument("file-system sink: the landing root is empty", "root");
  if (options.create_root) {
    std::error_code error;
    std::filesystem::create_directories(root, error);
    if (error) {
      throw SystemError("file-system sink: cannot create the landing root: " + error.message(),
                        error.value());
    }
  }
  auto state = std::make_shared<SinkState>();
  const int fd = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    throw SystemError("file-system sink: cannot open the landing root " + root.string() + ": " +
                          errno_text(error),
                      error);
  }
  state->root.reset(fd);
  state->root_path = root;
  const NameNormalization normalization = options.normalization;
  state->options = std::move(options);
  OutputSink sink;
  sink.normalization = normalization;
  sink.deliver = [state](const Artifact& artifact) { return land(*state, artifact); };
  return sink;
}

}  // namespace airlock
