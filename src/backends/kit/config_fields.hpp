// Readers for the fields of a backend's JSON configuration, shared by the backend factories.
// Each names the offending path in the InvalidArgument it raises, so `airlock check` and the
// daemon can say exactly which key of which backend was wrong.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "airlock/errors.hpp"
#include "airlock/json.hpp"
#include "egress/policy.hpp"

namespace airlock::config_fields {

inline std::uint64_t count(const json::Json& value, const std::string& path) {
  if (!value.is_number_unsigned()) {
    throw InvalidArgument(path + ": expected a non-negative integer", path);
  }
  return value.get<std::uint64_t>();
}

// null is "not set".
inline std::optional<std::uint64_t> optional_count(const json::Json& value,
                                                   const std::string& path) {
  if (value.is_null()) return std::nullopt;
  return count(value, path);
}

inline std::string text(const json::Json& value, const std::string& path) {
  if (!value.is_string()) throw InvalidArgument(path + ": expected a string", path);
  return value.get<std::string>();
}

inline std::filesystem::path absolute_path(const json::Json& value, const std::string& path) {
  std::filesystem::path parsed = text(value, path);
  if (!parsed.is_absolute()) throw InvalidArgument(path + ": must be an absolute path", path);
  return parsed;
}

// The egress keys every backend with an in-process proxy accepts: egress_ports (the ports an
// allowlist admits, default [443]) and egress_allow_nonglobal_for_tests (CIDR ranges; weakens
// the boundary, see airlock/egress.hpp). Returns false when `field` is not one of them.
inline bool read_egress_field(std::string_view field, const json::Json& value,
                              const std::string& path, EgressPolicy& policy) {
  if (field == "egress_ports") {
    if (!value.is_array()) throw InvalidArgument(path + ": expected an array of ports", path);
    policy.allowed_ports.clear();
    for (const auto& port : value) {
      const std::uint64_t number = count(port, path);
      if (number == 0 || number > 65535) throw InvalidArgument(path + ": ports are 1..65535", path);
      policy.allowed_ports.push_back(static_cast<std::uint16_t>(number));
    }
    return true;
  }
  if (field == "egress_allow_nonglobal_for_tests") {
    if (!value.is_array()) throw InvalidArgument(path + ": expected an array of CIDR ranges", path);
    policy.allow_nonglobal_for_tests.clear();
    for (const auto& range : value) policy.allow_nonglobal_for_tests.push_back(text(range, path));
    return true;
  }
  return false;
}

// A bad port list or CIDR range is refused when the configuration is read, naming it, not at
// the first acquire.
inline void check_egress_policy(const EgressPolicy& policy, std::string_view where) {
  try {
    (void)egress::CompiledPolicy::compile(policy);
  } catch (const InvalidArgument& bad) {
    throw InvalidArgument(std::string(where) + ": " + bad.what(), std::string(where) + ".egress");
  }
}

// ---- the declarative schema ------------------------------------------------------------------
//
// A backend's configuration is a table of fields, each a name and how it is read into the
// config; parse_fields walks a JSON object through it, refusing anything that is not an object
// and any field the table lacks (naming every field it knows, from the table itself, so the
// message cannot drift from what is accepted).

template <typename Config>
struct Field {
  const char* name;
  void (*read)(const json::Json& value, const std::string& path, Config& config);
};

template <typename Config, std::size_t N>
Config parse_fields(const json::Json& config, std::string_view where,
                    const Field<Config> (&schema)[N]) {
  if (!config.is_object()) {
    throw InvalidArgument(std::string(where) + ": expected an object", std::string(where));
  }
  Config parsed;
  for (const auto& [name, value] : config.items()) {
    const std::string path = std::string(where) + "." + name;
    const Field<Config>* field = nullptr;
    for (const auto& candidate : schema) {
      if (name == candidate.name) field = &candidate;
    }
    if (field == nullptr) {
      std::string known;
      for (const auto& candidate : schema)
        known += (known.empty() ? "" : ", ") + std::string(candidate.name);
      throw InvalidArgument(path + ": unknown field (known: " + known + ")", path);
    }
    field->read(value, path, parsed);
  }
  check_egress_policy(parsed.egress_policy, where);
  return parsed;
}

inline bool flag(const json::Json& value, const std::string& path) {
  if (!value.is_boolean()) throw InvalidArgument(path + ": expected true or false", path);
  return value.get<bool>();
}

// The fields every namespace backend shares, spelled and bounded the same way in each.
template <typename Config>
void read_uid_base(const json::Json& value, const std::string& path, Config& config) {
  const std::uint64_t base = count(value, path);
  if (base == 0 || base > 0xFFFFFFFEull - 65535) {
    throw InvalidArgument(path + ": must be above 0 and leave room for 65536 ids", path);
  }
  config.uid_base = static_cast<std::uint32_t>(base);
}
template <typename Config>
void read_memory_bytes(const json::Json& value, const std::string& path, Config& config) {
  config.default_resources.memory_bytes = optional_count(value, path);
}
template <typename Config>
void read_pids(const json::Json& value, const std::string& path, Config& config) {
  config.default_resources.pids = optional_count(value, path);
}
template <typename Config>
void read_cpu_millis(const json::Json& value, const std::string& path, Config& config) {
  config.default_resources.cpu_millis = optional_count(value, path);
}
template <typename Config>
void read_disk_bytes(const json::Json& value, const std::string& path, Config& config) {
  config.default_resources.disk_bytes = count(value, path);
}
template <typename Config>
void read_output_ceiling(const json::Json& value, const std::string& path, Config& config) {
  config.output_ceiling_bytes = count(value, path);
  if (config.output_ceiling_bytes == 0) throw InvalidArgument(path + ": must be positive", path);
}
template <typename Config>
void read_max_concurrent_commands(const json::Json& value, const std::string& path,
                                  Config& config) {
  const std::uint64_t slots = count(value, path);
  if (slots == 0 || slots > 4096) throw InvalidArgument(path + ": 1 to 4096", path);
  config.max_concurrent_commands = static_cast<std::uint32_t>(slots);
}
template <typename Config>
void read_limits(const json::Json& value, const std::string& path, Config& config) {
  if (!value.is_object()) throw InvalidArgument(path + ": expected an object", path);
  for (const auto& [direction, caps] : value.items()) {
    if (direction == "files_in") {
      config.limits.files_in = json::parse_transfer_limits(caps, path + ".files_in");
    } else if (direction == "files_out") {
      config.limits.files_out = json::parse_transfer_limits(caps, path + ".files_out");
    } else {
      throw InvalidArgument(path + "." + direction + ": unknown field (known: files_in, files_out)",
                            path + "." + direction);
    }
  }
}
template <typename Config>
void read_egress_ports(const json::Json& value, const std::string& path, Config& config) {
  (void)read_egress_field("egress_ports", value, path, config.egress_policy);
}
template <typename Config>
void read_egress_nonglobal(const json::Json& value, const std::string& path, Config& config) {
  (void)read_egress_field("egress_allow_nonglobal_for_tests", value, path, config.egress_policy);
}

}  // namespace airlock::config_fields
