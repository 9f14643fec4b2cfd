// The gvisor backend's snapshots: runsc's checkpoint of a running sandbox, restored into a new
// container (docs/backends/gvisor.md, "Snapshots").
//
// gVisor saves the whole sandbox kernel — every process, its memory and the overlay's file
// stores (what the guest wrote) — but not a connection to a host socket: a guest holding one
// fails the save. The keeper holds two to the keeper socket at all times, so a snapshot first
// takes the socket's name away (the keeper cannot dial again), closes every connection waiting
// on it (the keeper's idle handlers see the hang-up and exit), saves with --leave-running, and
// gives the name back: the keeper dials again, in the source and in every restored copy, where
// the same guest path leads to the new sandbox's own keeper socket.
#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "airlock/errors.hpp"
#include "airlock/json.hpp"
#include "backends/gvisor/bundle.hpp"
#include "backends/gvisor/cleanup.hpp"
#include "backends/gvisor/guest_protocol.hpp"
#include "backends/gvisor/gvisor_backend.hpp"
#include "backends/kit/contained.hpp"

namespace airlock::gvisor_backend {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// How often a save is tried while the guest still holds a connection to the host (an idle
// handler that has not yet seen its hang-up, say) before the snapshot is refused.
constexpr int kSaveAttempts = 5;

// Writes `content` to a new file `path`, 0600, never through a link.
void write_private(const fs::path& path, std::string_view content) {
  base::UniqueFd file(
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!file ||
      ::write(file.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size())) {
    throw SystemError("could not write a snapshot's file", errno, path.string());
  }
}

std::string read_whole(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// gVisor refuses to save a connected socket whose other end is the host's (its state has no
// encoding for one): the save panics in SCMConnectedEndpoint's encoder.
bool held_host_connection(const std::string& words) {
  return words.find("ConnectedEndpoint") != std::string::npos;
}

std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

}  // namespace

fs::path GvisorBackend::snapshot_dir(const std::string& id) const {
  return store_.snapshots_dir() / id;
}

std::string GvisorBackend::runsc_version() const {
  std::lock_guard lock(version_mutex_);
  if (runsc_version_.empty()) {
    const Completed answered =
        run_to_completion({runsc_->binary().string(), "--version"}, config_->runsc_timeout);
    if (answered.exit_code != 0 || answered.stdout_text.empty()) {
      throw BackendError("runsc would not say its version",
                         runsc_->binary().string() + " --version: " + answered.stderr_text);
    }
    runsc_version_ = first_line(answered.stdout_text);
  }
  return runsc_version_;
}

SnapshotRecord GvisorBackend::take_snapshot(GvisorSandbox& sandbox) {
  const std::string id = sandbox.container_id();
  // The identity's lock: no acquire, dispose or other snapshot of this sandbox meanwhile.
  const base::UniqueFd across_processes = store_.lock(id);
  const auto source = store_.read(id);
  if (!source || source->instance_id != sandbox.instance_id() || source->state != "running") {
    throw SandboxInvalidated("the gvisor sandbox is gone; acquire it again");
  }
  if (source->helper_directory.empty()) {
    throw NotSupported(
        "this gvisor sandbox was made before the backend took snapshots (its bundle lacks what "
        "a restore needs); dispose of it and acquire it again");
  }
  const auto running = runsc_->state(id);
  if (!running || running->status != "running") {
    throw SandboxInvalidated("the gvisor sandbox is not running (" +
                             (running ? running->status : std::string("unknown to runsc")) +
                             "); acquire it again");
  }
  const std::string version = runsc_version();

  SnapshotRecord record;
  record.id = "snap-" + random_hex(12);
  record.backend = "gvisor";
  record.content = SnapshotContent::filesystem_and_memory;
  record.kind = source->kind;
  record.egress_posture = source->egress_posture;
  record.image = source->image;
  record.work_dir = source->work_dir;
  record.labels = source->labels;
  record.source_instance_id = source->instance_id;
  record.created_at = std::chrono::system_clock::now();

  const fs::path staging =
      store_.snapshots_dir() / ("." + record.id + ".staging-" + std::to_string(::getpid()));
  if (::mkdir(staging.c_str(), 0700) != 0) {
    throw SystemError("could not make a snapshot's directory", errno, staging.string());
  }
  std::error_code error;
  const auto started = Clock::now();
  try {
    // The keeper socket's name goes aside (into the sandbox's own directory, which the guest
    // never sees) while the sandbox is saved, and comes back whatever happens.
    const fs::path socket = store_.control_dir(id) / kKeeperSocketName;
    const fs::path parked = store_.parked_keeper_socket(id);
    if (::rename(socket.c_str(), parked.c_str()) != 0) {
      throw SystemError("could not set the sandbox's keeper socket aside", errno, socket.string());
    }
    struct Unpark {
      const fs::path& socket;
      const fs::path& parked;
      ~Unpark() {
        if (::rename(parked.c_str(), socket.c_str()) != 0) {
          spdlog::error("gvisor: could not give the keeper socket back at {}: {}", socket.string(),
                        std::strerror(errno));
        }
      }
    } unpark{socket, parked};
    const fs::path image = staging / "image";
    std::string last_words;
    bool saved = false;
    for (int attempt = 0; attempt < kSaveAttempts && !saved; ++attempt) {
      // Every connection the keeper left waiting is closed; it cannot dial another.
      sandbox.guest_channel().drain(std::chrono::milliseconds(50 + 100 * attempt));
      fs::remove_all(image, error);
      const Completed done = run_to_completion(
          runsc_->command({"checkpoint", "--image-path=" + image.string(), "--leave-running", id}),
          config_->runsc_timeout * 5);
      if (done.exit_code == 0) {
        saved = true;
        break;
      }
      last_words = done.stderr_text.empty() ? done.stdout_text : done.stderr_text;
      if (!held_host_connection(last_words)) break;
    }
    if (!saved) {
      if (held_host_connection(last_words)) {
        throw BackendError(
            "the gvisor sandbox could not be saved: it holds a connection to the host (a "
            "command another process runs in it, or a connection through the egress proxy), "
            "which gVisor cannot save; try again once none is open",
            "runsc checkpoint " + id + ": " + first_line(last_words));
      }
      throw BackendError("the gvisor sandbox could not be saved",
                         "runsc checkpoint " + id + ": " + last_words.substr(0, 2000));
    }
  } catch (...) {
    fs::remove_all(staging, error);
    throw;
  }
  const double saved_ms = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
  try {
    const auto after = runsc_->state(id);
    if (!after || after->status != "running") {
      throw BackendError(
          "the gvisor sandbox did not run on after it was saved",
          "runsc state " + id + ": " + (after ? after->status : std::string("unknown to runsc")));
    }
    // What runsc wrote is made root's alone, as everything else here.
    ::chmod((staging / "image").c_str(), 0700);
    for (const auto& entry : fs::directory_iterator(staging / "image")) {
      ::chmod(entry.path().c_str(), 0600);
      record.bytes += static_cast<std::uint64_t>(entry.file_size());
    }
    write_private(staging / "token", read_whole(store_.token_file(id)));
    json::Json value = json::to_json(record);
    json::Json made = {{"image_id", source->image_id},
                       {"helper_directory", source->helper_directory},
                       {"platform", source->platform},
                       {"runsc_version", version},
                       {"disk_bytes", source->disk_bytes}};
    if (source->memory_bytes) made["memory_bytes"] = *source->memory_bytes;
    if (source->pids) made["pids"] = *source->pids;
    if (source->cpu_millis) made["cpu_millis"] = *source->cpu_millis;
    value["gvisor"] = made;
    write_private(staging / "record.json", value.dump(2));
    fs::rename(staging, snapshot_dir(record.id));
  } catch (...) {
    fs::remove_all(staging, error);
    throw;
  }
  spdlog::info("gvisor: sandbox {} saved as {} ({} KiB, {:.0f} ms)", id, record.id,
               record.bytes >> 10, saved_ms);
  return record;
}

json::Json GvisorBackend::read_snapshot_json(const std::string& id) const {
  if (!is_snapshot_id(id)) throw NotFound("no snapshot '" + id + "'");
  std::ifstream in(snapshot_dir(id) / "record.json");
  if (!in) throw NotFound("no snapshot '" + id + "'");
  try {
    return json::Json::parse(in);
  } catch (const std::exception& failure) {
    throw BackendError("snapshot '" + id + "' has an unreadable record", failure.what());
  }
}

std::optional<SnapshotRecord> GvisorBackend::find_snapshot(std::string_view id) {
  if (!is_snapshot_id(id)) return std::nullopt;
  try {
    return json::parse_snapshot_record(read_snapshot_json(std::string(id)), "record.json");
  } catch (const NotFound&) {
    return std::nullopt;
  } catch (const std::exception& failure) {
    spdlog::warn("gvisor: snapshot {}: {}", id, error_detail(failure));
    return std::nullopt;
  }
}

std::vector<SnapshotRecord> GvisorBackend::list_snapshots() {
  std::vector<SnapshotRecord> out;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(store_.snapshots_dir(), error)) {
    const std::string name = entry.path().filename().string();
    if (!is_snapshot_id(name)) continue;  // a staging directory, or nothing of ours
    if (auto record = find_snapshot(name)) out.push_back(std::move(*record));
  }
  return out;
}

bool GvisorBackend::delete_snapshot(std::string_view id) noexcept {
  bool gone = true;
  backend_kit::contained("gvisor", "delete_snapshot", [&] {
    if (!is_snapshot_id(id)) return;
    std::error_code error;
    fs::remove_all(snapshot_dir(std::string(id)), error);
    gone = !error;
  });
  return gone;
}

void GvisorBackend::reclaim_snapshot_staging() noexcept {
  backend_kit::contained("gvisor", "reclaim_snapshot_staging", [&] {
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(store_.snapshots_dir(), error)) {
      const std::string name = entry.path().filename().string();
      const auto marker = name.rfind(".staging-");
      if (name.empty() || name.front() != '.' || marker == std::string::npos) continue;
      const long pid = std::strtol(name.c_str() + marker + 9, nullptr, 10);
      // A live process's (this one's included) is being saved now.
      if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) == 0) continue;
      fs::remove_all(entry.path(), error);
    }
  });
}

std::shared_ptr<Sandbox> GvisorBackend::acquire_from_snapshot(const SandboxKey& key,
                                                              const SandboxSpec& spec,
                                                              const SnapshotRecord& snapshot) {
  if (snapshot.backend != "gvisor" || !is_snapshot_id(snapshot.id)) {
    throw InvalidArgument("snapshot '" + snapshot.id + "' is not one of the gvisor backend's",
                          "snapshot");
  }
  if (spec.egress() == Egress::unrestricted) {
    throw EgressNotEnforced(
        "the gvisor backend never gives a sandbox the host's network (unrestricted); it runs "
        "closed, or allowlisted through the host's egress proxy",
        "egress");
  }
  Restore from{snapshot.id, read_snapshot_json(snapshot.id)};
  const json::Json& made = from.saved.at("gvisor");
  // A checkpoint is the Sentry's own encoding: only the runsc that wrote it, on the platform
  // it ran on, reads it back.
  const std::string saved_version = made.at("runsc_version").get<std::string>();
  if (saved_version != runsc_version()) {
    throw BackendError(
        "snapshot '" + snapshot.id + "' cannot be resumed here",
        "it was saved by " + saved_version + ", this backend runs " + runsc_version());
  }
  const std::string saved_platform = made.at("platform").get<std::string>();
  if (saved_platform != to_string(platform_)) {
    throw BackendError("snapshot '" + snapshot.id + "' cannot be resumed here",
                       "it was saved on gVisor's " + saved_platform +
                           " platform, this backend "
                           "runs " +
                           std::string(to_string(platform_)));
  }
  if (!fs::is_regular_file(fs::path(made.at("helper_directory").get<std::string>()) /
                           gvisor_guest::kGuestHelperName)) {
    throw BackendError("snapshot '" + snapshot.id + "' cannot be resumed here",
                       "the guest helper it ran is no longer installed (" +
                           made.at("helper_directory").get<std::string>() + ")");
  }
  const std::string id = container_id(key, spec.kind(), spec.egress_posture());
  const auto held = live_.mutex_for(id);
  std::lock_guard in_process(*held);
  const base::UniqueFd across_processes = store_.lock(id);
  // The live sandbox of this key, kind and posture, if any, makes way for the resumed one.
  if (store_.read(id) || (runsc_->may_know(id) && runsc_->state(id)) ||
      !leftover_cgroups(id).empty()) {
    teardown_locked(id);
  }
  auto created = create(id, key, spec, &from);
  live_.remember(id, created);
  return created;
}

}  // namespace airlock::gvisor_backend
