// The microvm backend as a configurable type: {"type": "microvm", "state_dir": "…", …}.
#include "airlock/backend_factory.hpp"
#include "airlock/backends/microvm.hpp"
#include "airlock/errors.hpp"
#include "backends/kit/config_fields.hpp"

namespace airlock {

namespace {

using Microvm = MicrovmBackendConfig;
namespace fields = config_fields;

std::chrono::milliseconds positive_ms(const json::Json& v, const std::string& p) {
  const std::uint64_t milliseconds = fields::count(v, p);
  if (milliseconds == 0) throw InvalidArgument(p + ": must be positive", p);
  return std::chrono::milliseconds(milliseconds);
}

// Every key of {"type": "microvm", …}, in the order the refusal of an unknown one lists them.
const fields::Field<Microvm> kMicrovmFields[] = {
    {"state_dir", [](const json::Json& v, const std::string& p,
                     Microvm& c) { c.state_dir = fields::absolute_path(v, p); }},
    {"image_store", [](const json::Json& v, const std::string& p,
                       Microvm& c) { c.image_store = fields::absolute_path(v, p); }},
    {"uid_base", fields::read_uid_base<Microvm>},
    {"default_image",
     [](const json::Json& v, const std::string& p, Microvm& c) {
       c.default_image = fields::text(v, p);
       if (c.default_image.empty()) throw InvalidArgument(p + ": must not be empty", p);
     }},
    {"accel",
     [](const json::Json& v, const std::string& p, Microvm& c) {
       const std::string accel = fields::text(v, p);
       if (accel == "auto") {
         c.accel = MicrovmAccel::automatic;
       } else if (accel == "kvm") {
         c.accel = MicrovmAccel::kvm;
       } else if (accel == "tcg") {
         c.accel = MicrovmAccel::tcg;
       } else {
         throw InvalidArgument(p + ": \"" + accel + "\" is not an accelerator (auto, kvm, tcg)",
                               p);
       }
     }},
    {"qemu_path", [](const json::Json& v, const std::string& p,
                     Microvm& c) { c.qemu_path = fields::absolute_path(v, p); }},
    {"qemu_img_path", [](const json::Json& v, const std::string& p,
                         Microvm& c) { c.qemu_img_path = fields::absolute_path(v, p); }},
    {"kernel_path", [](const json::Json& v, const std::string& p,
                       Microvm& c) { c.kernel_path = fields::absolute_path(v, p); }},
    {"initramfs_path", [](const json::Json& v, const std::string& p,
                          Microvm& c) { c.initramfs_path = fields::absolute_path(v, p); }},
    {"jail_path", [](const json::Json& v, const std::string& p,
                     Microvm& c) { c.jail_path = fields::absolute_path(v, p); }},
    {"memory_bytes", fields::read_memory_bytes<Microvm>},
    {"pids", fields::read_pids<Microvm>},
    {"cpu_millis", fields::read_cpu_millis<Microvm>},
    {"disk_bytes", fields::read_disk_bytes<Microvm>},
    {"qemu_overhead_bytes", [](const json::Json& v, const std::string& p,
                               Microvm& c) { c.qemu_overhead_bytes = fields::count(v, p); }},
    {"jail_uid",
     [](const json::Json& v, const std::string& p, Microvm& c) {
       const std::uint64_t uid = fields::count(v, p);
       if (uid == 0 || uid >= 0xffffffffu) {
         throw InvalidArgument(p + ": must be a non-root uid (1 … 4294967294)", p);
       }
       c.jail_uid = static_cast<std::uint32_t>(uid);
     }},
    {"snapshots",
     [](const json::Json& v, const std::string& p, Microvm& c) { c.snapshots = fields::flag(v, p); }},
    {"reserve_disk", [](const json::Json& v, const std::string& p,
                        Microvm& c) { c.reserve_disk = fields::flag(v, p); }},
    {"output_ceiling_bytes", fields::read_output_ceiling<Microvm>},
    {"max_concurrent_commands", fields::read_max_concurrent_commands<Microvm>},
    {"limits", fields::read_limits<Microvm>},
    {"boot_timeout_ms", [](const json::Json& v, const std::string& p,
                           Microvm& c) { c.boot_timeout = positive_ms(v, p); }},
    {"kvm_probe_timeout_ms", [](const json::Json& v, const std::string& p,
                                Microvm& c) { c.kvm_probe_timeout = positive_ms(v, p); }},
    {"egress_ports", fields::read_egress_ports<Microvm>},
    {"egress_allow_nonglobal_for_tests", fields::read_egress_nonglobal<Microvm>},
};

}  // namespace

MicrovmBackendConfig parse_microvm_backend_config(const json::Json& config,
                                                  std::string_view where) {
  return fields::parse_fields(config, where, kMicrovmFields);
}

namespace {

const bool kRegistered = register_backend_factory(
    "microvm",
    "QEMU microvm machines booting Debian's cloud kernel with airlock's agent, QEMU jailed; "
    "microvm under KVM, hardened_container under TCG",
    [](const json::Json& config, std::string_view where) {
      return make_microvm_backend(parse_microvm_backend_config(config, where));
    });

}  // namespace
}  // namespace airlock
