// The gvisor backend as a configurable type: {"type": "gvisor", "state_dir": "…", …}.
#include "airlock/backend_factory.hpp"
#include "airlock/backends/gvisor.hpp"
#include "airlock/errors.hpp"
#include "egress/policy.hpp"

namespace airlock {
namespace {

std::uint64_t count_field(const json::Json& value, const std::string& path) {
  if (!value.is_number_unsigned()) {
    throw InvalidArgument(path + ": expected a non-negative integer", path);
  }
  return value.get<std::uint64_t>();
}

std::optional<std::uint64_t> optional_count(const json::Json& value, const std::string& path) {
  if (value.is_null()) return std::nullopt;
  return count_field(value, path);
}

std::string string_field(const json::Json& value, const std::string& path) {
  if (!value.is_string()) throw InvalidArgument(path + ": expected a string", path);
  return value.get<std::string>();
}

std::filesystem::path absolute_path(const json::Json& value, const std::string& path) {
  std::filesystem::path parsed = string_field(value, path);
  if (!parsed.is_absolute()) throw InvalidArgument(path + ": must be an absolute path", path);
  return parsed;
}

}  // namespace

GvisorBackendConfig parse_gvisor_backend_config(const json::Json& config, std::string_view where) {
  if (!config.is_object()) {
    throw InvalidArgument(std::string(where) + ": expected an object", std::string(where));
  }
  GvisorBackendConfig parsed;
  for (const auto& [field, value] : config.items()) {
    const std::string path = std::string(where) + "." + field;
    if (field == "state_dir") {
      parsed.state_dir = absolute_path(value, path);
    } else if (field == "runsc_path") {
      parsed.runsc_path = absolute_path(value, path);
    } else if (field == "platform") {
      const std::string platform = string_field(value, path);
      if (platform == "auto") {
        parsed.platform.reset();
      } else if (platform == "systrap") {
        parsed.platform = GvisorPlatform::systrap;
      } else if (platform == "ptrace") {
        parsed.platform = GvisorPlatform::ptrace;
      } else {
        throw InvalidArgument(path + ": \"" + platform +
                                  "\" is not a platform (auto, systrap, "
                                  "ptrace)",
                              path);
      }
    } else if (field == "image_store") {
      parsed.image_store = absolute_path(value, path);
    } else if (field == "default_image") {
      parsed.default_image = string_field(value, path);
      if (parsed.default_image.empty()) throw InvalidArgument(path + ": must not be empty", path);
    } else if (field == "uid_base") {
      const std::uint64_t base = count_field(value, path);
      if (base == 0 || base > 0xFFFFFFFEull - 65535) {
        throw InvalidArgument(path + ": must be above 0 and leave room for 65536 ids", path);
      }
      parsed.uid_base = static_cast<std::uint32_t>(base);
    } else if (field == "memory_bytes") {
      parsed.default_resources.memory_bytes = optional_count(value, path);
    } else if (field == "pids") {
      parsed.default_resources.pids = optional_count(value, path);
    } else if (field == "cpu_millis") {
      parsed.default_resources.cpu_millis = optional_count(value, path);
    } else if (field == "pids_overhead") {
      parsed.pids_overhead = count_field(value, path);
    } else if (field == "overlay_medium") {
      parsed.overlay_medium = string_field(value, path);
      if (parsed.overlay_medium != "dir" && parsed.overlay_medium != "memory") {
        throw InvalidArgument(path + ": expected \"dir\" or \"memory\"", path);
      }
    } else if (field == "output_ceiling_bytes") {
      parsed.output_ceiling_bytes = count_field(value, path);
      if (parsed.output_ceiling_bytes == 0)
        throw InvalidArgument(path + ": must be positive", path);
    } else if (field == "max_concurrent_commands") {
      const std::uint64_t slots = count_field(value, path);
      if (slots == 0 || slots > 4096) throw InvalidArgument(path + ": 1 to 4096", path);
      parsed.max_concurrent_commands = static_cast<std::uint32_t>(slots);
    } else if (field == "runsc_timeout_ms") {
      const std::uint64_t milliseconds = count_field(value, path);
      if (milliseconds == 0) throw InvalidArgument(path + ": must be positive", path);
      parsed.runsc_timeout = std::chrono::milliseconds(milliseconds);
    } else if (field == "guest_helper_path") {
      parsed.guest_helper_path = absolute_path(value, path);
    } else if (field == "limits") {
      if (!value.is_object()) throw InvalidArgument(path + ": expected an object", path);
      for (const auto& [direction, caps] : value.items()) {
        if (direction == "files_in") {
          parsed.limits.files_in = json::parse_transfer_limits(caps, path + ".files_in");
        } else if (direction == "files_out") {
          parsed.limits.files_out = json::parse_transfer_limits(caps, path + ".files_out");
        } else {
          throw InvalidArgument(
              path + "." + direction + ": unknown field (known: files_in, files_out)",
              path + "." + direction);
        }
      }
    } else if (field == "egress_ports") {
      if (!value.is_array()) throw InvalidArgument(path + ": expected an array of ports", path);
      parsed.egress_policy.allowed_ports.clear();
      for (const auto& port : value) {
        const std::uint64_t number = count_field(port, path);
        if (number == 0 || number > 65535)
          throw InvalidArgument(path + ": ports are 1..65535", path);
        parsed.egress_policy.allowed_ports.push_back(static_cast<std::uint16_t>(number));
      }
    } else if (field == "egress_allow_nonglobal_for_tests") {
      if (!value.is_array()) {
        throw InvalidArgument(path + ": expected an array of CIDR ranges", path);
      }
      parsed.egress_policy.allow_nonglobal_for_tests.clear();
      for (const auto& range : value) {
        parsed.egress_policy.allow_nonglobal_for_tests.push_back(string_field(range, path));
      }
    } else {
      throw InvalidArgument(path +
                                ": unknown field (known: state_dir, runsc_path, platform, "
                                "image_store, default_image, uid_base, memory_bytes, pids, "
                                "cpu_millis, pids_overhead, overlay_medium, "
                                "output_ceiling_bytes, max_concurrent_commands, "
                                "runsc_timeout_ms, guest_helper_path, limits, egress_ports, "
                                "egress_allow_nonglobal_for_tests)",
                            path);
    }
  }
  // A bad port list or CIDR range is refused now, naming the config, not at the first acquire.
  try {
    (void)egress::CompiledPolicy::compile(parsed.egress_policy);
  } catch (const InvalidArgument& bad) {
    throw InvalidArgument(std::string(where) + ": " + bad.what(), std::string(where) + ".egress");
  }
  return parsed;
}

namespace {

const bool kRegistered = register_backend_factory(
    "gvisor",
    "runsc (gVisor) with OCI bundles from the image store; a user-space kernel between the "
    "guest and the host (hardened_container)",
    [](const json::Json& config, std::string_view where) {
      return make_gvisor_backend(parse_gvisor_backend_config(config, where));
    });

}  // namespace
}  // namespace airlock
