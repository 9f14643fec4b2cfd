// The gvisor backend as a configurable type: {"type": "gvisor", "state_dir": "…", …}.
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include "airlock/backend_factory.hpp"
#include "airlock/backends/gvisor.hpp"
#include "airlock/errors.hpp"
#include "airlock/state_dir.hpp"
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

// runsc's Gofer runs as an unprivileged uid (uid_base) and must pass through the state
// directory and the image store to reach a rootfs and the helper. When either is this user's
// own real directory closed to others (a `mktemp -d` is 0700), only the search bit for others is
// added: nobody may list or change it. A directory above them, or one that is not ours, is left
// as it is; the backend refuses it by name.
void let_the_gofer_pass(const std::filesystem::path& directory) {
  struct stat info {};
  if (::lstat(directory.c_str(), &info) != 0 || !S_ISDIR(info.st_mode) ||
      info.st_uid != ::geteuid() || (info.st_mode & S_IXOTH) != 0) {
    return;
  }
  if (::chmod(directory.c_str(), (info.st_mode & 07777) | S_IXOTH) == 0) {
    spdlog::info("gvisor: {} made traversable by others (o+x) for runsc's file proxy",
                 directory.string());
  }
}

const bool kRegistered = register_backend_factory(
    "gvisor",
    "runsc (gVisor) with OCI bundles from the image store; a user-space kernel between the "
    "guest and the host (hardened_container)",
    [](const json::Json& config, std::string_view where) {
      GvisorBackendConfig parsed = parse_gvisor_backend_config(config, where);
      if (::geteuid() == 0) {
        const std::filesystem::path state =
            parsed.state_dir.empty() ? default_state_dir() : parsed.state_dir;
        let_the_gofer_pass(state);
        let_the_gofer_pass(parsed.image_store.empty() ? state / "images" : parsed.image_store);
      }
      return make_gvisor_backend(std::move(parsed));
    });

}  // namespace
}  // namespace airlock
