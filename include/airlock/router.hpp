// The router: picks the backend, refuses an unsafe or unable one loudly before anything runs,
// and owns the call lifecycle of every sandbox it hands out.
//
// Checks, in this order, at `ensure_can_serve` and again at every `acquire` (each refusal names
// its check; nothing is logged, warned, degraded or substituted):
//
//   1. denied-capabilities  spec.requires ∩ denied_capabilities      → CapabilityDenied
//   2. denied-identities    spec.identities ∩ denied_identities      → IdentityDenied
//   3. isolation-floor      the backend's rung meets the stricter of the host floor and the
//                           spec's own min_isolation (a spec raises the floor, never lowers it);
//                           a rung not on the ladder is refused      → BackendNotPermitted
//   4. capabilities         spec.requires − capabilities (silence = {exec, files_in})
//                                                                    → CapabilityNotSupported
//   5. os-family            only when the spec asks                  → OsFamilyNotSupported
//   6. transfer-limits      spec.files_in / files_out within the backend's ceilings (silence =
//                           defaults); refused, never clamped        → TransferLimitsNotPermitted
//   7. egress               spec.egress ∈ egress_modes (silence = ∅, so every mode is refused)
//                                                                    → EgressNotEnforced
//
// Backend selection is by name or position, never by capability: if the selected backend
// cannot serve a spec the router refuses; it does not try the next one. A weaker backend would
// break the host's posture, a stronger one would hide a misconfiguration.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "airlock/backend.hpp"
#include "airlock/records.hpp"

namespace airlock {

struct RouterOptions {
  // The host's floor. The default is the production posture; a developer machine opts down
  // explicitly (e.g. Isolation::container for the `linux` backend).
  Isolation min_isolation = Isolation::microvm;
  // The backend to serve specs, by name; unset = the first registered. The others are reached
  // only by dispose / dispose_scope.
  std::optional<std::string> selected;
  // Host posture, a hard stop: a spec requiring one of these is refused whatever the backend.
  CapabilitySet denied_capabilities;
  IdentitySet denied_identities;
};

// One check that passed, for `airlock check` and logs.
struct CheckOutcome {
  std::string check;   // "isolation-floor", "egress", …
  std::string detail;  // "container meets the floor container"
};

// What the router decided for a spec.
struct RoutingDecision {
  std::string backend;
  Isolation backend_isolation = Isolation::none;
  Isolation effective_floor = Isolation::microvm;
  std::vector<CheckOutcome> passed;
};

class SandboxRouter;

// One admitted call over (key, kind), held for the call's duration (RAII; move-only).
//
// Calls over one (key, kind) run concurrently. An *exclusive* call waits until every other call
// has left and is admitted alone. A call whose command's end is unknown (a timeout, an overflow,
// a cancellation) `condemn`s the instance it acquired: the delete is queued and runs when the
// last call in flight leaves — so a parallel call is never cut off underneath — and every later
// call waits for it, so nothing reaches an instance being deleted.
class CallAdmission {
 public:
  CallAdmission(CallAdmission&& other) noexcept;
  CallAdmission& operator=(CallAdmission&&) = delete;
  CallAdmission(const CallAdmission&) = delete;
  ~CallAdmission();

  // The router's acquire (every check, then get-or-create), remembered for `condemn`.
  std::shared_ptr<Sandbox> acquire();
  // The sandbox this call acquired, if any.
  const std::shared_ptr<Sandbox>& sandbox() const noexcept { return sandbox_; }

  // Queue the delete of the instance this call acquired. Idempotent; no-op before acquire.
  void condemn() noexcept;
  bool condemned() const noexcept { return condemned_; }

  // Leave now (the destructor does the same). When this is the last call out and deletes are
  // queued, they run here — or on the router's background worker with `in_background`, so that
  // a caller who has already given up waiting does not wait for the delete too.
  void release(bool in_background = false) noexcept;

 private:
  friend class SandboxRouter;
  CallAdmission(SandboxRouter* router, SandboxKey key, std::shared_ptr<const SandboxSpec> spec,
                bool exclusive);

  SandboxRouter* router_;
  SandboxKey key_;
  std::shared_ptr<const SandboxSpec> spec_;
  bool exclusive_;
  bool released_ = false;
  bool condemned_ = false;
  std::shared_ptr<Sandbox> sandbox_;
};

struct CallOptions {
  bool exclusive = false;
  // How long to wait for admission; expiry raises QueuedTimeout.
  Milliseconds timeout{30'000};
  std::stop_token stop;  // a stop request while waiting raises QueuedTimeout too
};

// Disposes a conversation's sandboxes however the block ends (RAII). The count is written to the
// ScopeDisposal after the block, never inside it; disposal never throws, so it cannot mask the
// block's own error.
class ScopeGuard {
 public:
  ScopeGuard(ScopeGuard&&) noexcept;
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;
  ScopeGuard& operator=(ScopeGuard&&) = delete;
  ~ScopeGuard();

 private:
  friend class SandboxRouter;
  ScopeGuard(SandboxRouter* router, std::string scope, std::string thread_id, ScopeDisposal* out);
  SandboxRouter* router_;
  std::string scope_;
  std::string thread_id_;
  ScopeDisposal* out_;
};

class SandboxRouter {
 public:
  // Construction checks: only the selected backend is floor-checked (BackendNotPermitted);
  // a `selected` name that is not registered raises NoSandboxBackend naming those that are,
  // sorted.
  // No backends at all is allowed: the router is then disabled, and a host attaches no tools.
  explicit SandboxRouter(std::vector<std::shared_ptr<SandboxBackend>> backends,
                         RouterOptions options = {});
  ~SandboxRouter();
  SandboxRouter(const SandboxRouter&) = delete;
  SandboxRouter& operator=(const SandboxRouter&) = delete;

  bool enabled() const noexcept { return selected_ != nullptr; }
  const std::shared_ptr<SandboxBackend>& backend() const noexcept { return selected_; }
  const std::vector<std::shared_ptr<SandboxBackend>>& backends() const noexcept {
    return backends_;
  }
  const RouterOptions& options() const noexcept { return options_; }

  // Run every check; return the decision or throw the first refusal. With no backend
  // configured, returns a decision with an empty backend name: nothing runs, so nothing
  // reaches anything.
  RoutingDecision ensure_can_serve(const SandboxSpec& spec) const;

  // Every check, then the backend's get-or-create. NoSandboxBackend when disabled.
  std::shared_ptr<Sandbox> acquire(const SandboxKey& key, const SandboxSpec& spec);

  // Best-effort, across every registered backend; never throw. A backend's disposal cannot
  // throw either (noexcept in SandboxBackend): what fails is logged by the backend, and the
  // others are still reached.
  void dispose(const SandboxKey& key) noexcept;
  bool dispose_kind(const SandboxKey& key, std::string_view kind,
                    std::optional<std::string_view> instance_id = std::nullopt) noexcept;
  int dispose_scope(std::string_view scope,
                    std::optional<std::string_view> thread_id = std::nullopt) noexcept;

  // ---- snapshots (the selected backend's; docs/snapshots.md) ----
  // Snapshot the sandbox of (key, spec.kind): every check on `spec` with `snapshot` required,
  // then an exclusive call (no command of the conversation's sandbox runs while it is
  // captured) that acquires it and takes the snapshot. `admission` bounds the wait.
  SnapshotRecord snapshot(const SandboxKey& key, const SandboxSpec& spec,
                          const CallOptions& admission = {});
  // A sandbox for (key, spec) holding snapshot `id`'s state (a resume; under another key of
  // the conversation, a fork). Every check runs on `spec` — the resumed sandbox's posture is
  // spec's, judged like any acquire's, whatever the snapshot was taken under — with `snapshot`
  // required. NotFound when `id` is no snapshot of key's conversation (one of another
  // conversation is not told apart from none); InvalidArgument when it is of another kind.
  std::shared_ptr<Sandbox> resume(const SandboxKey& key, const SandboxSpec& spec,
                                  std::string_view id);
  // The selected backend's snapshots of a scope (or of one of its threads); an empty `scope`
  // lists every snapshot (an operator's view).
  std::vector<SnapshotRecord> list_snapshots(std::string_view scope,
                                             std::optional<std::string_view> thread_id) const;
  // Delete snapshot `id` of key's conversation: true when it is gone (NotFound as `resume`).
  bool delete_snapshot(const SandboxKey& key, std::string_view id);

  // `{ auto guard = router.scope(s, t, reclaimed); … }` — reclaimed.disposed is set after.
  [[nodiscard]] ScopeGuard scope(std::string scope, std::string thread_id, ScopeDisposal& out);

  // Admit a call over (key, spec.kind); QueuedTimeout when not admitted in time. The call keeps
  // the spec it was admitted under: a host that holds its spec shared passes it so, and nothing
  // is copied per call.
  [[nodiscard]] CallAdmission enter_call(const SandboxKey& key,
                                         std::shared_ptr<const SandboxSpec> spec,
                                         const CallOptions& options = {});
  [[nodiscard]] CallAdmission enter_call(const SandboxKey& key, const SandboxSpec& spec,
                                         const CallOptions& options = {});

  // Calls in flight over (key, kind) — for tests and metrics.
  int calls_in_flight(const SandboxKey& key, std::string_view kind) const;

 private:
  friend class CallAdmission;
  struct Lane;
  class BackgroundWorker;
  struct QueuedDelete {
    SandboxKey key;
    std::string kind;
    std::string instance_id;
  };
  using LaneKey = std::pair<SandboxKey, std::string>;

  void check_all(const SandboxSpec& spec, RoutingDecision* decision) const;
  void leave(CallAdmission& admission, bool in_background) noexcept;
  void queue_delete(CallAdmission& admission) noexcept;
  void run_deletes(const LaneKey& lane_key, std::vector<QueuedDelete> deletes) noexcept;

  std::vector<std::shared_ptr<SandboxBackend>> backends_;
  std::shared_ptr<SandboxBackend> selected_;
  RouterOptions options_;

  mutable std::mutex lanes_mutex_;
  std::map<LaneKey, std::shared_ptr<Lane>> lanes_;
  // Runs deletes handed off by `release(true)`; joined (after draining) on destruction.
  std::unique_ptr<BackgroundWorker> background_;
};

// A host's conversation-delete participant: disposes every sandbox of (scope, thread) on every
// registered backend, and logs at info how many went when any did. Never throws.
class SandboxPurger {
 public:
  explicit SandboxPurger(SandboxRouter& router) : router_(router) {}
  int purge_scoped_thread(std::string_view scope, std::string_view thread_id) noexcept;

 private:
  SandboxRouter& router_;
};

}  // namespace airlock
