// The JSON wire format: the same in the CLI (`--spec FILE`), the daemon and the bindings.
//
// Field names are the seeds' (`egress_allow`, `files_in.max_bytes_per_file`, `requires`, …).
// Parsing is strict: an unknown field, an unknown enum value, a wrong type, a negative or
// fractional number where a count is expected — each is refused with an `InvalidArgument` whose
// message names the field by its full path (e.g. `spec.files_in.max_files`) and, for enums, the
// allowed values. Nothing is coerced and nothing is defaulted silently except the documented
// defaults of the records themselves.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "airlock/errors.hpp"
#include "airlock/records.hpp"
#include "airlock/router.hpp"

namespace airlock::json {

using Json = nlohmann::json;

// Parse text into a JSON value; a syntax error is an InvalidArgument naming `what` and the
// byte offset. Nesting deeper than 64 levels is refused.
Json parse_text(std::string_view text, std::string_view what);

SandboxSpec parse_spec(const Json& value, std::string_view where = "spec");
Json to_json(const SandboxSpec& spec);

SandboxKey parse_key(const Json& value, std::string_view where = "key");
Json to_json(const SandboxKey& key);

TransferLimits parse_transfer_limits(const Json& value, std::string_view where);
Json to_json(const TransferLimits& limits);

DeclaredOutput parse_declared_output(const Json& value, std::string_view where);
Json to_json(const DeclaredOutput& output);

Json to_json(const SandboxLimits& limits);
Json to_json(const SandboxEntry& entry);
Json to_json(const LandedArtifact& artifact);
Json to_json(const RoutingDecision& decision);
Json to_json(const SandboxRecord& record);
// {"id", "backend", "content": "filesystem"|"filesystem+memory", "kind", "egress_posture",
//  "image", "work_dir", "labels" (as stored), "source_instance_id", "bytes", "created_at"}
Json to_json(const SnapshotRecord& record);
// Its inverse, for a backend reading back the record it stored (a backend may store fields of
// its own beside these; they are left alone). A missing or mistyped field is InvalidArgument
// naming it.
SnapshotRecord parse_snapshot_record(const Json& value, std::string_view where);

// {"stdout": text, "stderr": text, "exit_code": n, "truncated": b, ["signal": n]}; a stream that
// is not valid UTF-8 is carried exactly as "stdout_base64" / "stderr_base64" instead.
Json to_json(const ExecResult& result);

// {"type": "SandboxEgressNotEnforced", "message": …, "check": …} plus the typed fields of the
// error (cap, file, limit, signal, …). Never carries a BackendError's detail.
Json error_to_json(const std::exception& error);

// A backend's declarations, with silence spelled as the router reads it.
Json describe_backend(const SandboxBackend& backend);

}  // namespace airlock::json
