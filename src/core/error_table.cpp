#include "airlock/error_table.hpp"

#include <array>

namespace airlock {
namespace {

constexpr int kExitTimeout = 124;  // the CLI's, as timeout(1) and container tools answer
constexpr int kExitRefused = 125;  // airlock could not run it

template <typename T>
bool is_a(const std::exception& error) noexcept {
  return dynamic_cast<const T*>(&error) != nullptr;
}

// A kind of ours: its class tells it apart, and it has an example when it can be raised.
template <typename T>
constexpr ErrorKind kind(std::string_view type, std::string_view cpp_class,
                         std::string_view parent, int status, std::string_view python_class,
                         void (*raise_example)(const std::string&), int exit_code = kExitRefused) {
  return ErrorKind{type,        cpp_class,          parent,   status, exit_code,
                   python_class, raise_example != nullptr, &is_a<T>, raise_example};
}

// One of the daemon's own HTTP refusals: one class, told apart by its type.
constexpr ErrorKind http(std::string_view type, std::string_view parent, int status) {
  return ErrorKind{type, "airlock::daemon::HttpError", parent, status, kExitRefused, {}, true,
                   nullptr, nullptr};
}

// The examples carry fixed field values, so that a test on any frontend can check that every
// typed field crossed over.
[[noreturn]] void raise_error(const std::string& m) { throw Error("Error", m); }
[[noreturn]] void raise_invalid(const std::string& m) { throw InvalidArgument(m, "test"); }
[[noreturn]] void raise_confinement(const std::string& m) { throw ConfinementError(m); }
[[noreturn]] void raise_not_declared(const std::string& m) { throw HostToolNotDeclared(m); }
[[noreturn]] void raise_identity(const std::string& m) { throw HostToolIdentityNotAllowed(m); }
[[noreturn]] void raise_system(const std::string& m) { throw SystemError(m, 5, "/guest/path"); }
[[noreturn]] void raise_not_found(const std::string& m) { throw NotFound(m, "/guest/missing"); }
[[noreturn]] void raise_not_dir(const std::string& m) { throw NotADirectory(m, "/guest/file"); }
[[noreturn]] void raise_is_dir(const std::string& m) { throw IsADirectory(m, "/guest/dir"); }
[[noreturn]] void raise_timeout(const std::string& m) {
  throw Timeout(m, true, "partial out", "partial err");
}
[[noreturn]] void raise_queued(const std::string& m) { throw QueuedTimeout(m); }
[[noreturn]] void raise_program_timeout(const std::string& m) {
  throw ProgramTimeout(m, "so far", SignalOutcome::sent, SignalReach::group);
}
[[noreturn]] void raise_not_permitted(const std::string& m) {
  throw BackendNotPermitted(m, "isolation-floor");
}
[[noreturn]] void raise_capability(const std::string& m) {
  throw CapabilityNotSupported(m, "capabilities");
}
[[noreturn]] void raise_os_family(const std::string& m) {
  throw OsFamilyNotSupported(m, "os-family");
}
[[noreturn]] void raise_denied(const std::string& m) {
  throw CapabilityDenied(m, "denied-capabilities");
}
[[noreturn]] void raise_identity_denied(const std::string& m) {
  throw IdentityDenied(m, "denied-identities");
}
[[noreturn]] void raise_egress(const std::string& m) { throw EgressNotEnforced(m, "egress"); }
[[noreturn]] void raise_limits(const std::string& m) {
  throw TransferLimitsNotPermitted(m, "transfer-limits");
}
[[noreturn]] void raise_no_backend(const std::string& m) { throw NoSandboxBackend(m); }
[[noreturn]] void raise_missing(const std::string& m) { throw OutputMissing(m); }
[[noreturn]] void raise_not_confined(const std::string& m) { throw OutputNotConfined(m); }
[[noreturn]] void raise_not_regular(const std::string& m) { throw OutputNotRegular(m); }
[[noreturn]] void raise_size_unknown(const std::string& m) { throw OutputSizeUnknown(m); }
[[noreturn]] void raise_unreachable(const std::string& m) { throw OutputUnreachable(m); }
[[noreturn]] void raise_landing(const std::string& m) { throw LandingNotConfined(m); }
[[noreturn]] void raise_sink_required(const std::string& m) { throw OutputSinkRequired(m); }
[[noreturn]] void raise_name_invalid(const std::string& m) {
  throw ArtifactNameInvalid(m, "length");
}
[[noreturn]] void raise_collision(const std::string& m) { throw ArtifactNameCollision(m); }
[[noreturn]] void raise_cap(const std::string& m) {
  throw TransferCapExceeded("files_out.max_bytes_per_file", m, 10, 11);
}
[[noreturn]] void raise_overflow(const std::string&) { throw ExecOutputLimitExceeded(64, true); }
[[noreturn]] void raise_refused(const std::string& m) {
  throw FileRefused(FileRefusal::not_found, "/guest/x", m);
}
[[noreturn]] void raise_transfer_failed(const std::string& m) { throw ShellTransferFailed(m); }
[[noreturn]] void raise_unfinished(const std::string& m) { throw ShellTransferUnfinished(m, true); }
[[noreturn]] void raise_not_supported(const std::string& m) { throw NotSupported(m); }
[[noreturn]] void raise_backend(const std::string& m) { throw BackendError(m, "provider detail"); }
[[noreturn]] void raise_not_installed(const std::string& m) {
  throw BackendNotInstalled(m, "provider detail");
}
[[noreturn]] void raise_policy_conflict(const std::string& m) {
  throw EgressPolicyConflict(m, "provider detail");
}
[[noreturn]] void raise_invalidated(const std::string& m) {
  throw SandboxInvalidated(m, "provider detail");
}
[[noreturn]] void raise_conformance(const std::string& m) {
  throw ConformanceFailure({{"a-probe", "what it proves", m}});
}

// Bases first: error_kind_of relies on a kind's depth growing down the table.
constexpr std::array kKinds = {
    kind<Error>("Error", "airlock::Error", "", 500, "AirlockError", raise_error),
    // bad input
    kind<InvalidArgument>("InvalidArgument", "airlock::InvalidArgument", "Error", 400,
                          "InvalidArgument", raise_invalid),
    kind<ConfinementError>("ConfinementError", "airlock::ConfinementError", "InvalidArgument",
                           400, "ConfinementError", raise_confinement),
    kind<HostToolNotDeclared>("HostToolNotDeclared", "airlock::HostToolNotDeclared",
                              "InvalidArgument", 400, "HostToolNotDeclared", raise_not_declared),
    kind<HostToolIdentityNotAllowed>("HostToolIdentityNotAllowed",
                                     "airlock::HostToolIdentityNotAllowed", "InvalidArgument",
                                     400, "HostToolIdentityNotAllowed", raise_identity),
    // the operating system and the guest
    kind<SystemError>("SystemError", "airlock::SystemError", "Error", 500, "SandboxSystemError",
                      raise_system),
    kind<NotFound>("NotFound", "airlock::NotFound", "SystemError", 404, "NotFound",
                   raise_not_found),
    kind<NotADirectory>("NotADirectory", "airlock::NotADirectory", "SystemError", 409,
                        "NotADirectory", raise_not_dir),
    kind<IsADirectory>("IsADirectory", "airlock::IsADirectory", "SystemError", 409,
                       "IsADirectory", raise_is_dir),
    kind<Timeout>("Timeout", "airlock::Timeout", "SystemError", 504, "SandboxTimeout",
                  raise_timeout, kExitTimeout),
    kind<QueuedTimeout>("SandboxQueuedTimeout", "airlock::QueuedTimeout", "Timeout", 503,
                        "SandboxQueuedTimeout", raise_queued, kExitTimeout),
    kind<ProgramTimeout>("SandboxProgramTimeout", "airlock::ProgramTimeout", "Timeout", 504,
                         "SandboxProgramTimeout", raise_program_timeout, kExitTimeout),
    // the router
    kind<RouterRefusal>("RouterRefusal", "airlock::RouterRefusal", "Error", 403, "RouterRefusal",
                        nullptr),
    kind<BackendNotPermitted>("SandboxBackendNotPermitted", "airlock::BackendNotPermitted",
                              "RouterRefusal", 403, "SandboxBackendNotPermitted",
                              raise_not_permitted),
    kind<CapabilityNotSupported>("SandboxCapabilityNotSupported",
                                 "airlock::CapabilityNotSupported", "RouterRefusal", 403,
                                 "SandboxCapabilityNotSupported", raise_capability),
    kind<OsFamilyNotSupported>("SandboxOsFamilyNotSupported", "airlock::OsFamilyNotSupported",
                               "RouterRefusal", 403, "SandboxOsFamilyNotSupported",
                               raise_os_family),
    kind<CapabilityDenied>("SandboxCapabilityDenied", "airlock::CapabilityDenied",
                           "RouterRefusal", 403, "SandboxCapabilityDenied", raise_denied),
    kind<IdentityDenied>("SandboxIdentityDenied", "airlock::IdentityDenied", "RouterRefusal",
                         403, "SandboxIdentityDenied", raise_identity_denied),
    kind<EgressNotEnforced>("SandboxEgressNotEnforced", "airlock::EgressNotEnforced",
                            "RouterRefusal", 403, "SandboxEgressNotEnforced", raise_egress),
    kind<TransferLimitsNotPermitted>("SandboxTransferLimitsNotPermitted",
                                     "airlock::TransferLimitsNotPermitted", "RouterRefusal",
                                     403, "SandboxTransferLimitsNotPermitted", raise_limits),
    kind<NoSandboxBackend>("NoSandboxBackend", "airlock::NoSandboxBackend", "Error", 503,
                           "NoSandboxBackend", raise_no_backend),
    // declared outputs and sinks: the sandbox's state does not satisfy what was declared
    kind<OutputError>("SandboxOutputError", "airlock::OutputError", "Error", 422,
                      "SandboxOutputError", nullptr),
    kind<OutputMissing>("SandboxOutputMissing", "airlock::OutputMissing", "SandboxOutputError",
                        422, "SandboxOutputMissing", raise_missing),
    kind<OutputNotConfined>("SandboxOutputNotConfined", "airlock::OutputNotConfined",
                            "SandboxOutputError", 422, "SandboxOutputNotConfined",
                            raise_not_confined),
    kind<OutputNotRegular>("SandboxOutputNotRegular", "airlock::OutputNotRegular",
                           "SandboxOutputError", 422, "SandboxOutputNotRegular",
                           raise_not_regular),
    kind<OutputSizeUnknown>("SandboxOutputSizeUnknown", "airlock::OutputSizeUnknown",
                            "SandboxOutputError", 422, "SandboxOutputSizeUnknown",
                            raise_size_unknown),
    kind<OutputUnreachable>("SandboxOutputUnreachable", "airlock::OutputUnreachable",
                            "SandboxOutputError", 422, "SandboxOutputUnreachable",
                            raise_unreachable),
    kind<LandingNotConfined>("SandboxLandingNotConfined", "airlock::LandingNotConfined",
                             "SandboxOutputError", 422, "SandboxLandingNotConfined",
                             raise_landing),
    kind<OutputSinkRequired>("SandboxOutputSinkRequired", "airlock::OutputSinkRequired",
                             "SandboxOutputError", 422, "SandboxOutputSinkRequired",
                             raise_sink_required),
    kind<ArtifactNameInvalid>("SandboxArtifactNameInvalid", "airlock::ArtifactNameInvalid",
                              "SandboxOutputError", 422, "SandboxArtifactNameInvalid",
                              raise_name_invalid),
    kind<ArtifactNameCollision>("SandboxArtifactNameCollision", "airlock::ArtifactNameCollision",
                                "SandboxOutputError", 422, "SandboxArtifactNameCollision",
                                raise_collision),
    kind<TransferCapExceeded>("SandboxTransferCapExceeded", "airlock::TransferCapExceeded",
                              "SandboxOutputError", 413, "SandboxTransferCapExceeded",
                              raise_cap),
    // exec and shell roads
    kind<ExecOutputLimitExceeded>("SandboxExecOutputLimitExceeded",
                                  "airlock::ExecOutputLimitExceeded", "Error", 422,
                                  "SandboxExecOutputLimitExceeded", raise_overflow),
    kind<FileRefused>("SandboxFileRefused", "airlock::FileRefused", "Error", 400,
                      "SandboxFileRefused", raise_refused),
    kind<ShellTransferFailed>("SandboxShellTransferFailed", "airlock::ShellTransferFailed",
                              "Error", 502, "SandboxShellTransferFailed", raise_transfer_failed),
    kind<ShellTransferUnfinished>("SandboxShellTransferUnfinished",
                                  "airlock::ShellTransferUnfinished", "Error", 502,
                                  "SandboxShellTransferUnfinished", raise_unfinished),
    // backends and conformance
    kind<NotSupported>("NotSupported", "airlock::NotSupported", "Error", 501, "NotSupported",
                       raise_not_supported),
    kind<BackendError>("BackendError", "airlock::BackendError", "Error", 502, "BackendError",
                       raise_backend),
    kind<BackendNotInstalled>("SandboxBackendNotInstalled", "airlock::BackendNotInstalled",
                              "BackendError", 502, "SandboxBackendNotInstalled",
                              raise_not_installed),
    kind<EgressPolicyConflict>("SandboxEgressPolicyConflict", "airlock::EgressPolicyConflict",
                               "BackendError", 409, "SandboxEgressPolicyConflict",
                               raise_policy_conflict),
    kind<SandboxInvalidated>("SandboxInvalidated", "airlock::SandboxInvalidated", "BackendError",
                             410, "SandboxInvalidated", raise_invalidated),
    kind<ConformanceFailure>("ConformanceFailure", "airlock::ConformanceFailure", "Error", 500,
                             "ConformanceFailure", raise_conformance),
    // the daemon's own
    http("SandboxHandleNotFound", "InvalidArgument", 404),
    http("SandboxHandleConflict", "InvalidArgument", 409),
    http("Unauthorized", "InvalidArgument", 401),
    http("MethodNotAllowed", "InvalidArgument", 405),
    http("RequestBodyTooLarge", "InvalidArgument", 413),
    http("DaemonDraining", "Error", 503),
    // Anything that is not an airlock error, as the daemon answers it (details go to its log).
    ErrorKind{"InternalError", "std::exception", "Error", 500, kExitRefused, {}, true, nullptr,
              nullptr},
};

std::size_t depth(const ErrorKind& of) noexcept {
  std::size_t levels = 0;
  for (const ErrorKind* at = &of; at && !at->parent.empty(); ++levels) {
    at = find_error_kind(at->parent);
  }
  return levels;
}

}  // namespace

std::span<const ErrorKind> error_kinds() noexcept { return kKinds; }

const ErrorKind* find_error_kind(std::string_view type) noexcept {
  for (const auto& entry : kKinds) {
    if (entry.type == type) return &entry;
  }
  return nullptr;
}

const ErrorKind& error_kind_of(const Error& error) noexcept {
  if (const ErrorKind* named = find_error_kind(error.type())) return *named;
  const ErrorKind* best = &kKinds.front();
  std::size_t best_depth = 0;
  for (const auto& entry : kKinds) {
    if (!entry.is || !entry.is(error)) continue;
    const std::size_t levels = depth(entry);
    if (levels > best_depth) {
      best = &entry;
      best_depth = levels;
    }
  }
  return *best;
}

}  // namespace airlock
