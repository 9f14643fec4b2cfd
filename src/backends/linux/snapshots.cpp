#include "backends/linux/snapshots.hpp"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

#include "airlock/errors.hpp"
#include "airlock/json.hpp"
#include "backends/linux/id_slots.hpp"
#include "backends/linux/snapshot_stream.hpp"
#include "backends/linux/tree_removal.hpp"
#include "base/openat2.hpp"
#include "base/syscall_error.hpp"

namespace airlock::linux_backend {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kStreamFile = "storage.stream";
constexpr const char* kRecordFile = "record.json";
constexpr std::chrono::milliseconds kFreezePatience{10'000};
// What one entry costs the stream beyond its data, at most (kind, name, attributes): a bound
// for the host-disk check before anything is written.
constexpr std::uint64_t kEntryOverhead = 320;

bool write_small(const std::string& path, std::string_view text) {
  base::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  return fd && ::write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

std::string read_small(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

bool reports_frozen(const std::string& directory) {
  const std::string events = read_small(directory + "/cgroup.events");
  return events.find("frozen 1") != std::string::npos;
}

// Writes a new file of `text` (0600) beneath `directory`.
void write_new_file(int directory, const char* name, const std::string& text) {
  base::UniqueFd fd(
      ::openat(directory, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd || ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()) ||
      ::fsync(fd.get()) != 0) {
    throw BackendError("the snapshot could not be saved", base::errno_error("write", name));
  }
}

}  // namespace

std::string freezer_of(const std::vector<std::string>& cgroups) {
  for (const auto& directory : cgroups) {
    if (::access((directory + "/cgroup.freeze").c_str(), W_OK) == 0) return directory;
  }
  return {};
}

Freeze::Freeze(const std::vector<std::string>& cgroups, std::chrono::milliseconds patience)
    : directory_(freezer_of(cgroups)) {
  if (directory_.empty()) {
    throw BackendError(
        "the sandbox cannot be frozen, so no consistent snapshot of it can be taken",
        "it has no cgroup v2 directory with cgroup.freeze (the linux backend makes one for "
        "per-command cgroups or v2 limits; per_command_cgroups is off and no limit is enforced "
        "through cgroup v2 here)");
  }
  if (!write_small(directory_ + "/cgroup.freeze", "1")) {
    const int error = errno;
    directory_.clear();
    throw BackendError("the sandbox could not be frozen for its snapshot",
                       base::errno_error("write cgroup.freeze").what(),
                       std::error_code(error, std::generic_category()));
  }
  const auto deadline = Clock::now() + patience;
  while (!reports_frozen(directory_)) {
    if (Clock::now() >= deadline) {
      write_small(directory_ + "/cgroup.freeze", "0");
      directory_.clear();
      throw BackendError("the sandbox did not freeze in time for its snapshot",
                         "cgroup.events never said frozen");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

Freeze::~Freeze() {
  if (directory_.empty()) return;
  if (!write_small(directory_ + "/cgroup.freeze", "0")) {
    spdlog::warn("linux: a sandbox could not be thawed after its snapshot ({}): {}", directory_,
                 base::errno_text(errno));
  }
}

namespace {
std::uint64_t reserve_of(std::uint64_t total) {
  return std::clamp<std::uint64_t>(total / 20, std::uint64_t{64} << 20, std::uint64_t{1} << 30);
}
}  // namespace

std::uint64_t room_for(std::uint64_t available, std::uint64_t total) {
  const std::uint64_t reserve = reserve_of(total);
  return available > reserve ? available - reserve : 0;
}

std::optional<std::string> room_refusal(std::uint64_t available, std::uint64_t total,
                                        std::uint64_t needed) {
  const std::uint64_t reserve = reserve_of(total);
  if (available >= needed && available - needed >= reserve) return std::nullopt;
  return "the snapshot may take up to " + std::to_string(needed >> 20) + " MiB and the disk " +
         "holding the state directory has " + std::to_string(available >> 20) +
         " MiB free; at least " + std::to_string(reserve >> 20) + " MiB must stay free";
}

base::UniqueFd SnapshotStore::open_directory(bool create) const {
  if (create && ::mkdir(directory_.c_str(), 0700) != 0 && errno != EEXIST) {
    throw BackendError("the snapshot directory could not be made",
                       base::errno_error("mkdir", directory_.string()));
  }
  base::UniqueFd fd(::open(directory_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    if (!create && errno == ENOENT) return fd;
    throw BackendError("the snapshot directory could not be opened",
                       base::errno_error("open", directory_.string()));
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0 || info.st_uid != ::geteuid() || (info.st_mode & 077) != 0) {
    throw BackendError("the snapshot directory is not this user's only (mode 0700)",
                       directory_.string());
  }
  return fd;
}

SnapshotRecord SnapshotStore::capture(const RecordFile& source, int storage) const {
  if (!source.privileged) {
    throw NotSupported(
        "the linux backend takes snapshots only as root: unprivileged, the host user cannot "
        "read what the guest's root made unreadable, nor give a resumed guest its own ids");
  }
  struct statfs storage_fs {};
  if (::fstatfs(storage, &storage_fs) != 0 || storage_fs.f_type != TMPFS_MAGIC) {
    throw BackendError("the sandbox's storage is not what it was made as",
                       "its descriptor is not a tmpfs");
  }
  // The storage's own size bounds the stream: a snapshot never holds more than the sandbox could.
  const std::uint64_t storage_bytes =
      static_cast<std::uint64_t>(storage_fs.f_blocks) * static_cast<std::uint64_t>(storage_fs.f_bsize);
  const std::uint64_t used =
      static_cast<std::uint64_t>(storage_fs.f_blocks - storage_fs.f_bfree) *
          static_cast<std::uint64_t>(storage_fs.f_bsize) +
      static_cast<std::uint64_t>(storage_fs.f_files - storage_fs.f_ffree) * kEntryOverhead;
  const std::uint64_t needed = std::min(storage_bytes, used);

  const bool host_root = source.image == "host";
  const char* kept = host_root ? "work" : "upper";
  std::vector<std::pair<std::string, base::UniqueFd>> sections;
  for (const char* name : {kept, "tmp"}) {
    // The storage's own top-level directories: the guest sees only binds of them, never the
    // storage's root, so it cannot have replaced one with a link (and the walk refuses one).
    auto opened = base::openat2(storage, name, O_PATH | O_DIRECTORY, base::kResolveConfined);
    if (!opened) {
      throw BackendError("the sandbox's storage has no " + std::string(name) + " directory",
                         base::SyscallError(opened.error, "openat2").what());
    }
    sections.emplace_back(name, std::move(opened.fd));
  }

  base::UniqueFd snapshots = open_directory(true);
  SnapshotRecord record;
  record.id = "snap-" + random_hex(12);
  record.backend = "linux";
  record.content = SnapshotContent::filesystem;
  record.kind = source.kind;
  record.egress_posture = source.egress_posture;
  record.image = source.image;
  record.work_dir = source.work_dir;
  record.labels = source.labels;
  record.source_instance_id = source.instance_id;
  record.created_at = std::chrono::system_clock::now();
  const std::string staging = "." + record.id + ".staging-" + std::to_string(::getpid());
  if (::mkdirat(snapshots.get(), staging.c_str(), 0700) != 0) {
    throw BackendError("the snapshot could not be saved", base::errno_error("mkdir", staging));
  }
  try {
    base::UniqueFd stage(
        ::openat(snapshots.get(), staging.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct statvfs disk {};
    if (!stage || ::fstatvfs(stage.get(), &disk) != 0) {
      throw BackendError("the snapshot could not be saved", base::errno_error("open", staging));
    }
    const std::uint64_t available = static_cast<std::uint64_t>(disk.f_bavail) * disk.f_frsize;
    const std::uint64_t total = static_cast<std::uint64_t>(disk.f_blocks) * disk.f_frsize;
    if (auto refusal = room_refusal(available, total, needed)) {
      throw BackendError("there is no room on the host for this snapshot", *refusal);
    }
    // The stream stops at the storage's size, or sooner where the host disk's reserve begins.
    const std::uint64_t room = room_for(available, total);
    const std::uint64_t bound = std::min(storage_bytes, room);
    base::UniqueFd stream(::openat(stage.get(), kStreamFile,
                                   O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!stream) {
      throw BackendError("the snapshot could not be saved", base::errno_error("open", kStreamFile));
    }
    snapshot_stream::Writer writer(stream.get(), {source.uid_base, kIdsPerSandbox}, bound);
    snapshot_stream::Outcome outcome = writer.start();
    {
      // Nothing of the guest runs while its storage is read: the copy is of one instant.
      Freeze frozen(source.cgroups, kFreezePatience);
      for (const auto& [name, directory] : sections) {
        if (!outcome) break;
        outcome = writer.section(name, directory.get());
      }
      if (outcome) outcome = writer.finish();
    }
    if (!outcome) {
      const std::string detail = outcome.what + ": " + base::errno_text(outcome.error);
      if (outcome.error == EFBIG && bound < storage_bytes) {
        throw BackendError("there is no room on the host for this snapshot",
                           "it grew past what the disk holding the state directory can take "
                           "and keep its reserve (" +
                               std::to_string(room >> 20) + " MiB)");
      }
      if (outcome.error == EFBIG) {
        throw BackendError("the snapshot would be larger than the sandbox's storage", detail);
      }
      throw BackendError("the sandbox's storage could not be saved", detail,
                         std::error_code(outcome.error, std::generic_category()));
    }
    if (::fsync(stream.get()) != 0) {
      throw BackendError("the snapshot could not be saved", base::errno_error("fsync", kStreamFile));
    }
    record.bytes = writer.written();
    const snapshot_stream::Counts& counts = writer.counts();
    json::Json value = json::to_json(record);
    value["linux"] = {{"stream_format", 1},
                      {"root", host_root ? "host" : "directory"},
                      {"sections", json::Json::array({kept, "tmp"})},
                      {"storage_bytes", storage_bytes},
                      {"files", counts.files},
                      {"directories", counts.directories},
                      {"symlinks", counts.symlinks},
                      {"hard_links", counts.hard_links},
                      {"whiteouts", counts.whiteouts},
                      {"fifos", counts.fifos},
                      {"dropped_sockets", counts.dropped_sockets},
                      {"dropped_devices", counts.dropped_devices},
                      {"dropped_xattrs", counts.dropped_xattrs}};
    write_new_file(stage.get(), kRecordFile, value.dump(2) + "\n");
    if (::renameat(snapshots.get(), staging.c_str(), snapshots.get(), record.id.c_str()) != 0) {
      throw BackendError("the snapshot could not be published",
                         base::errno_error("rename", record.id));
    }
    ::fsync(snapshots.get());
  } catch (...) {
    (void)remove_tree(snapshots.get(), staging);
    throw;
  }
  spdlog::info("linux: sandbox {} saved as {} ({} KiB)", source.id, record.id, record.bytes >> 10);
  return record;
}

std::optional<SnapshotRecord> SnapshotStore::find(std::string_view id) const {
  if (!is_snapshot_id(id)) return std::nullopt;
  try {
    base::UniqueFd snapshots = open_directory(false);
    if (!snapshots) return std::nullopt;
    const std::string path = std::string(id) + "/" + kRecordFile;
    auto opened = base::openat2(snapshots.get(), path.c_str(), O_RDONLY, base::kResolveConfined);
    if (!opened) return std::nullopt;
    std::string text;
    char buffer[4096];
    for (;;) {
      const ssize_t got = ::read(opened.fd.get(), buffer, sizeof buffer);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      text.append(buffer, static_cast<std::size_t>(got));
      if (text.size() > (1u << 20)) return std::nullopt;
    }
    SnapshotRecord record =
        json::parse_snapshot_record(json::Json::parse(text), "snapshot " + std::string(id));
    if (record.id != id || record.backend != "linux") return std::nullopt;
    return record;
  } catch (const std::exception& error) {
    spdlog::warn("linux: snapshot {}: {}", id, error_detail(error));
    return std::nullopt;
  }
}

std::vector<SnapshotRecord> SnapshotStore::list() const {
  std::vector<SnapshotRecord> out;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(directory_, error)) {
    const std::string name = entry.path().filename().string();
    if (!is_snapshot_id(name)) continue;  // a staging directory, or nothing of ours
    if (auto record = find(name)) out.push_back(std::move(*record));
  }
  return out;
}

bool SnapshotStore::remove(std::string_view id) const noexcept {
  if (!is_snapshot_id(id)) return true;  // no such snapshot can exist
  try {
    base::UniqueFd snapshots = open_directory(false);
    if (!snapshots) return true;
    return remove_tree(snapshots.get(), std::string(id)).error_number == 0;
  } catch (const std::exception& error) {
    spdlog::warn("linux: deleting snapshot {} failed: {}", id, error_detail(error));
    return false;
  }
}

void SnapshotStore::remove_all() const noexcept {
  try {
    base::UniqueFd snapshots = open_directory(false);
    if (!snapshots) return;
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(directory_, error)) {
      const std::string name = entry.path().filename().string();
      if (is_snapshot_id(name)) (void)remove_tree(snapshots.get(), name);
    }
  } catch (const std::exception& error) {
    spdlog::warn("linux: removing every snapshot failed: {}", error_detail(error));
  }
}

base::UniqueFd SnapshotStore::open_stream(const std::string& id) const {
  if (!is_snapshot_id(id)) throw NotFound("no snapshot '" + id + "'");
  base::UniqueFd snapshots = open_directory(false);
  if (!snapshots) throw NotFound("no snapshot '" + id + "'");
  const std::string path = id + "/" + kStreamFile;
  auto opened = base::openat2(snapshots.get(), path.c_str(), O_RDONLY, base::kResolveConfined);
  if (!opened) throw NotFound("no snapshot '" + id + "'");
  return std::move(opened.fd);
}

void SnapshotStore::reclaim_staging() const noexcept {
  try {
    base::UniqueFd snapshots = open_directory(false);
    if (!snapshots) return;
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(directory_, error)) {
      const std::string name = entry.path().filename().string();
      const auto marker = name.rfind(".staging-");
      if (name.empty() || name.front() != '.' || marker == std::string::npos) continue;
      const long pid = std::strtol(name.c_str() + marker + 9, nullptr, 10);
      // This process's own: a capture under way on another thread.
      if (pid == ::getpid()) continue;
      if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) == 0) continue;
      (void)remove_tree(snapshots.get(), name);
    }
  } catch (const std::exception& error) {
    spdlog::warn("linux: reclaiming half-made snapshots failed: {}", error_detail(error));
  }
}

}  // namespace airlock::linux_backend
