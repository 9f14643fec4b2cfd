// The linux backend as a configurable type: {"type": "linux", "state_dir": "…", …}.
#include "airlock/backend_factory.hpp"
#include "airlock/backends/linux.hpp"
#include "airlock/errors.hpp"
#include "backends/kit/config_fields.hpp"

namespace airlock {

LinuxBackendConfig parse_linux_backend_config(const json::Json& config, std::string_view where) {
  if (!config.is_object()) {
    throw InvalidArgument(std::string(where) + ": expected an object", std::string(where));
  }
  LinuxBackendConfig parsed;
  for (const auto& [field, value] : config.items()) {
    const std::string path = std::string(where) + "." + field;
    if (field == "state_dir") {
      parsed.state_dir = config_fields::absolute_path(value, path);
    } else if (field == "default_image") {
      parsed.default_image = config_fields::text(value, path);
    } else if (field == "image_store") {
      parsed.image_store = config_fields::absolute_path(value, path);
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
    } else if (field == "disk_bytes") {
      parsed.default_resources.disk_bytes = config_fields::count(value, path);
    } else if (field == "delegated_cgroups") {
      if (!value.is_array()) throw InvalidArgument(path + ": expected an array of paths", path);
      for (std::size_t i = 0; i < value.size(); ++i) {
        parsed.delegated_cgroups.push_back(
            config_fields::absolute_path(value[i], path + "[" + std::to_string(i) + "]").string());
      }
    } else if (field == "max_ptys") {
      const std::uint64_t ptys = config_fields::count(value, path);
      if (ptys == 0 || ptys > 4096) throw InvalidArgument(path + ": 1 to 4096", path);
      parsed.max_ptys = static_cast<std::uint32_t>(ptys);
    } else if (field == "max_concurrent_commands") {
      const std::uint64_t slots = config_fields::count(value, path);
      if (slots == 0 || slots > 4096) throw InvalidArgument(path + ": 1 to 4096", path);
      parsed.max_concurrent_commands = static_cast<std::uint32_t>(slots);
    } else if (field == "init_path") {
      parsed.init_path = config_fields::text(value, path);
    } else if (field == "output_ceiling_bytes") {
      parsed.output_ceiling_bytes = config_fields::count(value, path);
      if (parsed.output_ceiling_bytes == 0)
        throw InvalidArgument(path + ": must be positive", path);
    } else if (field == "start_timeout_ms") {
      parsed.start_timeout = std::chrono::milliseconds(config_fields::count(value, path));
    } else if (field == "per_command_cgroups") {
      if (!value.is_boolean()) throw InvalidArgument(path + ": expected true or false", path);
      parsed.per_command_cgroups = value.get<bool>();
    } else if (field == "subordinate_ids") {
      if (!value.is_boolean()) throw InvalidArgument(path + ": expected true or false", path);
      parsed.subordinate_ids = value.get<bool>();
    } else if (field == "standby") {
      if (!value.is_boolean()) throw InvalidArgument(path + ": expected true or false", path);
      parsed.standby = value.get<bool>();
    } else if (field == "limits") {
      if (!value.is_object()) throw InvalidArgument(path + ": expected an object", path);
      for (const auto& [direction, caps] : value.items()) {
        if (direction == "files_in") {
          parsed.limits.files_in = json::parse_transfer_limits(caps, path + ".files_in");
        } else if (direction == "files_out") {
          parsed.limits.files_out = json::parse_transfer_limits(caps, path + ".files_out");
        } else {
          throw InvalidArgument(path + "." + direction +
                                    ": unknown field (known: files_in, "
                                    "files_out)",
                                path + "." + direction);
        }
      }
    } else if (config_fields::read_egress_field(field, value, path, parsed.egress_policy)) {
      // egress_ports or egress_allow_nonglobal_for_tests, now in parsed.egress_policy
    } else {
      throw InvalidArgument(path +
                                ": unknown field (known: state_dir, default_image, image_store, "
                                "uid_base, "
                                "memory_bytes, pids, cpu_millis, disk_bytes, max_ptys, "
                                "delegated_cgroups, subordinate_ids, "
                                "max_concurrent_commands, "
                                "init_path, output_ceiling_bytes, start_timeout_ms, "
                                "per_command_cgroups, standby, limits, egress_ports, "
                                "egress_allow_nonglobal_for_tests)",
                            path);
    }
  }
  config_fields::check_egress_policy(parsed.egress_policy, where);
  return parsed;
}

namespace {

const bool kRegistered = register_backend_factory(
    "linux",
    "the embedded default: namespaces, our own init as PID 1, host-side file plane (container)",
    [](const json::Json& config, std::string_view where) {
      return make_linux_backend(parse_linux_backend_config(config, where));
    });

}  // namespace
}  // namespace airlock
