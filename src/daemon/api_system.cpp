// The route table, and the routes that concern the daemon and its router rather than one sandbox.
#include <spdlog/spdlog.h>

#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "daemon/api.hpp"
#include "daemon/http_errors.hpp"
#include "daemon/request_fields.hpp"

namespace airlock::daemon {

Api::Api(SandboxRouter& router, HandleStore& store, Metrics& metrics, ApiLimits limits)
    : router_(router), store_(store), metrics_(metrics), limits_(limits) {
  metrics_.count_live_sandboxes([this] { return store_.count(); });
}

Api::~Api() {
  metrics_.count_live_sandboxes(nullptr);
}

void Api::add_routes(RouteTable& table) {
  auto bind = [this](HttpResponse (Api::*method)(const HttpRequest&)) {
    return [this, method](HttpRequest& request) { return (this->*method)(request); };
  };
  table.add({"GET", "/v1/health", "liveness, and whether the daemon is draining", BodyKind::none,
             nullptr, "body", bind(&Api::health)});
  table.add({"GET", "/v1/metrics", "Prometheus metrics (text exposition format)", BodyKind::none,
             nullptr, "body", bind(&Api::metrics)});
  table.add({"GET", "/v1/backends", "registered backends and what each declares", BodyKind::none,
             nullptr, "body", bind(&Api::backends)});
  table.add({"GET", "/v1/backends/{backend}/sandboxes",
             "every sandbox in a backend's durable state", BodyKind::none, nullptr, "body",
             bind(&Api::backend_sandboxes)});
  table.add({"POST", "/v1/check", "can the router serve this spec? (every check, nothing runs)",
             BodyKind::json, nullptr, "body", bind(&Api::check)});
  table.add({"POST", "/v1/purge", "dispose every sandbox of a conversation (scope[, thread])",
             BodyKind::json, nullptr, "body", bind(&Api::purge)});
  table.add({"POST", "/v1/sandboxes", "acquire (get-or-create) the sandbox for a key and spec",
             BodyKind::json, nullptr, "body", bind(&Api::acquire)});
  table.add({"GET", "/v1/sandboxes",
             "every handle's sandbox, as an operator sees it (no handle, key or spec)",
             BodyKind::none, nullptr, "body", bind(&Api::list_sandboxes)});
  table.add({"GET", "/v1/sandboxes/{handle}", "one handle's record", BodyKind::none, nullptr,
             "body", bind(&Api::describe_sandbox)});
  table.add({"DELETE", "/v1/sandboxes/{handle}", "dispose the handle's instance (exclusively)",
             BodyKind::none, nullptr, "body", bind(&Api::dispose)});
  table.add({"POST", "/v1/sandboxes/{handle}/exec", "run an argv or a shell line", BodyKind::json,
             nullptr, "body", bind(&Api::exec)});
  table.add({"POST", "/v1/sandboxes/{handle}/exec/stream",
             "run an argv or a shell line, its output streamed as NDJSON", BodyKind::json, nullptr,
             "body", bind(&Api::exec_stream)});
  table.add({"PUT", "/v1/sandboxes/{handle}/files", "write one file (raw body)", BodyKind::bytes,
             [this](const HttpRequest& request) { return upload_cap(request); },
             "spec.files_in.max_bytes_per_file", bind(&Api::put_file)});
  table.add({"GET", "/v1/sandboxes/{handle}/files", "read one regular file (raw body)",
             BodyKind::none, nullptr, "body", bind(&Api::get_file)});
  table.add({"DELETE", "/v1/sandboxes/{handle}/files", "remove a path (a link is never followed)",
             BodyKind::none, nullptr, "body", bind(&Api::delete_file)});
  table.add({"GET", "/v1/sandboxes/{handle}/stat", "describe a path like lstat", BodyKind::none,
             nullptr, "body", bind(&Api::stat)});
  table.add({"GET", "/v1/sandboxes/{handle}/list", "a directory's direct children", BodyKind::none,
             nullptr, "body", bind(&Api::list)});
  table.add({"POST", "/v1/sandboxes/{handle}/snapshots",
             "save the handle's sandbox (exclusively); resume with POST /v1/sandboxes "
             "from_snapshot",
             BodyKind::none, nullptr, "body", bind(&Api::take_snapshot)});
  table.add({"GET", "/v1/snapshots", "a conversation's snapshots (scope[, thread_id])",
             BodyKind::none, nullptr, "body", bind(&Api::list_snapshots)});
  table.add({"DELETE", "/v1/snapshots/{snapshot}",
             "delete a snapshot of the conversation (scope, thread_id)", BodyKind::none, nullptr,
             "body", bind(&Api::delete_snapshot)});
  table.add({"POST", "/v1/sandboxes/{handle}/outputs",
             "collect the spec's declared outputs (and call-time ones) under its caps",
             BodyKind::json, nullptr, "body", bind(&Api::outputs)});
}

HttpResponse Api::health(const HttpRequest& request) {
  refuse_unknown_query(request, {});
  const bool draining = draining_.load();
  const auto uptime =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started_)
          .count();
  json::Json body{
      {"status", draining ? "draining" : "ok"},
      {"version", "0.1.0"},
      {"api", "v1"},
      {"uptime_seconds", uptime},
      {"backend", router_.enabled() ? json::Json(router_.backend()->name()) : json::Json(nullptr)},
      {"requests_in_flight", metrics_.requests_in_flight()}};
  return HttpResponse::json(draining ? 503 : 200, body);
}

HttpResponse Api::metrics(const HttpRequest& request) {
  refuse_unknown_query(request, {});
  HttpResponse response;
  response.status = 200;
  response.content_type = "text/plain; version=0.0.4; charset=utf-8";
  response.body = metrics_.render();
  return response;
}

HttpResponse Api::backends(const HttpRequest& request) {
  refuse_unknown_query(request, {});
  json::Json list = json::Json::array();
  for (const auto& backend : router_.backends()) {
    json::Json described = json::describe_backend(*backend);
    described["selected"] = backend == router_.backend();
    list.push_back(std::move(described));
  }
  const RouterOptions& options = router_.options();
  json::Json denied_capabilities = json::Json::array();
  options.denied_capabilities.for_each(
      [&](Capability member) { denied_capabilities.push_back(std::string(to_string(member))); });
  json::Json denied_identities = json::Json::array();
  options.denied_identities.for_each(
      [&](Identity member) { denied_identities.push_back(std::string(to_string(member))); });
  return HttpResponse::json(
      200, {{"selected",
             router_.enabled() ? json::Json(router_.backend()->name()) : json::Json(nullptr)},
            {"min_isolation", std::string(to_string(options.min_isolation))},
            {"denied_capabilities", denied_capabilities},
            {"denied_identities", denied_identities},
            {"backends", list}});
}

HttpResponse Api::backend_sandboxes(const HttpRequest& request) {
  refuse_unknown_query(request, {});
  const std::string& name = request.params.at("backend");
  for (const auto& backend : router_.backends()) {
    if (backend->name() != name) continue;
    // A backend stores a short, label-safe key value raw (map_label_value): every value is
    // digested here, so no caller reads another conversation's scope, thread or agent dir.
    json::Json list = json::Json::array();
    for (auto record : backend->list_sandboxes()) {
      for (auto& [label, value] : record.labels) value = stored_label_digest(value);
      list.push_back(json::to_json(record));
    }
    return HttpResponse::json(200, {{"backend", name}, {"sandboxes", list}});
  }
  throw HttpError("NotFound", "no backend named '" + name + "' is registered", "params.backend");
}

HttpResponse Api::check(const HttpRequest& request) {
  refuse_unknown_query(request, {});
  const json::Json body = parse_json_body(request);
  Fields fields(body, "body");
  const SandboxSpec spec = json::parse_spec(fields.required("spec"), "body.spec");
  fields.refuse_unknown();
  const RoutingDecision decision = router_.ensure_can_serve(spec);
  return HttpResponse::json(200, {{"accepted", true}, {"decision", json::to_json(decision)}});
}

HttpResponse Api::purge(const HttpRequest& request) {
  refuse_unknown_query(request, {});
  const json::Json body = parse_json_body(request);
  Fields fields(body, "body");
  const std::string scope = fields.string("scope", fields.required("scope"));
  std::optional<std::string> thread_id;
  if (const json::Json* value = fields.optional("thread_id")) {
    thread_id = fields.string("thread_id", *value);
  }
  fields.refuse_unknown();
  if (scope.empty()) throw InvalidArgument("body.scope: must not be empty", "body.scope");
  if (thread_id && thread_id->empty()) {
    throw InvalidArgument("body.thread_id: must not be empty (omit it to purge every thread)",
                          "body.thread_id");
  }
  const int disposed = router_.dispose_scope(
      scope, thread_id ? std::optional<std::string_view>(*thread_id) : std::nullopt);
  const auto forgotten = store_.erase_scope(
      scope, thread_id ? std::optional<std::string_view>(*thread_id) : std::nullopt);
  metrics_.sandboxes_disposed(disposed);
  spdlog::info("purge: {} sandbox(es) disposed, {} handle(s) forgotten", disposed,
               forgotten.size());
  return HttpResponse::json(200, {{"disposed", disposed}, {"handles_forgotten", forgotten.size()}});
}

}  // namespace airlock::daemon
