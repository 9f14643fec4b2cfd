// Durable state of the gvisor backend, found by any process — never this process's memory alone.
//
//   <state_dir>/gvisor/                 0711
//     runsc/                            runsc's own state root (--root), private to us
//     helpers/<digest>/                 the guest helper, copied once, bound read-only at /.airlock
//     locks/<id>.lock                   flock: get-or-create and dispose of one identity, across
//                                       processes (lock files stay: removing one that someone
//                                       waits on would break the exclusion)
//     sandboxes/<id>/record.json        written before the container is created, so a crash at
//                                       any point leaves a record naming what to reclaim
//     sandboxes/<id>/bundle/            config.json
//     sandboxes/<id>/storage/           the mount point of the sandbox's storage tmpfs (in its
//                                       shepherd's mount namespace only): runsc's overlay file
//                                       stores, everything the guest writes, bounded by
//                                       resources.disk_bytes
//     sandboxes/<id>/runsc.log          what runsc said at create
//     egress/                           0711: the Gofer (uid_base) passes through, lists nothing
//     egress/<id>/egress.sock           allowlist: the proxy's socket (dir 0700 and socket 0600,
//                                       both owned by uid_base), bound at /.airlock-egress
//     shared/                           0710 root:uid_base: the Gofer passes, no other user
//     shared/empty/                     01777 uid_base: the empty lower layer of /tmp, /dev/shm
//     snapshots/<snap-id>/              0700, root's: a saved sandbox (record.json, token, the
//                                       checkpoint image), each file 0600
//     snapshots/.<snap-id>.staging-<pid>  one being saved (reclaimed once its process is dead)
// <id> is the container id: "airlock-" + 8 hex of the state directory + "-" + sandbox_identity().
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backends/gvisor/process.hpp"

namespace airlock::gvisor_backend {

struct Record {
  std::string id;
  std::string instance_id;
  std::string kind;
  std::map<std::string, std::string> labels;  // mapped (hashed) values only
  std::string egress_posture;
  std::string state;  // "creating" until runsc reported the container running, then "running"
  std::string image;  // the reference as resolved ("name:tag") and its id
  std::string image_id;
  std::string work_dir;
  std::string platform;
  std::int64_t created_at_ms = 0;
  // What the bundle was made with, so that a snapshot of the sandbox can be restored into one
  // of the same shape: the helper directory bound at /.airlock, the store's size and the limits.
  std::string helper_directory;
  std::uint64_t disk_bytes = 0;
  std::optional<std::uint64_t> memory_bytes;
  std::optional<std::uint64_t> pids;
  std::optional<std::uint64_t> cpu_millis;
  std::string from_snapshot;  // the snapshot it was resumed from, if any
};

class StateStore {
 public:
  explicit StateStore(std::filesystem::path state_dir);

  const std::filesystem::path& base() const noexcept { return base_; }  // <state_dir>/gvisor
  std::filesystem::path runsc_root() const { return base_ / "runsc"; }
  std::filesystem::path sandbox_dir(const std::string& id) const {
    return base_ / "sandboxes" / id;
  }
  std::filesystem::path egress_dir(const std::string& id) const { return base_ / "egress" / id; }
  // Bound into the guest at kControlGuestDirectory: the keeper socket, owned by uid_base (the
  // Gofer's uid) and closed to everyone else.
  std::filesystem::path control_dir(const std::string& id) const { return base_ / "control" / id; }
  // The sandbox's token (host root's only), and where host processes ask the shepherd for the
  // keeper socket; the guest sees neither.
  std::filesystem::path token_file(const std::string& id) const {
    return sandbox_dir(id) / "token";
  }
  std::filesystem::path broker_socket(const std::string& id) const {
    return sandbox_dir(id) / "broker.sock";
  }
  std::filesystem::path shared_dir() const { return base_ / "shared"; }
  std::filesystem::path empty_dir() const { return base_ / "shared" / "empty"; }
  // Where the sandbox's storage tmpfs is mounted, in its shepherd's mount namespace only (on the
  // host an empty directory): runsc's overlay file stores live there.
  std::filesystem::path storage_dir(const std::string& id) const {
    return sandbox_dir(id) / "storage";
  }
  // Where the keeper socket is put aside while a snapshot is taken (the keeper cannot dial it
  // there: the guest never sees this directory).
  std::filesystem::path parked_keeper_socket(const std::string& id) const {
    return sandbox_dir(id) / "keeper.sock.parked";
  }
  std::filesystem::path snapshots_dir() const { return base_ / "snapshots"; }

  // Creates (or checks) every directory above, never through a link; `uid_base` owns empty/.
  void ensure_layout(std::uint32_t uid_base) const;
  base::UniqueFd lock(const std::string& id) const;

  std::optional<Record> read(const std::string& id) const;
  void write(const Record& record) const;
  // Identities with a directory under sandboxes/, egress/ or control/ (records or leftovers).
  std::vector<std::string> ids() const;
  // Removes sandboxes/<id>, egress/<id> and control/<id> entirely. Best effort.
  void remove(const std::string& id) const noexcept;

 private:
  std::filesystem::path base_;
};

std::string random_hex(std::size_t bytes);

}  // namespace airlock::gvisor_backend
