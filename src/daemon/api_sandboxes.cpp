// Acquire, describe, dispose, and exec: the routes that concern one sandbox as a whole.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <tuple>

#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "airlock/paths.hpp"
#include "daemon/api.hpp"
#include "daemon/exec_request.hpp"
#include "daemon/http_errors.hpp"
#include "daemon/request_fields.hpp"

namespace airlock::daemon {
namespace {

using Clock = std::chrono::steady_clock;

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

json::Json describe(const HandleRecord& record) {
  return json::Json{{"sandbox", record.handle},
                    {"backend", record.backend},
                    {"key", json::to_json(record.key)},
                    {"kind", record.spec->kind()},
                    {"egress_posture", record.spec->egress_posture()},
                    {"instance_id", record.instance_id},
                    {"created_at", record.created_at},
                    {"spec", json::to_json(*record.spec)}};
}

// What GET /v1/sandboxes says of one handle: the operator's view. No handle (it is a bearer
// capability: whoever holds it drives the sandbox), no key, no spec; the labels the sandbox
// carries, every value a digest. `state` is the backend's word for the instance, "absent" when
// its durable state does not hold it (the next call through the handle acquires a fresh one),
// "unknown" when the backend could not be asked.
json::Json summarize(const HandleRecord& record, const std::string& state) {
  json::Json labels = json::Json::object();
  for (const auto& [name, stored] : sandbox_labels(record.key, *record.spec)) {
    labels[name] = stored_label_digest(stored);
  }
  return json::Json{{"backend", record.backend},
                    {"instance_id", record.instance_id},
                    {"kind", record.spec->kind()},
                    {"egress_posture", record.spec->egress_posture()},
                    {"state", state},
                    {"created_at", record.created_at},
                    {"labels", labels}};
}

Milliseconds elapsed_since(Clock::time_point start) {
  return std::chrono::duration_cast<Milliseconds>(Clock::now() - start);
}

std::string work_dir_of(const Api::Admitted& call) {
  return call.record.spec->work_dir();
}

}  // namespace

HandleRecord Api::record_for(const HttpRequest& request) const {
  const std::string& handle = request.params.at("handle");
  auto record = store_.find(handle);
  if (!record) {
    throw HttpError("SandboxHandleNotFound",
                    "no sandbox handle '" + handle +
                        "' is known here (acquire with POST /v1/sandboxes; a purge or dispose "
                        "forgets handles)",
                    "params.handle");
  }
  if (!router_.enabled() || router_.backend()->name() != record->backend) {
    throw HttpError("SandboxHandleConflict",
                    "handle '" + handle + "' was served by backend '" + record->backend +
                        "', which is not the backend this daemon serves with",
                    "params.handle");
  }
  return *record;
}

Api::Admitted Api::admit(const HttpRequest& request, Milliseconds timeout, bool exclusive) {
  HandleRecord record = record_for(request);
  CallOptions options;
  options.exclusive = exclusive;
  options.timeout = timeout;
  options.stop = request.cancelled;
  std::optional<CallAdmission> admission;
  {
    Metrics::Waiting waiting(metrics_);
    admission.emplace(router_.enter_call(record.key, record.spec, options));
  }
  Admitted call{std::move(record), std::move(*admission), nullptr};
  if (!exclusive) {
    call.sandbox = call.admission.acquire();
    metrics_.sandbox_acquired();
    const std::string instance = call.sandbox->instance_id();
    if (instance != call.record.instance_id) {
      // The instance behind the handle was replaced (a condemned one went, or a restart).
      store_.update_instance(call.record.handle, instance);
      call.record.instance_id = instance;
    }
  }
  return call;
}

void Api::condemn(Admitted& call, const char* why) {
  if (call.admission.condemned()) return;
  call.admission.condemn();
  metrics_.sandbox_condemned();
  spdlog::info("sandbox {} instance {} condemned: {}", call.record.handle,
               call.sandbox ? call.sandbox->instance_id() : "?", why);
}

HttpResponse Api::acquire(const HttpRequest& request) {
  refuse_unknown_query(request, {});
  const json::Json body = parse_json_body(request);
  Fields fields(body, "body");
  const SandboxKey key = json::parse_key(fields.required("key"), "body.key");
  auto spec =
      std::make_shared<const SandboxSpec>(json::parse_spec(fields.required("spec"), "body.spec"));
  fields.refuse_unknown();
  if (key.scope.empty())
    throw InvalidArgument("body.key.scope: must not be empty", "body.key.scope");

  const RoutingDecision decision = router_.ensure_can_serve(*spec);
  if (!router_.enabled()) {
    throw NoSandboxBackend("no sandbox backend is configured: nothing can be acquired");
  }
  HandleRecord record;
  record.backend = router_.backend()->name();
  record.handle = derive_handle(record.backend, key, *spec);
  record.key = key;
  record.spec = spec;
  record.created_at = unix_now();
  if (auto existing = store_.find(record.handle);
      existing && json::to_json(*existing->spec) != json::to_json(*spec)) {
    throw HttpError("SandboxHandleConflict",
                    "this key already has a '" + spec->kind() +
                        "' sandbox with this egress posture under a different spec; dispose "
                        "it first (DELETE /v1/sandboxes/" +
                        record.handle + ")",
                    "body.spec");
  }

  CallOptions options;
  options.timeout = limits_.admission_timeout;
  options.stop = request.cancelled;
  std::optional<CallAdmission> admission;
  {
    Metrics::Waiting waiting(metrics_);
    admission.emplace(router_.enter_call(key, *spec, options));
  }
  const std::shared_ptr<Sandbox> sandbox = admission->acquire();
  metrics_.sandbox_acquired();
  record.instance_id = sandbox->instance_id();
  const auto outcome = store_.put_compatible(record);
  if (outcome == HandleStore::PutOutcome::conflict) {
    throw HttpError("SandboxHandleConflict",
                    "a concurrent acquire recorded this handle under a different spec",
                    "body.spec");
  }
  json::Json answer{{"sandbox", record.handle},
                    {"instance_id", record.instance_id},
                    {"decision", json::to_json(decision)},
                    {"spec", json::to_json(*spec)}};
  return HttpResponse::json(outcome == HandleStore::PutOutcome::created ? 201 : 200, answer);
}

HttpResponse Api::list_sandboxes(const HttpRequest& request) {
  refuse_unknown_query(request, {});
  std::vector<HandleRecord> records = store_.all();
  // Ordered by creation, not by handle: the order must not say anything about the handles.
  std::sort(records.begin(), records.end(), [](const HandleRecord& a, const HandleRecord& b) {
    return std::tie(a.created_at, a.instance_id) < std::tie(b.created_at, b.instance_id);
  });
  // Each backend named by a record is asked once; nullopt: it could not be asked.
  std::map<std::string, std::optional<std::map<std::string, std::string>>> states;
  for (const auto& record : records) {
    if (states.contains(record.backend)) continue;
    auto& known = states[record.backend];
    for (const auto& backend : router_.backends()) {
      if (backend->name() != record.backend) continue;
      try {
        std::map<std::string, std::string> by_instance;
        for (const auto& held : backend->list_sandboxes()) {
          by_instance.emplace(held.instance_id, held.state);
        }
        known = std::move(by_instance);
      } catch (const std::exception& failed) {
        spdlog::warn("listing: backend {} could not list its sandboxes: {}", record.backend,
                     error_detail(failed));
      }
      break;
    }
  }
  json::Json list = json::Json::array();
  for (const auto& record : records) {
    const auto& known = states.at(record.backend);
    std::string state = "unknown";
    if (known) {
      const auto found = known->find(record.instance_id);
      state = found == known->end() ? "absent" : found->second;
    }
    list.push_back(summarize(record, state));
  }
  return HttpResponse::json(200, {{"sandboxes", list}});
}

HttpResponse Api::describe_sandbox(const HttpRequest& request) {
  refuse_unknown_query(request, {});
  return HttpResponse::json(200, describe(record_for(request)));
}

HttpResponse Api::dispose(const HttpRequest& request) {
  refuse_unknown_query(request, {"instance_id"});
  // Exclusive: every call over the key has left, and a delete one of them queued has run.
  Admitted call = admit(request, limits_.admission_timeout, /*exclusive=*/true);
  // The record is read again: a queued delete that ran while this call waited may have
  // replaced nothing, but an acquire by another call may have moved the handle on.
  const HandleRecord current = store_.find(call.record.handle).value_or(call.record);
  const std::string target = optional_query(request, "instance_id").value_or(current.instance_id);
  if (target.empty()) {
    throw InvalidArgument("query.instance_id: must not be empty", "query.instance_id");
  }
  const bool disposed = router_.dispose_kind(current.key, current.spec->kind(), target);
  bool forgotten = false;
  if (disposed && target == current.instance_id) {
    forgotten = store_.erase(current.handle);
    metrics_.sandboxes_disposed(1);
  }
  call.admission.release();
  return HttpResponse::json(200, {{"sandbox", current.handle},
                                  {"instance_id", target},
                                  {"disposed", disposed},
                                  {"forgotten", forgotten}});
}

ExecResult Api::run_in_work_dir(Admitted& call, const Command& command, ExecOptions& options,
                                std::chrono::steady_clock::time_point started,
                                Milliseconds timeout) {
  try {
    return call.sandbox->exec(command, options);
  } catch (const NotFound& missing) {
    // The spec's work_dir is the storage base every command runs in by default, and the
    // protocol leaves creating it to whoever asks; a backend that does not create it on
    // acquire gets it made here, as the guest, the first time a command needs it. Any other
    // missing working directory is the caller's to create.
    const std::string& work_dir = call.record.spec->work_dir();
    if (normalize_guest_path(options.working_directory) != work_dir ||
        normalize_guest_path(missing.path()) != work_dir) {
      throw;
    }
  }
  const Milliseconds left = timeout - elapsed_since(started);
  if (left <= Milliseconds(0)) throw Timeout("the command did not start within its deadline");
  ExecOptions make;
  make.working_directory = "/";
  make.timeout = std::min<Milliseconds>(left, Milliseconds(10'000));
  make.max_output_bytes = 4096;
  make.stop = options.stop;
  const ExecResult made =
      call.sandbox->exec(Command::argv({"mkdir", "-p", work_dir_of(call)}), make);
  if (made.exit_code != 0) {
    spdlog::warn("sandbox {}: could not create its work_dir: {}", call.record.handle,
                 made.stderr_text());
    throw NotFound("the working directory " + call.record.spec->work_dir() +
                       " does not exist and could not be created",
                   call.record.spec->work_dir());
  }
  options.timeout = timeout - elapsed_since(started);
  if (options.timeout <= Milliseconds(0)) {
    throw Timeout("the command did not start within its deadline");
  }
  return call.sandbox->exec(command, options);
}

HttpResponse Api::exec(const HttpRequest& request) {
  const auto started = Clock::now();
  refuse_unknown_query(request, {});
  ExecRequest parsed = parse_exec_request(parse_json_body(request), limits_);
  const Milliseconds timeout = parsed.timeout;
  ExecOptions options = std::move(parsed.options);

  Admitted call = admit(request, timeout);
  options.working_directory = parsed.working_directory.value_or(call.record.spec->work_dir());
  options.stop = request.cancelled;
  // One deadline over the wait for admission, the acquire and the command: the command gets
  // what the queue left of it.
  const Milliseconds remaining = timeout - elapsed_since(started);
  if (remaining <= Milliseconds(0)) {
    throw Timeout("the command did not start within its " + std::to_string(timeout.count()) +
                  " ms: admission and acquire used all of it");
  }
  options.timeout = remaining;

  ExecResult result;
  try {
    result = run_in_work_dir(call, parsed.command, options, started, timeout);
  } catch (const QueuedTimeout&) {
    throw;  // the backend's own queue: nothing ran
  } catch (const Timeout& timed_out) {
    // Cancelled: the client hung up, or the daemon's shutdown grace ran out.
    const bool cancelled = request.cancelled.stop_requested();
    condemn(call, cancelled ? "the call was cancelled mid-exec (client gone or shutdown)"
                            : "the command timed out");
    call.admission.release(/*in_background=*/true);
    metrics_.exec_finished(std::chrono::duration<double>(Clock::now() - started).count());
    return error_response(timed_out, false, {{"condemned", true}, {"cancelled", cancelled}});
  } catch (const ExecOutputLimitExceeded& overflow) {
    condemn(call, "the command's output passed its ceiling");
    call.admission.release(/*in_background=*/true);
    metrics_.exec_finished(std::chrono::duration<double>(Clock::now() - started).count());
    return error_response(overflow, false, {{"condemned", true}});
  } catch (const InvalidArgument&) {
    throw;  // refused before anything ran (a working directory outside the rules, say)
  } catch (const NotFound&) {
    throw;  // the working directory is not there: nothing ran
  } catch (const NotADirectory&) {
    throw;
  } catch (const NotSupported&) {
    throw;
  } catch (const std::exception& failed) {
    // The result did not come back: nothing establishes that the command stopped.
    spdlog::warn("exec on {} failed: {}", call.record.handle, error_detail(failed));
    condemn(call, "the command's result was lost");
    call.admission.release(/*in_background=*/true);
    return error_response(failed, false, {{"condemned", true}});
  }
  call.admission.release();
  metrics_.exec_finished(std::chrono::duration<double>(Clock::now() - started).count());
  return HttpResponse::json(200, {{"result", json::to_json(result)},
                                  {"instance_id", call.record.instance_id},
                                  {"duration_ms", elapsed_since(started).count()}});
}

}  // namespace airlock::daemon
