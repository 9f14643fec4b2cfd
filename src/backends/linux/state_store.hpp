// Durable state of the linux backend: one directory per sandbox under <state_dir>/linux/, found
// by any process — never this process's memory alone.
//
//   <state_dir>/linux/              0700 (the state directory is checked first:
//                                   prepare_state_directory)
//     locks/<id>.lock               flock: get-or-create and dispose of one identity, across
//                                   processes (the files stay; removing a lock file someone waits
//                                   on would break the exclusion)
//     standby/<instance>.json       a standby monitor (standby.hpp)
//     snapshots/                    saved sandboxes (snapshots.hpp): never a sandbox's id
//     pool-<instance>/              a warm pool's sandbox, laid out as <id>/ below; renamed to
//                                   <id>/ when a conversation claims it (warm_pool.hpp)
//     <id>/                         0711: the sandbox's init passes through, nobody lists
//     <id>/record.json              the record (written before anything else exists, updated
//                                   once the init runs: a crash at any point leaves a record
//                                   naming everything to reclaim), with the control secret
//     <id>/control.sock             the init's control socket (answers only with the secret)
//     <id>/root/, <id>/storage/     mount points of the sandbox's root and storage (inside its
//                                   mount namespace only: on the host they stay empty)
//     <id>/egress/                  allowlist: where the host's proxy puts egress.sock
// <id> is sandbox_identity(key, kind, egress posture). Everything a guest writes lives in the
// sandbox's storage, never in this directory.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/unique_fd.hpp"

namespace airlock::linux_backend {

struct RecordFile {
  std::string id;
  std::string instance_id;
  std::string kind;
  std::map<std::string, std::string> labels;  // mapped (hashed) values only
  std::string egress_posture;
  // "creating" until the init reported ready, then "running"; a warm pool's sandbox is
  // "pooled" (no labels, no kind) until claimed.
  std::string state;
  std::string image;  // "host" or the rootfs directory
  std::string work_dir;
  std::vector<std::string> cgroups;
  long init_pid = 0;
  std::uint64_t init_start_time = 0;  // /proc/<pid>/stat field 22
  std::string boot_id;
  std::int64_t created_at_ms = 0;     // Unix time
  std::uint32_t uid_base = 0;
  bool privileged = false;
  // Unprivileged, on the user's subordinate ids: the file plane runs inside (file_agent.hpp).
  bool subordinate_ids = false;
  // Hex of the bytes every control request must carry. Empty in records written before the
  // secret existed: such a sandbox can be disposed of, never adopted.
  std::string control_secret;
  // A pooled sandbox's owner: the process whose pool holds its leash (a pooled sandbox whose
  // owner is gone is reclaimable by anyone). 0 otherwise.
  long pool_owner_pid = 0;
  std::uint64_t pool_owner_start_time = 0;
};

class StateStore {
 public:
  explicit StateStore(std::filesystem::path state_dir);

  const std::filesystem::path& base() const noexcept { return base_; }  // <state_dir>/linux
  std::filesystem::path sandbox_dir(const std::string& id) const { return base_ / id; }

  // Creates <state_dir>/linux and locks/ (mode 0700) when missing.
  void ensure_layout() const;
  // Exclusive flock on locks/<id>.lock, held while the descriptor lives.
  base::UniqueFd lock(const std::string& id) const;
  // Removes locks/<id>.lock. Only for an id that is never used again (a pool member's, once it
  // is claimed or gone): whoever still waits on the old file then finds nothing to act on.
  void forget_lock(const std::string& id) const noexcept;

  std::optional<RecordFile> read(const std::string& id) const;
  // Atomically replaces <id>/record.json (temporary sibling + rename). `kept`: the replaced
  // record is left beside it, under a record.json.<hex> name, until the directory is removed
  // (for the acquire path, where freeing a file costs more than writing one); a directory
  // without a record.json yet is written the ordinary way.
  enum class Replaced { removed, kept };
  void write(const RecordFile& record, Replaced replaced = Replaced::removed) const;
  // Identities with a directory here (records or leftovers).
  std::vector<std::string> ids() const;

 private:
  std::filesystem::path base_;
};

// What the kernel says about a process, to tell our init from a process that reused its pid.
std::optional<std::uint64_t> process_start_time(long pid);
std::string current_boot_id();
// The record's init is this very process, still running (not a zombie).
bool init_is_alive(const RecordFile& record);
// A pidfd for the record's init, verified against its start time after it was opened (so it
// cannot name a process that reused the pid). Invalid when the init is gone.
base::UniqueFd open_verified_init(const RecordFile& record);

std::string random_bytes(std::size_t count);
std::string random_hex(std::size_t bytes);
std::string to_hex(std::string_view bytes);
// The bytes of a hex string; empty when it is not one.
std::string from_hex(std::string_view hex);

}  // namespace airlock::linux_backend
