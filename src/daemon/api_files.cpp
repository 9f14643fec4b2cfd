// The file plane: write, read, stat, list and remove one path in a sandbox, confined to a working
// directory (the spec's work_dir unless the request names another) by the backend's own rules.
//
// Errors carry "refusal" (file_not_found, is_directory, permission_denied, invalid_path) when the
// path itself was refused, so a client can answer per file without parsing messages.
#include <spdlog/spdlog.h>

#include "airlock/errors.hpp"
#include "airlock/shell_roads.hpp"
#include "daemon/api.hpp"
#include "daemon/http_errors.hpp"
#include "daemon/request_fields.hpp"

namespace airlock::daemon {
namespace {

// A write that failed without the backend refusing it may have left part of the file.
bool write_refused(const std::exception& error) {
  return file_refusal_of(error).has_value() || dynamic_cast<const InvalidArgument*>(&error) ||
         dynamic_cast<const TransferCapExceeded*>(&error) ||
         dynamic_cast<const QueuedTimeout*>(&error) || dynamic_cast<const NotSupported*>(&error);
}

enum class Road { plane, shell };

// `road=plane` (default): the backend's file plane, confined to the working directory.
// `road=shell`: the core's shell roads (base64 over bounded execs, staged and moved into place),
// which reach any path the guest itself can — for paths outside the work directory, which the
// plane does not serve. They run with the guest's own authority, so they widen nothing `exec`
// had not already opened.
Road road_of(const HttpRequest& request) {
  const auto value = optional_query(request, "road").value_or("plane");
  if (value == "plane") return Road::plane;
  if (value == "shell") return Road::shell;
  throw InvalidArgument("query.road: unknown value \"" + value + "\" (allowed: plane, shell)",
                        "query.road");
}

std::string working_directory_of(const HttpRequest& request, const SandboxSpec& spec) {
  auto value = optional_query(request, "working_directory");
  if (value && value->empty()) {
    throw InvalidArgument(
        "query.working_directory: must not be empty (omit it for the spec's "
        "work_dir)",
        "query.working_directory");
  }
  return value.value_or(spec.work_dir());
}

}  // namespace

std::uint64_t Api::upload_cap(const HttpRequest& request) const {
  return record_for(request).spec->files_in().max_bytes_per_file;
}

Milliseconds Api::road_timeout(const HttpRequest& request) const {
  return Milliseconds(
      query_count(request, "timeout_ms", 1,
                  static_cast<std::uint64_t>(limits_.max_exec_timeout.count()))
          .value_or(static_cast<std::uint64_t>(limits_.default_exec_timeout.count())));
}

HttpResponse Api::put_file(const HttpRequest& request) {
  refuse_unknown_query(request, {"path", "working_directory", "road", "timeout_ms"});
  const std::string path = required_query(request, "path");
  const Road road = road_of(request);
  const Milliseconds timeout = road_timeout(request);
  Admitted call = admit(request, limits_.admission_timeout);
  const std::string working_directory = working_directory_of(request, *call.record.spec);
  // The cap was applied before the body was read; the spec may not have changed since, but the
  // record read at admission is the one that counts.
  const auto cap = call.record.spec->files_in().max_bytes_per_file;
  if (request.body.size() > cap) {
    throw TransferCapExceeded("files_in.max_bytes_per_file", path, cap, request.body.size());
  }
  try {
    if (road == Road::shell) {
      write_file_over_exec(*call.sandbox, path, request.body, working_directory, timeout,
                           call.record.spec->files_in());
    } else {
      call.sandbox->write_file(path, request.body, working_directory);
    }
  } catch (const ShellTransferFailed& failed) {
    // The command ended and said something unexpected: nothing landed, the sandbox is whole.
    spdlog::warn("shell write into {} failed: {}", call.record.handle, failed.what());
    return error_response(failed, true);
  } catch (const std::exception& error) {
    if (write_refused(error)) return error_response(error, true);
    spdlog::warn("write of a file into {} failed: {}", call.record.handle, error_detail(error));
    condemn(call, "a write neither refused nor finished");
    call.admission.release(/*in_background=*/true);
    return error_response(error, true, sandbox_outcome(true));
  }
  return HttpResponse::json(200, {{"path", path},
                                  {"size_bytes", request.body.size()},
                                  {"instance_id", call.record.instance_id}});
}

HttpResponse Api::get_file(const HttpRequest& request) {
  refuse_unknown_query(request, {"path", "working_directory", "max_bytes", "road", "timeout_ms"});
  const std::string path = required_query(request, "path");
  const Road road = road_of(request);
  const Milliseconds timeout = road_timeout(request);
  const HandleRecord record = record_for(request);
  const auto cap = record.spec->files_out().max_bytes_per_file;
  // A smaller ceiling may be asked for (what is left of a batch's total); a larger one is
  // refused, never clamped.
  const std::uint64_t max_bytes = query_count(request, "max_bytes", 0, cap).value_or(cap);
  Admitted call = admit(request, limits_.admission_timeout);
  const std::string working_directory = working_directory_of(request, *call.record.spec);
  std::string content;
  try {
    content = road == Road::shell
                  ? read_file_over_exec(*call.sandbox, path, working_directory, timeout, max_bytes)
                  : call.sandbox->read_file(path, working_directory, max_bytes);
  } catch (const ShellTransferUnfinished& unfinished) {
    // The read's command may still be running: the instance goes. A read its own budget ended
    // (the file grew past the cap while it was read) says so.
    condemn(call, "a shell read did not finish");
    call.admission.release(/*in_background=*/true);
    if (unfinished.over_cap()) {
      return error_response(TransferCapExceeded("max_bytes", path, max_bytes), true,
                            sandbox_outcome(true));
    }
    return error_response(unfinished, true, sandbox_outcome(true));
  } catch (const std::exception& error) {
    // A read changes nothing in the sandbox: whatever happened, the instance stays.
    if (!file_refusal_of(error)) {
      spdlog::debug("read of a file from {} failed: {}", call.record.handle, error_detail(error));
    }
    return error_response(error, true);
  }
  if (content.size() > max_bytes) {
    // The protocol asks callers to re-count: a file can grow between a stat and a read.
    return error_response(TransferCapExceeded("max_bytes", path, max_bytes, content.size()), true);
  }
  HttpResponse response = HttpResponse::bytes(200, std::move(content));
  response.headers.emplace_back("X-Airlock-Instance", call.record.instance_id);
  return response;
}

HttpResponse Api::delete_file(const HttpRequest& request) {
  refuse_unknown_query(request, {"path", "working_directory", "recursive"});
  const std::string path = required_query(request, "path");
  const bool recursive = query_bool(request, "recursive", false);
  Admitted call = admit(request, limits_.admission_timeout);
  const std::string working_directory = working_directory_of(request, *call.record.spec);
  try {
    call.sandbox->remove(path, working_directory, recursive);
  } catch (const std::exception& error) {
    return error_response(error, true);
  }
  return HttpResponse::json(200, {{"path", path}, {"removed", true}});
}

HttpResponse Api::stat(const HttpRequest& request) {
  refuse_unknown_query(request, {"path", "working_directory"});
  const std::string path = required_query(request, "path");
  Admitted call = admit(request, limits_.admission_timeout);
  const std::string working_directory = working_directory_of(request, *call.record.spec);
  std::optional<SandboxEntry> entry;
  try {
    entry = call.sandbox->stat_file(path, working_directory);
  } catch (const std::exception& error) {
    return error_response(error, true);
  }
  return HttpResponse::json(200, {{"entry", entry ? json::to_json(*entry) : json::Json(nullptr)}});
}

HttpResponse Api::list(const HttpRequest& request) {
  refuse_unknown_query(request, {"path", "working_directory"});
  const std::string path = optional_query(request, "path").value_or(".");
  Admitted call = admit(request, limits_.admission_timeout);
  const std::string working_directory = working_directory_of(request, *call.record.spec);
  std::vector<SandboxEntry> entries;
  try {
    entries = call.sandbox->list_dir(path, working_directory);
  } catch (const std::exception& error) {
    return error_response(error, true);
  }
  json::Json list = json::Json::array();
  for (const auto& entry : entries) list.push_back(json::to_json(entry));
  return HttpResponse::json(200, {{"path", path}, {"entries", list}});
}

}  // namespace airlock::daemon
