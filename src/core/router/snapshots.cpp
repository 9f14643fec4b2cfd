// The router's snapshot calls: every check before the backend is reached, and a snapshot of
// one conversation never reachable from another's key.
#include <algorithm>
#include <string>

#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "airlock/router.hpp"

namespace airlock {
namespace {

SandboxSpec requiring_snapshot(const SandboxSpec& spec) {
  SandboxSpec::Fields fields = spec.fields();
  fields.required_capabilities.insert(Capability::snapshot);
  return SandboxSpec(std::move(fields));
}

// The snapshot, if it is one of key's conversation: another conversation's is not told apart
// from a missing one.
SnapshotRecord reachable_snapshot(SandboxBackend& backend, const SandboxKey& key,
                                  std::string_view id) {
  auto record = backend.find_snapshot(id);
  if (!record || !snapshot_belongs_to(*record, key)) {
    throw NotFound("no snapshot '" + std::string(id) + "' in this conversation");
  }
  return *record;
}

}  // namespace

SnapshotRecord SandboxRouter::snapshot(const SandboxKey& key, const SandboxSpec& spec,
                                       const CallOptions& admission) {
  if (!selected_) throw NoSandboxBackend("no sandbox backend is configured");
  const SandboxSpec checked = requiring_snapshot(spec);
  check_all(checked, nullptr);
  CallOptions exclusive = admission;
  exclusive.exclusive = true;
  CallAdmission call = enter_call(key, spec, exclusive);
  return call.acquire()->snapshot();
}

std::shared_ptr<Sandbox> SandboxRouter::resume(const SandboxKey& key, const SandboxSpec& spec,
                                               std::string_view id) {
  if (!selected_) throw NoSandboxBackend("no sandbox backend is configured");
  const SandboxSpec checked = requiring_snapshot(spec);
  check_all(checked, nullptr);
  const SnapshotRecord record = reachable_snapshot(*selected_, key, id);
  if (record.kind != spec.kind()) {
    throw InvalidArgument("snapshot '" + record.id + "' is of a '" + record.kind +
                              "' sandbox; it is not resumed as '" + spec.kind() + "'",
                          "kind");
  }
  return selected_->acquire_from_snapshot(key, spec, record);
}

std::vector<SnapshotRecord> SandboxRouter::list_snapshots(
    std::string_view scope, std::optional<std::string_view> thread_id) const {
  if (!selected_) return {};
  std::vector<SnapshotRecord> out;
  for (auto& record : selected_->list_snapshots()) {
    const auto label = [&record](const char* name) {
      const auto found = record.labels.find(name);
      return found == record.labels.end() ? std::string() : found->second;
    };
    if (!scope.empty() && label("airlock.scope") != map_label_value(scope)) continue;
    if (thread_id && label("airlock.thread") != map_label_value(*thread_id)) continue;
    out.push_back(std::move(record));
  }
  std::sort(out.begin(), out.end(), [](const SnapshotRecord& a, const SnapshotRecord& b) {
    return a.created_at != b.created_at ? a.created_at < b.created_at : a.id < b.id;
  });
  return out;
}

bool SandboxRouter::delete_snapshot(const SandboxKey& key, std::string_view id) {
  if (!selected_) throw NoSandboxBackend("no sandbox backend is configured");
  const SnapshotRecord record = reachable_snapshot(*selected_, key, id);
  return selected_->delete_snapshot(record.id);
}

// ---- the defaults of backends and sandboxes that take no snapshots ----

SnapshotRecord Sandbox::snapshot() {
  throw NotSupported("this sandbox's backend takes no snapshots");
}

std::shared_ptr<Sandbox> SandboxBackend::acquire_from_snapshot(const SandboxKey&,
                                                               const SandboxSpec&,
                                                               const SnapshotRecord&) {
  throw NotSupported("the " + name() + " backend takes no snapshots");
}

std::optional<SnapshotRecord> SandboxBackend::find_snapshot(std::string_view id) {
  for (auto& record : list_snapshots()) {
    if (record.id == id) return record;
  }
  return std::nullopt;
}

bool SandboxBackend::delete_snapshot(std::string_view) noexcept { return true; }

}  // namespace airlock
