// The file-system sink: artifacts land beneath a held root through openat2, never through a
// link (see sinks.hpp for the guarantee and its one stated residual).
#include "airlock/sinks.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "airlock/errors.hpp"
#include "airlock/paths.hpp"
#include "base/openat2.hpp"
#include "base/syscall_error.hpp"
#include "base/unique_fd.hpp"
#include "core/outputs/artifact_names_detail.hpp"

namespace airlock {
namespace {

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

// Whether `name`, taken beneath the root, would resolve outside it: an absolute name, or one
// whose `..` segments climb above the root. The sink may be handed artifacts a host built
// itself, not only ones collect_outputs validated, so this is the sink's own check, judged
// before the name rules — an escape is reported as an escape, not as a badly spelled name.
bool escapes_the_root(const std::string& name) {
  if (!name.empty() && name.front() == '/') return true;
  const std::string resolved = normalize_guest_path(name);
  return resolved == ".." || resolved.rfind("../", 0) == 0;
}

// `syscall` names the call that failed where its errno alone would mislead (ENOSYS: openat2).
[[noreturn]] void fail(const std::string& name, const std::string& what, int error,
                       std::string_view syscall = {}) {
  const std::string message = "artifact " + detail::printable_name(name) + ": " + what + ": " +
                              base::errno_text(error, syscall);
  if (error == ENOTDIR) throw NotADirectory(message, name);
  if (error == EISDIR) throw IsADirectory(message, name);
  throw SystemError(message, error, name);
}

struct SinkState {
  base::UniqueFd root;
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
  if (escapes_the_root(name)) {
    // Neither the root nor the destination is named: both are host paths a model may not see.
    throw LandingNotConfined("artifact " + detail::printable_name(name) +
                                 " was not landed: its name resolves outside the landing root",
                             "landing-root");
  }
  validate_artifact_name(name);
  const std::vector<std::string> parts = split_name(name);

  // Walk down from the held root, creating and opening one directory at a time. Each open is
  // the kernel's own no-link, beneath-only lookup, so a directory swapped for a link between
  // the mkdirat and the open is refused rather than followed. `name` is always a single
  // component here, so RESOLVE_BENEATH matters only as defence in depth; the load-bearing flag
  // is RESOLVE_NO_SYMLINKS, which the kernel applies atomically with the lookup.
  base::UniqueFd current;
  int directory = state.root.get();
  std::string walked;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    walked += (walked.empty() ? "" : "/") + parts[i];
    if (::mkdirat(directory, parts[i].c_str(), state.options.directory_mode) != 0 &&
        errno != EEXIST) {
      fail(name, "creating directory '" + walked + "' failed", errno);
    }
    auto opened =
        base::openat2(directory, parts[i].c_str(), O_PATH | O_DIRECTORY, base::kResolveConfined);
    if (!opened) {
      if (opened.error == ELOOP || opened.error == EXDEV) refuse_link(name, "'" + walked + "'");
      fail(name, "opening directory '" + walked + "' failed", opened.error, "openat2");
    }
    current = std::move(opened.fd);
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
  base::UniqueFd file;
  for (int attempt = 0; attempt < 8 && !file; ++attempt) {
    temporary = ".airlock-" + random_suffix() + ".partial";
    auto created =
        base::openat2(directory, temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW,
                      base::kResolveConfined, state.options.file_mode);
    if (created) {
      file = std::move(created.fd);
    } else if (created.error != EEXIST) {
      fail(name, "creating the temporary file failed", created.error, "openat2");
    }
  }
  if (!file) fail(name, "no free temporary name after 8 attempts", EEXIST);

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
    const auto synced =
        base::openat2(directory, ".", O_RDONLY | O_DIRECTORY, base::kResolveConfined);
    if (!synced) fail(name, "flushing the landing directory failed", synced.error, "openat2");
    if (::fsync(synced.fd.get()) != 0) fail(name, "flushing the landing directory failed", errno);
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
                          base::errno_text(error),
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
