#include "backends/docker/docker_sandbox.hpp"

#include <cerrno>
#include <chrono>
#include <thread>

#include "airlock/errors.hpp"
#include "airlock/paths.hpp"
#include "backends/docker/containers.hpp"
#include "backends/docker/engine_streams.hpp"
#include "backends/docker/exec_session.hpp"
#include "backends/docker/host_plane.hpp"
#include "backends/docker/snapshots.hpp"
#include "backends/docker/tar_io.hpp"
#include "backends/kit/guest_paths.hpp"

namespace airlock::docker {
namespace {

using backend_kit::entry_path;
using backend_kit::parent_of;
using backend_kit::refuse_overlong;

std::string relative_to_base(const std::string& absolute, const std::string& base) {
  return *guest_path_relative_to(absolute, base);
}

bool mentions(const std::string& text, std::string_view needle) {
  return text.find(needle) != std::string::npos;
}

// The engines answer a path under a non-directory with an error, not a 404.
[[noreturn]] void fail_path(const EngineResponse& response, std::string_view method,
                            const std::string& path, const std::string& absolute,
                            const char* message) {
  const std::string words = response.engine_message();
  if (mentions(words, "not a directory")) {
    throw NotADirectory("a parent of " + absolute + " is not a directory", absolute);
  }
  if (mentions(words, "name too long")) {
    throw SystemError("a name in " + absolute.substr(0, 256) + " is too long", ENAMETOOLONG,
                      absolute.substr(0, 256));
  }
  if (mentions(words, "ermission denied")) {
    throw SystemError("permission denied for " + absolute, EACCES, absolute);
  }
  EngineClient::fail(message, method, path, response);
}

[[noreturn]] void refuse_link(std::string_view path, const std::string& absolute) {
  throw SystemError("'" + std::string(path) + "' is a link; links are never read", ELOOP, absolute);
}

}  // namespace

class DockerSandbox::Walk {
 public:
  explicit Walk(DockerSandbox& sandbox) : sandbox_(sandbox) {}

  const std::optional<PathStat>& at(const std::string& absolute) {
    auto found = seen_.find(absolute);
    if (found == seen_.end()) found = seen_.emplace(absolute, sandbox_.stat_path(absolute)).first;
    return found->second;
  }
  GuestStat stat() {
    return [this](const std::string& absolute) -> std::optional<EntryKind> {
      const auto& entry = at(absolute);
      if (!entry) return std::nullopt;
      return entry->kind;
    };
  }

 private:
  DockerSandbox& sandbox_;
  std::map<std::string, std::optional<PathStat>> seen_;
};

DockerSandbox::DockerSandbox(std::shared_ptr<EngineContext> engine, SandboxIdentity identity)
    : engine_(std::move(engine)), identity_(std::move(identity)) {}

SnapshotRecord DockerSandbox::snapshot() {
  if (!identity_.snapshots) {
    throw NotSupported(
        "this docker backend takes no snapshots (they need a read-only root, where the storage "
        "places hold everything a guest writes, and runc)");
  }
  SnapshotSource source;
  source.container_id = identity_.container_id;
  source.kind = identity_.kind;
  source.work_dir = normalize_guest_path(identity_.work_dir);
  source.disk_bytes = identity_.disk_bytes;
  source.places = identity_.storage_places;
  source.flavour = identity_.flavour;
  source.keeper_processes = identity_.keeper_processes;
  return take_snapshot(*engine_, source);
}

std::string DockerSandbox::archive_path(const std::string& absolute) const {
  return "/containers/" + identity_.container_id + "/archive?path=" + url_encode(absolute);
}

bool DockerSandbox::stop_in_place() noexcept {
  if (!identity_.stop_in_place) return false;
  try {
    EngineClient& client = *engine_->client;
    const std::string base = "/containers/" + identity_.container_id;
    // The engine signals PID 1, and the init (or the keeper as PID 1) hands it to the keeper,
    // which kills every process it may: all but itself and the init. Nothing has to start in
    // the container for that, so a full pids cgroup cannot stop it. Confirmed when the
    // engine's list holds only the init and the keeper; asked again if not.
    for (int round = 0; round < 3; ++round) {
      if (client.call("POST", base + "/kill?signal=SIGUSR1").status != 204) return false;
      for (int poll = 0; poll < 20; ++poll) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        const auto processes = count_processes(client, identity_.container_id);
        if (processes && *processes <= identity_.keeper_processes) return true;
      }
    }
  } catch (...) {
  }
  return false;
}

bool DockerSandbox::force_stop() noexcept {
  if (stop_in_place()) return true;
  // Only the keeper's kill leaves the conversation's files: a restart would end every process
  // too, but it empties the storage (a tmpfs), so the instance is no longer the conversation's
  // either way. The container is removed, and the answer says the end was not confirmed in
  // place, so the caller condemns the instance and tells the model it was reset.
  remove_container(*engine_->client, identity_.container_id);
  return false;
}

std::shared_ptr<const HostRoot> DockerSandbox::host_root() {
  const std::string& plane = engine_->config.file_plane;
  if (plane == "archive") return nullptr;
  std::lock_guard guard(plane_mutex_);
  if (host_root_ && host_root_->alive()) return host_root_;
  host_root_.reset();
  std::string why = host_plane_refusal_;
  if (why.empty()) {
    if (!engine_->client->endpoint().unix_socket) {
      why = "the engine is reached over TCP, not on this host";
      host_plane_refusal_ = why;
    } else if (const auto info = inspect_container(*engine_->client, identity_.container_id);
               !info) {
      why = "the sandbox's container no longer exists";
    } else if (!info->running || info->pid <= 0) {
      why = "the sandbox's container is not running";
    } else if (auto root =
                   HostRoot::attach(identity_.container_id, info->pid, info->runtime, why)) {
      host_root_ = std::make_shared<const HostRoot>(std::move(*root));
      return host_root_;
    } else {
      host_plane_refusal_ = why;  // the container's own shape: it will not change
    }
  }
  if (plane == "host") {
    throw BackendError("the host file plane does not apply to this sandbox", why);
  }
  return nullptr;
}

std::optional<PathStat> DockerSandbox::stat_path(const std::string& absolute) {
  const std::string path = archive_path(absolute);
  CallOptions options;
  options.head = true;
  const EngineResponse response = engine_->client->call("HEAD", path, options);
  if (response.status == 404) return std::nullopt;
  if (response.status != 200) {
    fail_path(response, "HEAD", path, absolute, "the container engine could not stat a path");
  }
  const auto header = response.header("x-docker-container-path-stat");
  const auto stat = header ? decode_path_stat(*header) : std::nullopt;
  if (!stat) {
    throw BackendError("the container engine described a path in a form this client cannot read",
                       "HEAD " + path + ": no usable X-Docker-Container-Path-Stat");
  }
  return stat;
}

// ---- files in ---------------------------------------------------------------------------------

void DockerSandbox::write_file(std::string_view path, std::string_view content,
                               std::string_view working_directory) {
  const std::uint64_t ceiling = 64ull << 20;  // the declared files_in.max_bytes_per_file
  if (content.size() > ceiling) {
    throw TransferCapExceeded("files_in.max_bytes_per_file", std::string(path), ceiling,
                              content.size());
  }
  const std::string confined = confine_guest_path(path, working_directory);
  refuse_overlong(path, confined);
  if (const auto root = host_root()) {
    if (confined == normalize_guest_path(working_directory)) {
      throw ConfinementError("'" + std::string(path) +
                             "' names the working directory itself; a write needs a file path");
    }
    host_plane::write(root->fd(), confined, path, content);
    return;
  }
  Walk walk(*this);
  const std::string absolute = confine_guest_write_path(walk.stat(), path, working_directory);
  if (const auto& leaf = walk.at(absolute); leaf && leaf->kind == EntryKind::directory) {
    throw IsADirectory("'" + std::string(path) + "' is a directory", absolute);
  }

  // The tar goes to the deepest directory that exists; the missing ones travel in it. The walk
  // stopped at the first missing component, so everything below that is missing too.
  std::string base = "/";
  std::vector<std::string> missing;
  for (const auto& component : guest_directory_chain(parent_of(absolute), working_directory)) {
    if (missing.empty() && walk.at(component)) {
      base = component;
    } else {
      missing.push_back(component);
    }
  }
  std::vector<std::string> directories;
  directories.reserve(missing.size());
  for (const auto& directory : missing) directories.push_back(relative_to_base(directory, base));
  const std::string archive =
      build_file_archive(directories, relative_to_base(absolute, base), content);

  const std::string request = "/containers/" + identity_.container_id +
                              "/archive?noOverwriteDirNonDir=1&path=" + url_encode(base);
  CallOptions options;
  options.body = archive;
  options.content_type = "application/x-tar";
  const EngineResponse response = engine_->client->call("PUT", request, options);
  if (response.status == 200) return;
  const std::string words = response.engine_message();
  if (response.status == 404 && !mentions(words, "container")) {
    throw NotFound("the directory " + base + " disappeared during the write", base);
  }
  if (mentions(words, "read-only") || mentions(words, "read only")) {
    throw SystemError("the sandbox's file system is read-only at " + absolute, EROFS, absolute);
  }
  if (mentions(words, "overwrite") && mentions(words, "directory")) {
    throw IsADirectory("'" + std::string(path) + "' is a directory", absolute);
  }
  fail_path(response, "PUT", request, absolute, "the container engine refused the write");
}

// ---- files out --------------------------------------------------------------------------------

std::optional<SandboxEntry> DockerSandbox::stat_file(std::string_view path,
                                                     std::string_view working_directory) {
  const std::string absolute = confine_guest_path(path, working_directory);
  refuse_overlong(path, absolute);
  if (const auto root = host_root())
    return host_plane::stat(root->fd(), absolute, working_directory);
  Walk walk(*this);
  refuse_symlinked_parents(walk.stat(), absolute, working_directory);
  const auto& leaf = walk.at(absolute);
  if (!leaf) return std::nullopt;
  SandboxEntry entry;
  entry.path = entry_path(absolute, working_directory);
  entry.kind = leaf->kind;
  if (leaf->kind == EntryKind::file) entry.size_bytes = leaf->size;
  return entry;
}

std::string DockerSandbox::read_file(std::string_view path, std::string_view working_directory,
                                     std::uint64_t max_bytes) {
  const std::string absolute = confine_guest_path(path, working_directory);
  refuse_overlong(path, absolute);
  if (const auto root = host_root()) return host_plane::read(root->fd(), absolute, path, max_bytes);
  Walk walk(*this);
  refuse_symlinked_parents(walk.stat(), absolute, working_directory);

  const std::string request = archive_path(absolute);
  try {
    EngineDownload download(*engine_->client, engine_->client->versioned(request),
                            Clock::now() + engine_->client->request_timeout());
    const long status = download.wait_for_head();
    if (status == 404) throw NotFound("'" + std::string(path) + "' does not exist", absolute);
    if (status != 200) {
      EngineResponse failed;
      failed.status = status;
      failed.body = download.read_rest(64u << 10);
      fail_path(failed, "GET", request, absolute, "the container engine could not read a file");
    }
    // Judged from the response's own stat before any body byte is read. Podman's GET follows
    // a final link, so this stat (which does not) is what refuses one there.
    const auto header = download.header("x-docker-container-path-stat");
    const auto stat = header ? decode_path_stat(*header) : std::nullopt;
    if (stat) {
      switch (stat->kind) {
        case EntryKind::symlink:
          refuse_link(path, absolute);
        case EntryKind::directory:
          throw IsADirectory("'" + std::string(path) + "' is a directory", absolute);
        case EntryKind::other:
          throw SystemError("'" + std::string(path) + "' is not a regular file", 0, absolute);
        case EntryKind::file:
          if (stat->size > max_bytes) {
            throw TransferCapExceeded("max_bytes", std::string(path), max_bytes, stat->size);
          }
      }
    }
    // …and from the tar header, which is what the body actually is.
    TarStreamReader reader(download);
    const auto entry = reader.next();
    // An archive with no entry after a stat that found one: the entry went away between the
    // engine's stat and its walk (the guest replaced or removed it). Nothing was read.
    if (!entry) {
      throw NotFound("'" + std::string(path) +
                         "' changed while it was read (the engine's archive held no entry)",
                     absolute);
    }
    if (entry->kind == EntryKind::symlink) refuse_link(path, absolute);
    if (entry->kind == EntryKind::directory) {
      throw IsADirectory("'" + std::string(path) + "' is a directory", absolute);
    }
    if (entry->kind != EntryKind::file) {
      throw SystemError("'" + std::string(path) + "' is not a regular file", 0, absolute);
    }
    if (entry->size && *entry->size > max_bytes) {
      throw TransferCapExceeded("max_bytes", std::string(path), max_bytes, *entry->size);
    }
    auto data = reader.read_data(max_bytes);
    if (!data) throw TransferCapExceeded("max_bytes", std::string(path), max_bytes);
    return std::move(*data);
  } catch (const StreamDeadline&) {
    throw SystemError(
        "reading '" + std::string(path) + "' did not finish within the backend's request timeout",
        ETIMEDOUT, absolute);
  }
}

std::vector<SandboxEntry> DockerSandbox::list_dir(std::string_view path,
                                                  std::string_view working_directory) {
  const std::string absolute = confine_guest_path(path, working_directory);
  refuse_overlong(path, absolute);
  if (const auto root = host_root())
    return host_plane::list(root->fd(), absolute, working_directory);
  Walk walk(*this);
  refuse_symlinked_parents(walk.stat(), absolute, working_directory, /*include_self=*/true);
  const auto& self = walk.at(absolute);
  if (!self) throw NotFound("'" + std::string(path) + "' does not exist", absolute);
  if (self->kind != EntryKind::directory) {
    throw NotADirectory("'" + std::string(path) + "' is not a directory", absolute);
  }

  const std::string request = archive_path(absolute);
  const std::uint64_t ceiling = engine_->config.list_max_archive_bytes;
  std::vector<SandboxEntry> entries;
  try {
    EngineDownload download(*engine_->client, engine_->client->versioned(request),
                            Clock::now() + engine_->client->request_timeout());
    const long status = download.wait_for_head();
    if (status == 404) throw NotFound("'" + std::string(path) + "' does not exist", absolute);
    if (status != 200) {
      EngineResponse failed;
      failed.status = status;
      failed.body = download.read_rest(64u << 10);
      fail_path(failed, "GET", request, absolute, "the container engine could not list a path");
    }
    if (const auto header = download.header("x-docker-container-path-stat")) {
      const auto stat = decode_path_stat(*header);
      if (stat && stat->kind == EntryKind::symlink) {
        throw ConfinementError("'" + std::string(path) +
                               "' is a link; a listing never follows one");
      }
    }
    TarStreamReader reader(download);
    const auto root = reader.next();
    if (!root || root->kind != EntryKind::directory) {
      throw NotADirectory("'" + std::string(path) + "' is not a directory", absolute);
    }
    std::string prefix = root->path;
    while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
    prefix += '/';
    const std::string base = entry_path(absolute, working_directory);
    while (auto header = reader.next()) {
      if (download.consumed() > ceiling) {
        throw SystemError("'" + std::string(path) +
                              "' holds more than the backend lists through the engine's archive "
                              "endpoint (" +
                              std::to_string(ceiling) + " bytes)",
                          EFBIG, absolute);
      }
      std::string name = header->path;
      if (!name.starts_with(prefix)) continue;
      name.erase(0, prefix.size());
      while (!name.empty() && name.back() == '/') name.pop_back();
      if (name.empty() || name.find('/') != std::string::npos) continue;  // not a direct child
      SandboxEntry entry;
      entry.path = base == "." ? name : base + "/" + name;
      entry.kind = header->kind;
      if (header->kind == EntryKind::file) entry.size_bytes = header->size;
      entries.push_back(std::move(entry));
    }
  } catch (const StreamDeadline&) {
    throw SystemError(
        "listing '" + std::string(path) + "' did not finish within the backend's request timeout",
        ETIMEDOUT, absolute);
  }
  std::sort(entries.begin(), entries.end(),
            [](const SandboxEntry& a, const SandboxEntry& b) { return a.path < b.path; });
  return entries;
}

// ---- removal ----------------------------------------------------------------------------------

void DockerSandbox::remove(std::string_view path, std::string_view working_directory,
                           bool recursive) {
  const std::string absolute = confine_guest_path(path, working_directory);
  if (absolute == normalize_guest_path(working_directory)) {
    throw ConfinementError("'" + std::string(path) +
                           "' names the working directory itself, which is never removed");
  }
  refuse_overlong(path, absolute);
  if (const auto root = host_root()) {
    host_plane::remove(root->fd(), absolute, path, recursive);
    return;
  }
  {
    Walk walk(*this);
    refuse_symlinked_parents(walk.stat(), absolute, working_directory);
    const auto& leaf = walk.at(absolute);
    if (!leaf) return;  // already gone is success
    if (leaf->kind == EntryKind::directory && !recursive) {
      throw SystemError("'" + std::string(path) + "' is a directory; removing it needs recursive",
                        EISDIR, absolute);
    }
  }
  // The removal runs in the guest, from inside the parent: `cd -P` then `pwd -P` proves that no
  // link led there (a parent swapped for a link since the walk shows up as another physical
  // path), and from then on the shell's working directory pins the real directory whatever the
  // guest renames. rm never follows a link: a link is unlinked, and -r does not descend one.
  static constexpr const char* kScript =
      "cd -P -- \"$1\" 2>/dev/null || exit 0\n"
      "[ \"$(pwd -P)\" = \"$1\" ] || exit 86\n"
      "[ -e \"./$2\" ] || [ -L \"./$2\" ] || exit 0\n"
      "exec rm $3 -- \"./$2\"\n";
  const std::string parent = parent_of(absolute);
  const std::string name = absolute.substr(absolute.rfind('/') + 1);
  ExecOptions options;
  options.working_directory = "/";
  options.timeout = engine_->client->request_timeout();
  options.max_output_bytes = 64u << 10;
  options.overflow = OutputOverflow::truncate;
  const ExecResult result = exec(Command::argv({"sh", "-c", kScript, "airlock-remove", parent, name,
                                                recursive ? "-rf" : "-f"}),
                                 options);
  if (result.exit_code == 86) {
    throw ConfinementError("'" + std::string(path) + "' passes through a link");
  }
  if (result.exit_code != 0) {
    throw SystemError("the sandbox refused to remove '" + std::string(path) +
                          "': " + result.stderr_text().substr(0, 200),
                      0, absolute);
  }
}

// ---- exec -------------------------------------------------------------------------------------

ExecResult DockerSandbox::exec(const Command& command, const ExecOptions& options) {
  const ExecOptions* effective = &options;
  ExecOptions with_environment;
  if (!identity_.environment.empty()) {
    with_environment = options;
    with_environment.environment.insert(with_environment.environment.begin(),
                                        identity_.environment.begin(), identity_.environment.end());
    effective = &with_environment;
  }
  ExecOutcome outcome =
      run_exec(*engine_->client, identity_.container_id, command, *effective,
               engine_->config.max_exec_output_bytes, [this] { return force_stop(); });
  if (outcome.may_not_have_started && !options.working_directory.empty()) {
    // The runtime could not start the command; a missing working directory is the usual reason
    // and deserves its own words.
    const auto directory = stat_path(normalize_guest_path(options.working_directory));
    if (!directory) {
      throw NotFound(
          "the working directory " + options.working_directory + " does not exist in the sandbox",
          options.working_directory);
    }
    if (directory->kind != EntryKind::directory && directory->kind != EntryKind::symlink) {
      throw NotADirectory(
          "the working directory " + options.working_directory + " is not a directory",
          options.working_directory);
    }
  }
  return std::move(outcome.result);
}

ExecResult DockerSandbox::run_code(std::string_view code, Milliseconds timeout) {
  const std::string& interpreter = engine_->config.run_code_interpreter;
  if (interpreter.empty()) {
    throw NotSupported(
        "run_code is not declared by this docker backend (set run_code_interpreter, e.g. "
        "\"python3\", for images that have one)");
  }
  ExecOptions options;
  options.working_directory = identity_.work_dir;
  options.timeout = timeout;
  options.stdin_bytes = std::string(code);
  if (options.stdin_bytes.empty()) options.stdin_bytes = "\n";  // an empty program still runs
  return exec(Command::argv({interpreter, "-"}), options);
}

}  // namespace airlock::docker
