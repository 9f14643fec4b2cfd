// The daemon's durable record of the sandboxes it handed out, one JSON file per handle.
//
// A handle is opaque to clients but derived, not drawn: "sbx-" + 32 hex digits of SHA-256 over
// (serving backend, key, kind, egress posture) — the same tuple a backend keys its warm
// sandboxes on. So the same acquire always yields the same handle, a handle survives the
// instance behind it being condemned and replaced, and a restarted daemon answers the handles
// it gave out before: the record on disk holds the key and spec the handle stands for, which
// the daemon needs to go back through the router (the key is never guessed from a handle).
//
// Files: <state_dir>/<handle>.json, mode 0600 in a 0700 directory, written to a temporary
// sibling and renamed into place so a crash leaves the old record or the new one, never half.
// A record that cannot be read is logged and skipped — never a reason not to start.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "airlock/json.hpp"
#include "airlock/records.hpp"

namespace airlock::daemon {

struct HandleRecord {
  std::string handle;
  std::string backend;
  SandboxKey key;
  std::shared_ptr<const SandboxSpec> spec;
  std::string instance_id;      // the instance the last admitted call reached
  std::int64_t created_at = 0;  // unix seconds
};

// The handle for (backend, key, spec.kind, spec.egress_posture()).
std::string derive_handle(std::string_view backend, const SandboxKey& key, const SandboxSpec& spec);

class HandleStore {
 public:
  // Creates `directory` (0700) when missing and loads every record in it.
  explicit HandleStore(std::filesystem::path directory);

  const std::filesystem::path& directory() const noexcept { return directory_; }

  std::optional<HandleRecord> find(std::string_view handle) const;
  std::vector<HandleRecord> all() const;
  std::size_t count() const;

  // Stores `record` durably (replacing a record of the same handle). Throws SystemError.
  void put(const HandleRecord& record);

  enum class PutOutcome { created, updated, unchanged, conflict };
  // Stores `record` unless a record of the same handle holds a different spec (`conflict`,
  // nothing written). An existing record keeps its `created_at`.
  PutOutcome put_compatible(const HandleRecord& record);
  // Records that `handle` now reaches `instance_id`; a no-op when unchanged or unknown.
  void update_instance(std::string_view handle, std::string_view instance_id);
  // Forgets `handle`; true when it was known.
  bool erase(std::string_view handle);
  // Forgets every handle of (scope[, thread]); returns them.
  std::vector<HandleRecord> erase_scope(std::string_view scope,
                                        std::optional<std::string_view> thread_id);

 private:
  void write(const HandleRecord& record);  // caller holds mutex_
  void remove_file(std::string_view handle) noexcept;

  std::filesystem::path directory_;
  mutable std::mutex mutex_;
  std::map<std::string, HandleRecord, std::less<>> records_;
};

json::Json to_json(const HandleRecord& record);

}  // namespace airlock::daemon
