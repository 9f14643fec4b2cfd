// Snapshots over HTTP: take one of a handle's sandbox, list a conversation's, delete one. (A
// resume or fork is an acquire: POST /v1/sandboxes with `from_snapshot`, api_sandboxes.cpp.)
//
// A snapshot belongs to the conversation — scope and thread — of the key that took it, and the
// router answers every other key as if it did not exist: here too, a snapshot of another
// conversation is the same 404, with the same words, as an id nobody ever made. An id is
// checked for its shape ("snap-" and 24 hex digits) before anything reaches the router, so no
// caller's text ever names a path in a backend's state.
#include <spdlog/spdlog.h>

#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "airlock/records.hpp"
#include "daemon/api.hpp"
#include "daemon/http_errors.hpp"
#include "daemon/request_fields.hpp"

namespace airlock::daemon {

std::string checked_snapshot_id(std::string_view id, const std::string& where) {
  if (!is_snapshot_id(id)) {
    throw InvalidArgument(where + ": not a snapshot id (\"snap-\" and 24 lower-case hex digits, "
                                  "as POST /v1/sandboxes/{handle}/snapshots answers)",
                          where);
  }
  return std::string(id);
}

HttpError snapshot_not_found(std::string_view id, const std::string& where) {
  // One sentence for a missing snapshot and another conversation's: nothing tells them apart.
  return HttpError("NotFound",
                   "no snapshot '" + std::string(id) +
                       "' in this conversation (its scope and thread); GET /v1/snapshots lists "
                       "a conversation's",
                   where);
}

json::Json snapshot_document(const SnapshotRecord& record) {
  json::Json document = json::to_json(record);
  // As in every listing of the daemon's: label values digested, never a key's raw text.
  json::Json labels = json::Json::object();
  for (const auto& [name, stored] : record.labels) labels[name] = stored_label_digest(stored);
  document["labels"] = labels;
  return document;
}

HttpResponse Api::take_snapshot(const HttpRequest& request) {
  refuse_unknown_query(request, {});
  const HandleRecord record = record_for(request);
  CallOptions options;
  options.timeout = limits_.admission_timeout;
  options.stop = request.cancelled;
  SnapshotRecord saved;
  {
    // Every router check with `snapshot` required, then an exclusive call: it waits for every
    // call over the key to leave (never cutting a command off), and none starts until it is
    // saved.
    Metrics::Waiting waiting(metrics_);
    saved = router_.snapshot(record.key, *record.spec, options);
  }
  metrics_.snapshot_taken();
  std::string instance = record.instance_id;
  if (!saved.source_instance_id.empty() && saved.source_instance_id != instance) {
    // The instance behind the handle had been replaced (a condemned one went): it is the one
    // saved, and the handle reaches it from now on.
    store_.update_instance(record.handle, saved.source_instance_id);
    instance = saved.source_instance_id;
  }
  spdlog::info("sandbox {} instance {}: snapshot {} taken ({}, {} bytes)", record.handle, instance,
               saved.id, to_string(saved.content), saved.bytes);
  return HttpResponse::json(201, {{"sandbox", record.handle},
                                  {"instance_id", instance},
                                  {"snapshot", snapshot_document(saved)}});
}

HttpResponse Api::list_snapshots(const HttpRequest& request) {
  refuse_unknown_query(request, {"scope", "thread_id"});
  const std::string scope = required_query(request, "scope");
  const std::optional<std::string> thread_id = optional_query(request, "thread_id");
  json::Json list = json::Json::array();
  for (const auto& record : router_.list_snapshots(
           scope, thread_id ? std::optional<std::string_view>(*thread_id) : std::nullopt)) {
    list.push_back(snapshot_document(record));
  }
  return HttpResponse::json(200, {{"snapshots", list}});
}

HttpResponse Api::delete_snapshot(const HttpRequest& request) {
  refuse_unknown_query(request, {"scope", "thread_id"});
  const std::string id = checked_snapshot_id(request.params.at("snapshot"), "params.snapshot");
  const std::string scope = required_query(request, "scope");
  // Present and possibly empty: an empty thread id is a key's value like any other.
  const std::optional<std::string> thread_id = optional_query(request, "thread_id");
  if (!thread_id) {
    throw InvalidArgument(
        "query.thread_id: is required (the thread of the conversation that took the snapshot)",
        "query.thread_id");
  }
  if (!router_.enabled()) throw NoSandboxBackend("no sandbox backend is configured");
  bool deleted = false;
  try {
    deleted = router_.delete_snapshot(SandboxKey{scope, *thread_id, ""}, id);
  } catch (const NotFound&) {
    throw snapshot_not_found(id, "params.snapshot");
  }
  if (deleted) metrics_.snapshot_deleted();
  if (!deleted) spdlog::warn("snapshot {}: the backend could not remove all of it", id);
  return HttpResponse::json(200, {{"snapshot", id}, {"deleted", deleted}});
}

}  // namespace airlock::daemon
