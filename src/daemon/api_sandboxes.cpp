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
    const std::string instance = call.sandbox->instance_id();
    metrics_.sandbox_acquired(instance == call.record.instance_id);
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
  std::optional<std::string> from_snapshot;
  if (const json::Json* value = fields.optional("from_snapshot")) {
    from_snapshot =
        checked_snapshot_id(fields.string("from_snapshot", *value), "body.from_snapshot");
  }
  fields.refuse_unknown();
  if (key.scope.empty())
    throw InvalidArgument("body.key.scope: must not be empty", "body.key.scope");

  // A resume is judged as the router judges it: every check, `snapshot` required.
  SandboxSpec::Fields judged = spec->fields();
  if (from_snapshot) judged.required_capabilities.insert(Capability::snapshot);
  const RoutingDecision decision = router_.ensure_can_serve(SandboxSpec(std::move(judged)));
  if (!router_.enabled()) {
    throw NoSandboxBackend("no sandbox backend is configured: nothing can be acquired");
  }
  HandleRecord record;
  record.backend = router_.backend()->name();
  record.handle = derive_handle(record.backend, key, *spec);
  record.key = key;
  record.spec = spec;
  record.created_at = unix_now();
  const auto existing = store_.find(record.handle);
  if (existing && json::to_json(*existing->spec) != json::to_json(*spec)) {
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
  // A resume replaces the key's sandbox: it waits, exclusively, for every call over the key to
  // leave, so no command is cut off by the instance it runs in going away.
  options.exclusive = from_snapshot.has_value();
  std::optional<CallAdmission> admission;
  {
    Metrics::Waiting waiting(metrics_);
    admission.emplace(router_.enter_call(key, *spec, options));
  }
  std::shared_ptr<Sandbox> sandbox;
  if (from_snapshot) {
    try {
      sandbox = router_.resume(key, *spec, *from_snapshot);
    } catch (const NotFound&) {
      throw snapshot_not_found(*from_snapshot, "body.from_snapshot");
    } catch (const InvalidArgument& refused) {
      // Only the owner's conversation gets this far: its snapshot is of another kind.
      if (refused.check() != "kind") throw;
      throw InvalidArgument("body.spec.kind: " + refused.message(), "body.spec.kind");
    }
    metrics_.snapshot_resumed();
  } else {
    sandbox = admission->acquire();
  }
  record.instance_id = sandbox->instance_id();
  metrics_.sandbox_acquired(existing && existing->instance_id == record.instance_id);
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
  if (from_snapshot) answer["from_snapshot"] = *from_snapshot;
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

// What the model is told. Both say what happened to its files, in plain words: an agent that
// does not know its sandbox was replaced goes on reading files that are gone.
constexpr const char* kSandboxReset =
    "The sandbox was reset: the command's end could not be confirmed (its processes may have "
    "outlived it), so the sandbox was replaced by a fresh one, and every file written earlier in "
    "this conversation is gone.";
constexpr const char* kSandboxKept =
    "The command was stopped and every process it started is gone; the sandbox is intact, with "
    "every file written earlier in this conversation.";

json::Json sandbox_outcome(bool reset) {
  return json::Json{{"condemned", reset},
                    {"sandbox_reset", reset},
                    {"sandbox_message", reset ? kSandboxReset : kSandboxKept}};
}

namespace {

// The command was stopped (its deadline, its output ceiling, or its caller gone): the instance
// may be kept only when the backend proves every process of it gone.
bool end_is_proven(const std::optional<bool>& kill_confirmed) {
  return kill_confirmed.value_or(false);
}

}  // namespace

HttpResponse Api::finish_exec(Admitted& call, const Command& command, ExecOptions& options,
                              Clock::time_point started, Milliseconds timeout,
                              const std::stop_token& cancelled) {
  const auto finished = [&] {
    metrics_.exec_finished(std::chrono::duration<double>(Clock::now() - started).count());
  };
  // A stopped command whose end is proven leaves its instance; an unknown end condemns it.
  const auto stopped = [&](const std::exception& error, const std::optional<bool>& confirmed,
                           const char* why, json::Json extra) {
    const bool reset = !end_is_proven(confirmed);
    if (reset) condemn(call, why);
    call.admission.release(/*in_background=*/reset);
    finished();
    extra.update(sandbox_outcome(reset));
    extra["instance_id"] = call.record.instance_id;
    return error_response(error, false, extra);
  };
  ExecResult result;
  try {
    result = run_in_work_dir(call, command, options, started, timeout);
  } catch (const QueuedTimeout&) {
    throw;  // the backend's own queue: nothing ran
  } catch (const Timeout& timed_out) {
    // Cancelled: the client hung up, or the daemon's shutdown grace ran out.
    const bool was_cancelled = cancelled.stop_requested();
    return stopped(timed_out, timed_out.kill_confirmed(),
                   was_cancelled ? "the call was cancelled mid-exec (client gone or shutdown) "
                                   "and the kill was not confirmed"
                                 : "the command timed out and the kill was not confirmed",
                   {{"cancelled", was_cancelled}});
  } catch (const ExecOutputLimitExceeded& overflow) {
    return stopped(overflow, overflow.kill_confirmed(),
                   "the command's output passed its ceiling and the kill was not confirmed",
                   json::Json::object());
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
    json::Json extra = sandbox_outcome(true);
    condemn(call, "the command's result was lost");
    call.admission.release(/*in_background=*/true);
    extra["instance_id"] = call.record.instance_id;
    return error_response(failed, false, extra);
  }
  // A backend that collected instead of streaming hands its output over now (a no-op without
  // a callback, and for a backend that streamed).
  deliver_collected_output(result, options);
  call.admission.release();
  finished();
  return HttpResponse::json(200, {{"result", json::to_json(result)},
                                  {"instance_id", call.record.instance_id},
                                  {"duration_ms", elapsed_since(started).count()}});
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
  return finish_exec(call, parsed.command, options, started, timeout, request.cancelled);
}

// POST …/exec/stream: the same request and the same lifecycle as POST …/exec; the answer is
// application/x-ndjson, one JSON object a line:
//   {"type":"output","stream":"stdout"|"stderr","data_base64":"…"}   as the command prints
//   {"type":"result","status":200,"result":{…},"instance_id":…,"duration_ms":…}
//   {"type":"error","status":504,"error":{… the daemon's error shape, sandbox_reset …}}
// exactly one of the last two, last. Everything refused before the command is admitted (a bad
// body, an unknown handle, a queue past its deadline) is a plain JSON error with its own
// status, as on POST …/exec. Output is base64 because a chunk boundary can split a UTF-8
// sequence. What queues for a slow reader is bounded by the command's output ceiling.
HttpResponse Api::exec_stream(const HttpRequest& request) {
  const auto started = Clock::now();
  refuse_unknown_query(request, {});
  ExecRequest parsed = parse_exec_request(parse_json_body(request), limits_);
  const Milliseconds timeout = parsed.timeout;
  auto call = std::make_shared<Admitted>(admit(request, timeout));
  auto options = std::make_shared<ExecOptions>(std::move(parsed.options));
  options->working_directory = parsed.working_directory.value_or(call->record.spec->work_dir());
  options->stop = request.cancelled;
  const Milliseconds remaining = timeout - elapsed_since(started);
  if (remaining <= Milliseconds(0)) {
    throw Timeout("the command did not start within its " + std::to_string(timeout.count()) +
                  " ms: admission and acquire used all of it");
  }
  options->timeout = remaining;
  auto command = std::make_shared<Command>(std::move(parsed.command));
  const std::stop_token cancelled = request.cancelled;
  HttpResponse response = HttpResponse::streaming(
      200, "application/x-ndjson",
      [this, call, options, command, started, timeout, cancelled](const BodyWriter& write) {
        const auto line = [&](const json::Json& object) {
          std::string text = object.dump(-1, ' ', false, json::Json::error_handler_t::replace);
          text.push_back('\n');
          write(text);
        };
        options->on_output = [&](OutputStream stream, std::string_view bytes) {
          if (bytes.empty()) return;
          line({{"type", "output"},
                {"stream", stream == OutputStream::stdout_stream ? "stdout" : "stderr"},
                {"data_base64", base64_encode(bytes)}});
        };
        HttpResponse answer;
        try {
          answer = finish_exec(*call, *command, *options, started, timeout, cancelled);
        } catch (const std::exception& error) {
          answer = error_response(error);
          call->admission.release();
          metrics_.exec_finished(std::chrono::duration<double>(Clock::now() - started).count());
        }
        options->on_output = nullptr;
        json::Json last = json::Json::parse(answer.body, nullptr, false);
        if (!last.is_object()) last = json::Json::object();
        last["type"] = answer.status == 200 ? "result" : "error";
        last["status"] = answer.status;
        line(last);
      });
  response.headers.emplace_back("X-Airlock-Instance", call->record.instance_id);
  return response;
}

}  // namespace airlock::daemon
