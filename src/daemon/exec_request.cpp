#include "daemon/exec_request.hpp"

#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "daemon/request_fields.hpp"

namespace airlock::daemon {
namespace {

Command command_of(Fields& fields) {
  const json::Json* argv = fields.optional("argv");
  const json::Json* shell = fields.optional("shell");
  if ((argv == nullptr) == (shell == nullptr)) {
    throw InvalidArgument(
        "body: exactly one of argv (an array of strings, never through a "
        "shell) or shell (a line run as sh -c) is required",
        argv ? "body.shell" : "body.argv");
  }
  const std::string field = argv ? "body.argv" : "body.shell";
  try {
    if (argv) {
      auto arguments = fields.strings("argv", *argv);
      if (arguments.empty()) throw InvalidArgument("body.argv: must not be empty", field);
      return Command::argv(std::move(arguments));
    }
    return Command::shell(fields.string("shell", *shell));
  } catch (const InvalidArgument& refused) {
    if (!refused.check().empty()) throw;
    // The protocol's own refusal (a NUL byte), given the field's name.
    throw InvalidArgument(field + ": " + refused.message(), field);
  }
}

}  // namespace

ExecRequest parse_exec_request(const json::Json& body, const ApiLimits& limits) {
  Fields fields(body, "body");
  Command command = command_of(fields);
  ExecOptions options;
  std::optional<std::string> working_directory;
  if (const json::Json* value = fields.optional("working_directory")) {
    working_directory = fields.string("working_directory", *value);
    if (working_directory->empty()) {
      throw InvalidArgument(
          "body.working_directory: must not be empty (omit it for the spec's "
          "work_dir)",
          "body.working_directory");
    }
  }
  Milliseconds timeout = limits.default_exec_timeout;
  if (const json::Json* value = fields.optional("timeout_ms")) {
    timeout = Milliseconds(fields.count(
        "timeout_ms", *value, 1, static_cast<std::uint64_t>(limits.max_exec_timeout.count())));
  }
  options.max_output_bytes = limits.default_max_output_bytes;
  if (const json::Json* value = fields.optional("max_output_bytes")) {
    options.max_output_bytes = fields.count("max_output_bytes", *value, 1, limits.max_output_bytes);
  }
  if (const json::Json* value = fields.optional("overflow")) {
    const std::string overflow = fields.string("overflow", *value);
    if (overflow == "refuse") {
      options.overflow = OutputOverflow::refuse;
    } else if (overflow == "truncate") {
      options.overflow = OutputOverflow::truncate;
    } else {
      throw InvalidArgument(
          "body.overflow: unknown value \"" + overflow + "\" (allowed: refuse, truncate)",
          "body.overflow");
    }
  }
  if (const json::Json* value = fields.optional("stdin_base64")) {
    auto decoded = base64_decode(fields.string("stdin_base64", *value));
    if (!decoded) {
      throw InvalidArgument("body.stdin_base64: not canonical base64", "body.stdin_base64");
    }
    options.stdin_bytes = std::move(*decoded);
  }
  if (const json::Json* value = fields.optional("environment")) {
    Fields environment(*value, "body.environment");
    for (const auto& [name, unused] : value->items()) {
      const std::string where = "body.environment." + name;
      if (name.empty() || name.find('=') != std::string::npos ||
          name.find('\0') != std::string::npos) {
        throw InvalidArgument(where + ": not a variable name", where);
      }
      const std::string text = environment.string(name, environment.required(name));
      if (text.find('\0') != std::string::npos) {
        throw InvalidArgument(where + ": the value contains a NUL byte", where);
      }
      options.environment.emplace_back(name, text);
    }
  }
  fields.refuse_unknown();
  return ExecRequest{std::move(command), std::move(working_directory), timeout, std::move(options)};
}

}  // namespace airlock::daemon
