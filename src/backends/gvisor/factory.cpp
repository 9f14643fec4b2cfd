// The gvisor backend as a configurable type: {"type": "gvisor", "state_dir": "…", …}.
#include "airlock/backend_factory.hpp"
#include "airlock/backends/gvisor.hpp"
#include "airlock/errors.hpp"
#include "backends/kit/config_fields.hpp"

namespace airlock {

GvisorBackendConfig parse_gvisor_backend_config(const json::Json& config, std::string_view where) {
  if (!config.is_object()) {
    throw InvalidArgument(std::string(where) + ": expected an object", std::string(where));
  }
  GvisorBackendConfig parsed;
  for (const auto& [field, value] : config.items()) {
    const std::string path = std::string(where) + "." + field;
    if (field == "state_dir") {
      parsed.state_dir = config_fields::absolute_path(value, path);
    } else if (field == "runsc_path") {
      parsed.runsc_path = config_fields::absolute_path(value, path);
    } else if (field == "platform") {
      const std::string platform = config_fields::text(value, path);
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
      parsed.image_store = config_fields::absolute_path(value, path);
    } else if (field == "default_image") {
      parsed.default_image = config_fields::text(value, path);
      if (parsed.default_image.empty()) throw InvalidArgument(path + ": must not be empty", path);
    } else if (field == "uid_base") {
      const std::uint64_t base = config_fields::count(value, path);
      if (base == 0 || base > 0xFFFFFFFEull - 65535) {
        throw InvalidArgument(path + ": must be above 0 and leave room for 65536 ids", path);
      }
      parsed.uid_base = static_cast<std::uint32_t>(base);
    } else if (field == "memory_bytes") {
      parsed.default_resources.memory_bytes = config_fields::optional_count(value, path);
    } else if (field == "pids") {
      parsed.default_resources.pids = config_fields::optional_count(value, path);
    } else if (field == "cpu_millis") {
      parsed.default_resources.cpu_millis = config_fields::optional_count(value, path);
    } else if (field == "pids_overhead") {
      parsed.pids_overhead = config_fields::count(value, path);
    } else if (field == "disk_bytes") {
      parsed.default_resources.disk_bytes = config_fields::count(value, path);
    } else if (field == "overlay_medium") {
      throw InvalidArgument(path + ": no longer a setting: everything a guest writes now lives in "
                                   "one store bounded by disk_bytes (neither the state "
                                   "directory's disk nor unbounded memory)",
                            path);
    } else if (field == "output_ceiling_bytes") {
      parsed.output_ceiling_bytes = config_fields::count(value, path);
      if (parsed.output_ceiling_bytes == 0)
        throw InvalidArgument(path + ": must be positive", path);
    } else if (field == "max_concurrent_commands") {
      const std::uint64_t slots = config_fields::count(value, path);
      if (slots == 0 || slots > 4096) throw InvalidArgument(path + ": 1 to 4096", path);
      parsed.max_concurrent_commands = static_cast<std::uint32_t>(slots);
    } else if (field == "runsc_timeout_ms") {
      const std::uint64_t milliseconds = config_fields::count(value, path);
      if (milliseconds == 0) throw InvalidArgument(path + ": must be positive", path);
      parsed.runsc_timeout = std::chrono::milliseconds(milliseconds);
    } else if (field == "guest_helper_path") {
      parsed.guest_helper_path = config_fields::absolute_path(value, path);
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
    } else if (config_fields::read_egress_field(field, value, path, parsed.egress_policy)) {
      // egress_ports or egress_allow_nonglobal_for_tests, now in parsed.egress_policy
    } else {
      throw InvalidArgument(path +
                                ": unknown field (known: state_dir, runsc_path, platform, "
                                "image_store, default_image, uid_base, memory_bytes, pids, "
                                "cpu_millis, disk_bytes, pids_overhead, "
                                "output_ceiling_bytes, max_concurrent_commands, "
                                "runsc_timeout_ms, guest_helper_path, limits, egress_ports, "
                                "egress_allow_nonglobal_for_tests)",
                            path);
    }
  }
  config_fields::check_egress_policy(parsed.egress_policy, where);
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
