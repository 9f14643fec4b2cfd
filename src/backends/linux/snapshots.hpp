// The linux backend's snapshots: what a guest wrote, saved while the sandbox is frozen, kept
// until deleted or until its conversation goes.
//
//   <state_dir>/linux/snapshots/            0700, root's
//     snap-<24 hex>/                        0700
//       record.json                         0600: the SnapshotRecord, and how it was made
//       storage.stream                      0600: the guest's writable storage
//                                           (snapshot_stream.hpp), owners as guest ids
//     .snap-<24 hex>.staging-<pid>/         a capture under way (or a dead process's: reclaimed)
//
// An id is checked to be exactly "snap-" and 24 lowercase hex digits before it ever names a
// path. A snapshot is published by one rename of its whole staging directory.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "airlock/records.hpp"
#include "backends/linux/state_store.hpp"
#include "base/unique_fd.hpp"

namespace airlock::linux_backend {

// A sandbox's cgroup v2 freezer (cgroup.freeze): frozen while this lives, thawed when it goes
// (thawing is tried even when the freeze timed out). Throws BackendError when the sandbox has no
// v2 cgroup to freeze (this backend makes one unless per_command_cgroups is off and no limit is
// enforced through cgroup v2), or when it does not report frozen within `patience`.
class Freeze {
 public:
  Freeze(const std::vector<std::string>& cgroups, std::chrono::milliseconds patience);
  ~Freeze();
  Freeze(const Freeze&) = delete;
  Freeze& operator=(const Freeze&) = delete;

 private:
  std::string directory_;
};

// The cgroup among `cgroups` that carries a v2 freezer, or "" (then no snapshot can be taken).
std::string freezer_of(const std::vector<std::string>& cgroups);

// Why a snapshot of up to `needed` bytes may not land on a file system with `available` bytes
// free of `total`, or nullopt when it may: it must leave at least a twentieth of the file
// system (at most 1 GiB, at least 64 MiB) free.
std::optional<std::string> room_refusal(std::uint64_t available, std::uint64_t total,
                                        std::uint64_t needed);
// What a snapshot may write on that file system and still leave the reserve: the stream's
// bound when it is smaller than the sandbox's storage (a sparse file is stored whole, so what
// the storage uses is not a bound on the stream).
std::uint64_t room_for(std::uint64_t available, std::uint64_t total);

class SnapshotStore {
 public:
  explicit SnapshotStore(std::filesystem::path directory) : directory_(std::move(directory)) {}
  const std::filesystem::path& directory() const noexcept { return directory_; }

  // Saves the sandbox of `record` whose storage tmpfs is `storage` (an O_PATH descriptor from
  // its init): freezes it, writes the stream, thaws it, publishes the snapshot. `labels` are the
  // conversation's (from the sandbox's record). Throws BackendError; nothing is left on failure.
  SnapshotRecord capture(const RecordFile& record, int storage) const;

  std::optional<SnapshotRecord> find(std::string_view id) const;
  std::vector<SnapshotRecord> list() const;
  // True when nothing of it is left.
  bool remove(std::string_view id) const noexcept;
  // Every snapshot directory, readable record or not (purge).
  void remove_all() const noexcept;
  // The stream of a snapshot to resume, opened (an open stream stays readable when the snapshot
  // is deleted meanwhile). NotFound when it is gone.
  base::UniqueFd open_stream(const std::string& id) const;
  // Staging directories whose process is gone.
  void reclaim_staging() const noexcept;

 private:
  // <state>/linux/snapshots, made 0700 when missing; its descriptor.
  base::UniqueFd open_directory(bool create) const;

  std::filesystem::path directory_;
};

}  // namespace airlock::linux_backend
