// The body of POST /v1/sandboxes/{handle}/exec, parsed strictly:
//
//   {"argv": ["cmd", "arg"…] | "shell": "line",      exactly one
//    "working_directory": "/guest/dir",               default: the spec's work_dir
//    "timeout_ms": n,                                 1 … limits.max_exec_timeout
//    "max_output_bytes": n,                           1 … limits.max_output_bytes
//    "overflow": "refuse" | "truncate",               default refuse
//    "stdin_base64": "…",                             canonical base64
//    "environment": {"NAME": "value", …}}
//
// Every refusal is an InvalidArgument naming the field ("body.timeout_ms", "body.argv[1]").
// Kept apart from the route so that it can be fuzzed on its own.
#pragma once

#include <optional>
#include <string>

#include "airlock/json.hpp"
#include "airlock/sandbox.hpp"
#include "daemon/api.hpp"

namespace airlock::daemon {

struct ExecRequest {
  Command command;
  std::optional<std::string> working_directory;
  Milliseconds timeout;
  // Everything but working_directory, timeout and stop, which the route fills in.
  ExecOptions options;
};

ExecRequest parse_exec_request(const json::Json& body, const ApiLimits& limits);

}  // namespace airlock::daemon
