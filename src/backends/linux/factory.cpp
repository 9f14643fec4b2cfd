// The linux backend as a configurable type: {"type": "linux", "state_dir": "…", …}.
#include "airlock/backend_factory.hpp"
#include "airlock/backends/linux.hpp"
#include "airlock/errors.hpp"
#include "backends/kit/config_fields.hpp"

namespace airlock {

namespace {

using Linux = LinuxBackendConfig;
namespace fields = config_fields;

// {"size": …, "idle_timeout_ms": …, "memory_ceiling_bytes": …, "prewarm": …, "max_shapes": …}
LinuxPoolConfig read_pool(const json::Json& value, const std::string& path) {
  if (!value.is_object()) throw InvalidArgument(path + ": expected an object", path);
  LinuxPoolConfig pool;
  for (const auto& [name, field] : value.items()) {
    const std::string at = path + "." + name;
    if (name == "size") {
      const std::uint64_t size = fields::count(field, at);
      if (size > 64) throw InvalidArgument(at + ": 0 to 64 ready sandboxes per shape", at);
      pool.size = static_cast<std::uint32_t>(size);
    } else if (name == "idle_timeout_ms") {
      const std::uint64_t ms = fields::count(field, at);
      if (ms == 0) throw InvalidArgument(at + ": at least 1", at);
      pool.idle_timeout = std::chrono::milliseconds(ms);
    } else if (name == "memory_ceiling_bytes") {
      pool.memory_ceiling_bytes = fields::count(field, at);
    } else if (name == "prewarm") {
      pool.prewarm = fields::flag(field, at);
    } else if (name == "max_shapes") {
      const std::uint64_t shapes = fields::count(field, at);
      if (shapes == 0 || shapes > 64) throw InvalidArgument(at + ": 1 to 64", at);
      pool.max_shapes = static_cast<std::uint32_t>(shapes);
    } else {
      throw InvalidArgument(
          at + ": unknown field (known: size, idle_timeout_ms, memory_ceiling_bytes, prewarm, "
               "max_shapes)",
          at);
    }
  }
  return pool;
}

// Every key of {"type": "linux", …}, in the order the refusal of an unknown one lists them.
const fields::Field<Linux> kLinuxFields[] = {
    {"state_dir", [](const json::Json& v, const std::string& p,
                     Linux& c) { c.state_dir = fields::absolute_path(v, p); }},
    {"default_image", [](const json::Json& v, const std::string& p,
                         Linux& c) { c.default_image = fields::text(v, p); }},
    {"image_store", [](const json::Json& v, const std::string& p,
                       Linux& c) { c.image_store = fields::absolute_path(v, p); }},
    {"uid_base", fields::read_uid_base<Linux>},
    {"memory_bytes", fields::read_memory_bytes<Linux>},
    {"pids", fields::read_pids<Linux>},
    {"cpu_millis", fields::read_cpu_millis<Linux>},
    {"disk_bytes", fields::read_disk_bytes<Linux>},
    {"max_ptys",
     [](const json::Json& v, const std::string& p, Linux& c) {
       const std::uint64_t ptys = fields::count(v, p);
       if (ptys == 0 || ptys > 4096) throw InvalidArgument(p + ": 1 to 4096", p);
       c.max_ptys = static_cast<std::uint32_t>(ptys);
     }},
    {"delegated_cgroups",
     [](const json::Json& v, const std::string& p, Linux& c) {
       if (!v.is_array()) throw InvalidArgument(p + ": expected an array of paths", p);
       for (std::size_t i = 0; i < v.size(); ++i) {
         c.delegated_cgroups.push_back(
             fields::absolute_path(v[i], p + "[" + std::to_string(i) + "]").string());
       }
     }},
    {"subordinate_ids", [](const json::Json& v, const std::string& p,
                           Linux& c) { c.subordinate_ids = fields::flag(v, p); }},
    {"max_concurrent_commands", fields::read_max_concurrent_commands<Linux>},
    {"init_path",
     [](const json::Json& v, const std::string& p, Linux& c) { c.init_path = fields::text(v, p); }},
    {"output_ceiling_bytes", fields::read_output_ceiling<Linux>},
    {"start_timeout_ms",
     [](const json::Json& v, const std::string& p, Linux& c) {
       c.start_timeout = std::chrono::milliseconds(fields::count(v, p));
     }},
    {"per_command_cgroups", [](const json::Json& v, const std::string& p,
                               Linux& c) { c.per_command_cgroups = fields::flag(v, p); }},
    {"standby",
     [](const json::Json& v, const std::string& p, Linux& c) { c.standby = fields::flag(v, p); }},
    {"pool",
     [](const json::Json& v, const std::string& p, Linux& c) { c.pool = read_pool(v, p); }},
    {"limits", fields::read_limits<Linux>},
    {"egress_ports", fields::read_egress_ports<Linux>},
    {"egress_allow_nonglobal_for_tests", fields::read_egress_nonglobal<Linux>},
};

}  // namespace

LinuxBackendConfig parse_linux_backend_config(const json::Json& config, std::string_view where) {
  return fields::parse_fields(config, where, kLinuxFields);
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
