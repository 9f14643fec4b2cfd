// The in-process backend as a configurable type, so that the programs linking it (the test
// suites, airlock-testing, airlockd-testing, airlock.testing) can use it as a policy fixture:
// {"type": "testing", "isolation": "none", "egress_modes": ["closed"], …}. Registered when the
// program starts, as every backend is — but only a test program has it to register.
//
// Declarations, as the router reads a backend's:
//   name, isolation, egress_modes, capabilities, os_families, limits
// An isolation that is not a rung, and limits that cannot be read as SandboxLimits, are kept as
// declared: the router refuses them when it checks this backend — BackendNotPermitted when it is
// selected, TransferLimitsNotPermitted when a spec is checked against it — exactly as it refuses
// a backend declaring them in code, and never when the backend is only registered beside the
// selected one. Everything else is parsed strictly: a wrong shape is an InvalidArgument naming
// the field.
//
// The fixture's behaviour (see airlock/testing.hpp for each):
//   shared_sandbox (bool)         one sandbox for every key and kind, as the reference fake
//   unemulated_commands           "scripted" | "not_found"
//   emulate_commands (bool)       false: every command is answered from the script
//   outputs                       {marker: "stdout" | {"stdout", "stderr", "exit_code"}}, or a
//                                 list of {"marker", "stdout", "stderr", "exit_code"} (in order;
//                                 an object's markers are tried in sorted order)
//   default_stdout (string)
//   raises, acquire_error         {"type": "<error type>", "message": "…"}: exec and run_code /
//                                 acquire throw an example of that airlock error kind
//   dispose_fails (bool), purge_count (int)
//   stat_sizes                    {"/abs/path": int | null}
//   hanging_reads                 ["/abs/path", …], with read_hang_seconds (default 5)
//   seed_files                    {"/abs/path": "content" | {"kind": "file", "content": …} |
//                                  {"kind": "symlink", "target": …} | {"kind": "directory"} |
//                                  {"kind": "other"}}
//   snapshot_content              "filesystem" | "filesystem+memory" | null: what its snapshots
//                                 are declared to hold (null, the default: none declared; add
//                                 "snapshot" to capabilities for the router to let one through)
//   snapshot_seconds              how long each snapshot takes, the sandbox frozen meanwhile
#include <spdlog/spdlog.h>

#include <cmath>
#include <limits>

#include "airlock/backend_factory.hpp"
#include "airlock/errors.hpp"
#include "airlock/testing.hpp"

namespace airlock::testing {
namespace {

using json::Json;

template <typename E, typename Parse>
EnumSet<E> parse_members(const Json& value, const std::string& path, Parse parse) {
  if (!value.is_array()) throw InvalidArgument(path + ": expected an array of strings", path);
  EnumSet<E> set;
  for (std::size_t i = 0; i < value.size(); ++i) {
    const std::string item = path + "[" + std::to_string(i) + "]";
    if (!value[i].is_string()) throw InvalidArgument(item + ": expected a string", item);
    set.insert(parse(value[i].get<std::string>(), item));
  }
  return set;
}

std::string string_field(const Json& value, const std::string& path) {
  if (!value.is_string()) throw InvalidArgument(path + ": expected a string", path);
  return value.get<std::string>();
}

bool bool_field(const Json& value, const std::string& path) {
  if (!value.is_boolean()) throw InvalidArgument(path + ": expected true or false", path);
  return value.get<bool>();
}

std::string absolute_path(const std::string& text, const std::string& path) {
  if (text.empty() || text.front() != '/') {
    throw InvalidArgument(path + ": \"" + text + "\" is not an absolute guest path", path);
  }
  return text;
}

// The rung a declaration names, or — for anything that is not one — a value off the ladder, so
// the router's own check refuses it (is_known_rung is false for it).
Isolation declared_rung(const Json& value, const std::string& path, std::string& unknown) {
  if (value.is_string()) {
    try {
      return parse_isolation(value.get<std::string>(), path);
    } catch (const InvalidArgument& error) {
      unknown = error.message();
    }
  } else {
    unknown = path + ": " + value.dump() + " is not a rung's name";
  }
  return static_cast<Isolation>(std::numeric_limits<std::uint8_t>::max());
}

// {"files_in": TransferLimits, "files_out": TransferLimits}; any other shape throws
// InvalidArgument saying what is wrong with it.
SandboxLimits read_limits(const Json& value, const std::string& path) {
  if (!value.is_object()) throw InvalidArgument(path + ": expected an object", path);
  SandboxLimits limits;
  for (const auto& [direction, caps] : value.items()) {
    if (direction == "files_in") {
      limits.files_in = json::parse_transfer_limits(caps, path + ".files_in");
    } else if (direction == "files_out") {
      limits.files_out = json::parse_transfer_limits(caps, path + ".files_out");
    } else {
      throw InvalidArgument(path + "." + direction +
                                ": unknown field (known: files_in, files_out; a bare "
                                "TransferLimits is not a SandboxLimits)",
                            path + "." + direction);
    }
  }
  return limits;
}

// {"type": "<error type>", "message": "…"}: the error a fault throws.
std::exception_ptr scripted_error_field(const Json& value, const std::string& path) {
  if (!value.is_object()) {
    throw InvalidArgument(path + ": expected {\"type\": \"<error type>\", \"message\": \"…\"}",
                          path);
  }
  std::string type;
  std::string message = "a scripted fault";
  for (const auto& [field, item] : value.items()) {
    if (field == "type") {
      type = string_field(item, path + ".type");
    } else if (field == "message") {
      message = string_field(item, path + ".message");
    } else {
      throw InvalidArgument(path + "." + field + ": unknown field (known: type, message)",
                            path + "." + field);
    }
  }
  try {
    return scripted_error(type, message);
  } catch (const InvalidArgument& error) {
    throw InvalidArgument(path + ".type: " + error.message(), path + ".type");
  }
}

ExecResult scripted_answer(const Json& value, const std::string& path, bool with_marker,
                           std::string* marker) {
  ExecResult answer;
  if (value.is_string() && !with_marker) {
    answer.stdout_bytes = value.get<std::string>();
    return answer;
  }
  if (!value.is_object()) {
    throw InvalidArgument(path +
                              ": expected a string (stdout) or {\"stdout\", \"stderr\", "
                              "\"exit_code\"}",
                          path);
  }
  for (const auto& [field, item] : value.items()) {
    const std::string at = path + "." + field;
    if (field == "stdout") {
      answer.stdout_bytes = string_field(item, at);
    } else if (field == "stderr") {
      answer.stderr_bytes = string_field(item, at);
    } else if (field == "exit_code") {
      if (!item.is_number_integer()) throw InvalidArgument(at + ": expected an integer", at);
      answer.exit_code = item.get<int>();
    } else if (field == "marker" && with_marker) {
      *marker = string_field(item, at);
    } else {
      throw InvalidArgument(
          at + ": unknown field (known: " + std::string(with_marker ? "marker, " : "") +
              "stdout, stderr, exit_code)",
          at);
    }
  }
  return answer;
}

std::vector<std::pair<std::string, ExecResult>> parse_outputs(const Json& value,
                                                              const std::string& path) {
  std::vector<std::pair<std::string, ExecResult>> outputs;
  if (value.is_object()) {
    for (const auto& [marker, answer] : value.items()) {
      outputs.emplace_back(marker, scripted_answer(answer, path + "." + marker, false, nullptr));
    }
  } else if (value.is_array()) {
    for (std::size_t i = 0; i < value.size(); ++i) {
      const std::string at = path + "[" + std::to_string(i) + "]";
      std::string text;
      ExecResult answer = scripted_answer(value[i], at, true, &text);
      if (!value[i].contains("marker")) throw InvalidArgument(at + ".marker: required", at);
      outputs.emplace_back(text, std::move(answer));
    }
  } else {
    throw InvalidArgument(path + ": expected an object {marker: answer} or a list of answers",
                          path);
  }
  return outputs;
}

std::map<std::string, std::optional<std::uint64_t>> parse_stat_sizes(const Json& value,
                                                                     const std::string& path) {
  if (!value.is_object()) throw InvalidArgument(path + ": expected {path: size or null}", path);
  std::map<std::string, std::optional<std::uint64_t>> sizes;
  for (const auto& [file, size] : value.items()) {
    const std::string at = path + "." + file;
    if (size.is_null()) {
      sizes[absolute_path(file, at)] = std::nullopt;
    } else if (size.is_number_integer() && size.get<std::int64_t>() >= 0) {
      sizes[absolute_path(file, at)] = size.get<std::uint64_t>();
    } else {
      throw InvalidArgument(at + ": expected a size in bytes (an integer ≥ 0) or null", at);
    }
  }
  return sizes;
}

std::vector<SeedEntry> parse_seeds(const Json& value, const std::string& path) {
  if (!value.is_object()) throw InvalidArgument(path + ": expected {path: entry}", path);
  std::vector<SeedEntry> seeds;
  for (const auto& [file, entry] : value.items()) {
    const std::string at = path + "." + file;
    SeedEntry seed{absolute_path(file, at), EntryKind::file, {}};
    if (entry.is_string()) {
      seed.content = entry.get<std::string>();
      seeds.push_back(std::move(seed));
      continue;
    }
    if (!entry.is_object() || !entry.contains("kind")) {
      throw InvalidArgument(at + ": expected the file's content or {\"kind\": …}", at);
    }
    seed.kind = parse_entry_kind(string_field(entry["kind"], at + ".kind"), at + ".kind");
    for (const auto& [field, item] : entry.items()) {
      if (field == "kind") continue;
      const bool fits = (field == "content" && seed.kind == EntryKind::file) ||
                        (field == "target" && seed.kind == EntryKind::symlink);
      if (!fits) {
        throw InvalidArgument(at + "." + field + ": not a field of a " +
                                  std::string(to_string(seed.kind)) +
                                  " seed (a file takes content, a symlink target)",
                              at + "." + field);
      }
      seed.content = string_field(item, at + "." + field);
    }
    seeds.push_back(std::move(seed));
  }
  return seeds;
}

Milliseconds positive_seconds(const Json& value, const std::string& path) {
  if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() <= 0) {
    throw InvalidArgument(path + ": expected a positive number of seconds", path);
  }
  return Milliseconds(static_cast<long>(std::ceil(value.get<double>() * 1000)));
}

constexpr const char* kKnownFields =
    "name, isolation, egress_modes, capabilities, os_families, limits, unemulated_commands, "
    "emulate_commands, shared_sandbox, outputs, default_stdout, raises, acquire_error, "
    "dispose_fails, purge_count, stat_sizes, hanging_reads, read_hang_seconds, seed_files, "
    "snapshot_content, snapshot_seconds";

// The backend declares limits it cannot have meant: the router refuses it at its limits check.
class UnreadableLimitsBackend : public InProcessSandboxBackend {
 public:
  UnreadableLimitsBackend(InProcessBackendOptions options, std::string why)
      : InProcessSandboxBackend(std::move(options)), why_(std::move(why)) {}

  std::optional<SandboxLimits> limits() const override {
    throw TransferLimitsNotPermitted("sandbox backend '" + name() +
                                         "' declares transfer limits that are not a "
                                         "SandboxLimits ({\"files_in\": …, \"files_out\": …}): " +
                                         why_ + "; nothing can tell what it would carry",
                                     "transfer-limits");
  }

 private:
  std::string why_;
};

void read_field(const std::string& field, const Json& value, const std::string& path,
                InProcessBackendOptions& options, std::string& unknown_rung,
                std::optional<std::string>& unreadable_limits) {
  InProcessSandboxOptions& sandbox = options.sandbox;
  if (field == "name") {
    options.name = string_field(value, path);
  } else if (field == "isolation") {
    options.isolation = declared_rung(value, path, unknown_rung);
  } else if (field == "egress_modes") {
    options.egress_modes =
        value.is_null() ? std::nullopt
                        : std::optional(parse_members<Egress>(
                              value, path, [](auto t, auto& p) { return parse_egress(t, p); }));
  } else if (field == "capabilities") {
    options.capabilities =
        value.is_null() ? std::nullopt
                        : std::optional(parse_members<Capability>(
                              value, path, [](auto t, auto& p) { return parse_capability(t, p); }));
  } else if (field == "os_families") {
    options.os_families =
        value.is_null() ? std::nullopt
                        : std::optional(parse_members<OsFamily>(
                              value, path, [](auto t, auto& p) { return parse_os_family(t, p); }));
  } else if (field == "limits") {
    try {
      options.limits = read_limits(value, path);
    } catch (const InvalidArgument& error) {
      unreadable_limits = error.message();
    }
  } else if (field == "unemulated_commands") {
    // "scripted" (exit 0, the fixture's default) or "not_found" (exit 127, like a guest).
    if (!value.is_string() ||
        (value.get<std::string>() != "scripted" && value.get<std::string>() != "not_found")) {
      throw InvalidArgument(path + ": expected \"scripted\" or \"not_found\"", path);
    }
    sandbox.unemulated_not_found = value.get<std::string>() == "not_found";
  } else if (field == "emulate_commands") {
    sandbox.emulate_commands = bool_field(value, path);
  } else if (field == "shared_sandbox") {
    options.sandbox_per_key = !bool_field(value, path);
  } else if (field == "outputs") {
    sandbox.outputs = parse_outputs(value, path);
  } else if (field == "default_stdout") {
    sandbox.default_stdout = string_field(value, path);
  } else if (field == "raises") {
    sandbox.raises = scripted_error_field(value, path);
  } else if (field == "acquire_error") {
    options.acquire_error = scripted_error_field(value, path);
  } else if (field == "dispose_fails") {
    options.dispose_fails = bool_field(value, path);
  } else if (field == "purge_count") {
    if (!value.is_number_integer()) throw InvalidArgument(path + ": expected an integer", path);
    options.purge_count = value.get<int>();
  } else if (field == "stat_sizes") {
    sandbox.stat_sizes = parse_stat_sizes(value, path);
  } else if (field == "hanging_reads") {
    if (!value.is_array()) throw InvalidArgument(path + ": expected a list of paths", path);
    for (std::size_t i = 0; i < value.size(); ++i) {
      const std::string at = path + "[" + std::to_string(i) + "]";
      sandbox.hanging_reads.insert(absolute_path(string_field(value[i], at), at));
    }
  } else if (field == "read_hang_seconds") {
    sandbox.read_hang_bound = positive_seconds(value, path);
  } else if (field == "seed_files") {
    sandbox.seeds = parse_seeds(value, path);
  } else if (field == "snapshot_content") {
    if (value.is_null()) {
      options.snapshot_content = std::nullopt;
    } else if (value == "filesystem") {
      options.snapshot_content = SnapshotContent::filesystem;
    } else if (value == "filesystem+memory") {
      options.snapshot_content = SnapshotContent::filesystem_and_memory;
    } else {
      throw InvalidArgument(path + ": expected \"filesystem\", \"filesystem+memory\" or null, got " +
                                value.dump(),
                            path);
    }
  } else if (field == "snapshot_seconds") {
    options.snapshot_duration = positive_seconds(value, path);
  } else {
    throw InvalidArgument(path + ": unknown field (known: " + kKnownFields + ")", path);
  }
}

std::shared_ptr<SandboxBackend> make(const Json& config, std::string_view where) {
  InProcessBackendOptions options;
  options.sandbox_per_key = true;
  std::string unknown_rung;
  std::optional<std::string> unreadable_limits;
  for (const auto& [field, value] : config.items()) {
    read_field(field, value, std::string(where) + "." + field, options, unknown_rung,
               unreadable_limits);
  }
  if (!unknown_rung.empty()) {
    spdlog::warn("testing backend '{}': {}; a router that selects it refuses it", options.name,
                 unknown_rung);
  }
  if (unreadable_limits) {
    spdlog::warn("testing backend '{}': {}; a router checking a spec against it refuses it",
                 options.name, *unreadable_limits);
    return std::make_shared<UnreadableLimitsBackend>(std::move(options), *unreadable_limits);
  }
  return std::make_shared<InProcessSandboxBackend>(std::move(options));
}

}  // namespace

const bool kRegistered = register_backend_factory(
    "testing", "in-process fake with overridable declarations (no isolation; tests only)", make);

}  // namespace airlock::testing
