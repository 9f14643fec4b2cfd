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

}  // namespace airlock::config_fields
