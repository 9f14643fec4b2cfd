// The labels every backend stamps on a sandbox and finds it by again: the key's scope, thread
// and agent directory and the workload's kind, each stored as map_label_value keeps it (raw when
// short and plain, hashed past 63 characters), so that a lookup by key, by kind or by scope
// matches what any process wrote — never this process's memory alone.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "airlock/encoding.hpp"
#include "airlock/records.hpp"

namespace airlock::backend_kit {

using Labels = std::map<std::string, std::string>;

// What dispose(key) matches: every kind of one conversation's sandboxes.
inline Labels key_labels(const SandboxKey& key) {
  return {{"airlock.scope", map_label_value(key.scope)},
          {"airlock.thread", map_label_value(key.thread_id)},
          {"airlock.agent", map_label_value(key.agent_dir)}};
}

// What dispose_kind(key, kind) matches: one conversation's sandbox of one kind.
inline Labels kind_labels(const SandboxKey& key, std::string_view kind) {
  Labels labels = key_labels(key);
  labels.emplace("airlock.kind", map_label_value(kind));
  return labels;
}

// What dispose_scope(scope, thread) matches: a scope's sandboxes, or one thread's of it.
inline Labels scope_labels(std::string_view scope, std::optional<std::string_view> thread_id) {
  Labels labels{{"airlock.scope", map_label_value(scope)}};
  if (thread_id) labels.emplace("airlock.thread", map_label_value(*thread_id));
  return labels;
}

// Every wanted label is present with its value (`have` may hold more).
inline bool labels_match(const Labels& have, const Labels& wanted) {
  for (const auto& [label, value] : wanted) {
    const auto found = have.find(label);
    if (found == have.end() || found->second != value) return false;
  }
  return true;
}

}  // namespace airlock::backend_kit
