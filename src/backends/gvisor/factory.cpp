// The gvisor backend as a configurable type: {"type": "gvisor", "state_dir": "…", …}.
#include "airlock/backend_factory.hpp"
#include "airlock/backends/gvisor.hpp"
#include "airlock/errors.hpp"
#include "backends/kit/config_fields.hpp"

namespace airlock {

namespace {

using Gvisor = GvisorBackendConfig;
namespace fields = config_fields;

// Every key of {"type": "gvisor", …}, in the order the refusal of an unknown one lists them.
const fields::Field<Gvisor> kGvisorFields[] = {
    {"state_dir", [](const json::Json& v, const std::string& p,
                     Gvisor& c) { c.state_dir = fields::absolute_path(v, p); }},
    {"runsc_path", [](const json::Json& v, const std::string& p,
                      Gvisor& c) { c.runsc_path = fields::absolute_path(v, p); }},
    {"platform",
     [](const json::Json& v, const std::string& p, Gvisor& c) {
       const std::string platform = fields::text(v, p);
       if (platform == "auto") {
         c.platform.reset();
       } else if (platform == "systrap") {
         c.platform = GvisorPlatform::systrap;
       } else if (platform == "ptrace") {
         c.platform = GvisorPlatform::ptrace;
       } else {
         throw InvalidArgument(
             p + ": \"" + platform + "\" is not a platform (auto, systrap, ptrace)", p);
       }
     }},
    {"image_store", [](const json::Json& v, const std::string& p,
                       Gvisor& c) { c.image_store = fields::absolute_path(v, p); }},
    {"default_image",
     [](const json::Json& v, const std::string& p, Gvisor& c) {
       c.default_image = fields::text(v, p);
       if (c.default_image.empty()) throw InvalidArgument(p + ": must not be empty", p);
     }},
    {"uid_base", fields::read_uid_base<Gvisor>},
    {"memory_bytes", fields::read_memory_bytes<Gvisor>},
    {"pids", fields::read_pids<Gvisor>},
    {"cpu_millis", fields::read_cpu_millis<Gvisor>},
    {"disk_bytes", fields::read_disk_bytes<Gvisor>},
    {"pids_overhead", [](const json::Json& v, const std::string& p,
                         Gvisor& c) { c.pids_overhead = fields::count(v, p); }},
    {"overlay_medium",
     [](const json::Json&, const std::string& p, Gvisor&) {
       throw InvalidArgument(p + ": no longer a setting: everything a guest writes now lives in "
                                 "one store bounded by disk_bytes (neither the state "
                                 "directory's disk nor unbounded memory)",
                             p);
     }},
    {"output_ceiling_bytes", fields::read_output_ceiling<Gvisor>},
    {"max_concurrent_commands", fields::read_max_concurrent_commands<Gvisor>},
    {"runsc_timeout_ms",
     [](const json::Json& v, const std::string& p, Gvisor& c) {
       const std::uint64_t milliseconds = fields::count(v, p);
       if (milliseconds == 0) throw InvalidArgument(p + ": must be positive", p);
       c.runsc_timeout = std::chrono::milliseconds(milliseconds);
     }},
    {"guest_helper_path", [](const json::Json& v, const std::string& p,
                             Gvisor& c) { c.guest_helper_path = fields::absolute_path(v, p); }},
    {"limits", fields::read_limits<Gvisor>},
    {"egress_ports", fields::read_egress_ports<Gvisor>},
    {"egress_allow_nonglobal_for_tests", fields::read_egress_nonglobal<Gvisor>},
};

}  // namespace

GvisorBackendConfig parse_gvisor_backend_config(const json::Json& config, std::string_view where) {
  return fields::parse_fields(config, where, kGvisorFields);
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
