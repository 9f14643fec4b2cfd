// A sandbox provider, as the router sees it: what it declares, and the lifecycle it owns.
//
// Declarations are read before any workload runs, and each one's *silence* is read as the seeds
// say — the distinction is deliberate and the router depends on it:
//
//   declaration    if the backend says nothing (nullopt)          kind of claim
//   isolation      (required)                                     safety
//   capabilities   {exec, files_in} — charitable                  functionality
//   egress_modes   the empty set: every mode is refused, closed    safety
//                  included — a backend that never declared egress
//                  cannot have been enforcing it
//   limits         kDefaultSandboxLimits                          safety
//   os_families    the empty set: refuses only a spec that asks   neither
//
// Declare only what you enforce: a backend that cannot cut the network does not list `closed`.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "airlock/records.hpp"
#include "airlock/sandbox.hpp"

namespace airlock {

// One sandbox as a backend's durable state describes it (for `airlock ls` and purges).
// Label values are hashed exactly as the backend stores them; never the raw key.
struct SandboxRecord {
  std::string backend;
  std::string instance_id;
  std::string kind;
  std::map<std::string, std::string> labels;  // "airlock.scope" → mapped value, …
  std::string egress_posture;
  std::string state;  // "running", "dead", … (backend's word)
  std::chrono::system_clock::time_point created_at{};
};

class SandboxBackend {
 public:
  virtual ~SandboxBackend() = default;
  SandboxBackend(const SandboxBackend&) = delete;
  SandboxBackend& operator=(const SandboxBackend&) = delete;

  virtual std::string name() const = 0;
  virtual Isolation isolation() const = 0;
  virtual std::optional<EgressSet> egress_modes() const { return std::nullopt; }
  virtual std::optional<CapabilitySet> capabilities() const { return std::nullopt; }
  virtual std::optional<SandboxLimits> limits() const { return std::nullopt; }
  virtual std::optional<OsFamilySet> os_families() const { return std::nullopt; }

  // Get-or-create, with warm reuse per (key, kind, egress posture): two specs with different
  // kinds never share a sandbox, and a warm sandbox never changes its egress posture. Safe under
  // concurrent calls for one key (parallel tool calls in one model message are normal). Throws
  // InvalidArgument for a spec the backend cannot make sense of (e.g. no image), BackendError
  // when the provider fails.
  virtual std::shared_ptr<Sandbox> acquire(const SandboxKey& key, const SandboxSpec& spec) = 0;

  // Delete every kind's sandbox for `key`. Best effort; never throws.
  virtual void dispose(const SandboxKey& key) noexcept = 0;

  // Delete the one sandbox of `kind` for `key`; when `instance_id` is given, only if that is
  // still the live instance (deleting an instance that is already gone is success). Returns
  // whether nothing of that instance remains. Never throws.
  virtual bool dispose_kind(const SandboxKey& key, std::string_view kind,
                            std::optional<std::string_view> instance_id) noexcept = 0;

  // Delete every sandbox of the conversation, and its snapshots, and return how many sandboxes
  // went. Found from durable state (labels, a state directory) — never from this process's
  // memory alone, because the replica that receives a conversation delete is usually not the
  // one that created its sandboxes. `thread_id` unset: every thread of the scope. Never throws.
  virtual int dispose_scope(std::string_view scope,
                            std::optional<std::string_view> thread_id) noexcept = 0;

  // What the backend cannot hold and says so: each a sentence for operators (airlock check prints
  // them with an accepted decision, docs/backends/<name>.md has them in full). Default: none.
  virtual std::vector<std::string> stated_residuals() const { return {}; }

  // Every sandbox this backend's durable state knows about. Default: none.
  virtual std::vector<SandboxRecord> list_sandboxes() { return {}; }
  // Delete every sandbox in durable state, whoever created it, and every snapshot. Never
  // throws. Default: nothing.
  virtual int purge_all() noexcept { return 0; }

  // ---- snapshots (a backend that takes them declares Capability::snapshot) ----
  // What its snapshots hold; nullopt: it takes none (the default).
  virtual std::optional<SnapshotContent> snapshot_content() const { return std::nullopt; }
  // A new sandbox for (key, spec) holding the snapshot's state: a resume, or — called again
  // under another key of the conversation — a fork. The live sandbox of (key, spec.kind,
  // spec's posture), if any, is disposed of first. The snapshot stays (another fork may
  // follow). The caller has checked that `snapshot` belongs to key's conversation and is of
  // spec's kind: reach this through SandboxRouter::resume, which also runs every router check
  // on `spec`. NotSupported by default.
  virtual std::shared_ptr<Sandbox> acquire_from_snapshot(const SandboxKey& key,
                                                         const SandboxSpec& spec,
                                                         const SnapshotRecord& snapshot);
  // One snapshot by id, from durable state (any process's); nullopt when there is none.
  virtual std::optional<SnapshotRecord> find_snapshot(std::string_view id);
  // Every snapshot in durable state. Default: none.
  virtual std::vector<SnapshotRecord> list_snapshots() { return {}; }
  // Delete one snapshot; true when nothing of it is left (a missing one is gone). A resume
  // or fork in flight keeps what it already copied. Never throws.
  virtual bool delete_snapshot(std::string_view id) noexcept;

 protected:
  SandboxBackend() = default;
};

}  // namespace airlock
