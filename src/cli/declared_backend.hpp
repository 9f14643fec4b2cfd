// A backend's declarations as data, for `airlock check --declared FILE`: a dry run of the
// router's decision for a backend that is not here (one being written, one on another machine,
// a posture under review). It is a declaration, never a backend: it routes as one, but nothing
// stands behind it, so it never acquires.
//
//   {"name": "acme-microvm", "isolation": "microvm",
//    "egress_modes": ["closed", "allowlist"],
//    "capabilities": ["exec", "files_in", "files_out"],
//    "os_families": ["posix"],
//    "limits": {"files_in": {"max_bytes_per_file": 8388608, "max_total_bytes": 33554432,
//                            "max_files": 64}}}
//
// `name` and `isolation` are required. Every other field may be left out, and its silence reads
// as a backend's silence does (include/airlock/backend.hpp): capabilities charitable, egress
// refused, the default transfer limits, no guest shape. Unknown fields are refused.
//
// A declaration the router would refuse in a backend is refused by the router here too, by the
// same check: an isolation that is not a rung of the ladder is BackendNotPermitted (the router
// is built over it), limits that are not a SandboxLimits ({"files_in": …, "files_out": …}, each
// a TransferLimits) are TransferLimitsNotPermitted (when the spec is checked) — both naming the
// backend, and a warning says what was declared. Every other wrong shape is a parse error
// (InvalidArgument) naming the field.
//
// Nothing registers it as a backend type, so no router document (--config, the daemon's, the
// Python `SandboxRouter`'s) can name it; only `airlock check` builds one. And should a router
// ever be handed one, `acquire` refuses with NoSandboxBackend before anything is made.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "airlock/backend.hpp"
#include "airlock/json.hpp"

namespace airlock::cli {

class DeclaredBackend final : public SandboxBackend {
 public:
  // `source` names where the declarations came from, for messages (a file path).
  DeclaredBackend(const json::Json& declarations, std::string source);

  std::string name() const override { return name_; }
  Isolation isolation() const override { return isolation_; }
  std::optional<EgressSet> egress_modes() const override { return egress_modes_; }
  std::optional<CapabilitySet> capabilities() const override { return capabilities_; }
  // Throws TransferLimitsNotPermitted when the declared limits could not be read.
  std::optional<SandboxLimits> limits() const override;
  std::optional<OsFamilySet> os_families() const override { return os_families_; }
  const std::string& source() const { return source_; }

  // Always NoSandboxBackend: a declaration has no sandbox to give.
  std::shared_ptr<Sandbox> acquire(const SandboxKey& key, const SandboxSpec& spec) override;
  // Nothing was ever made, so there is nothing to dispose of.
  void dispose(const SandboxKey&) noexcept override {}
  bool dispose_kind(const SandboxKey&, std::string_view,
                    std::optional<std::string_view>) noexcept override {
    return true;
  }
  int dispose_scope(std::string_view, std::optional<std::string_view>) noexcept override {
    return 0;
  }

 private:
  std::string source_;
  std::string name_;
  Isolation isolation_ = Isolation::none;
  std::optional<EgressSet> egress_modes_;
  std::optional<CapabilitySet> capabilities_;
  std::optional<SandboxLimits> limits_;
  std::optional<std::string> unreadable_limits_;  // why the declared limits could not be read
  std::optional<OsFamilySet> os_families_;
};

// Reads a declaration file; errors name the file and the field.
std::shared_ptr<DeclaredBackend> load_declared_backend(const std::string& path);

}  // namespace airlock::cli
