// Every refusal and failure airlock reports, as one typed hierarchy.
//
// The catch relationships carry behaviour, exactly as the seeds' exception bases do:
//
//   Error
//   ├── InvalidArgument                  bad input (the seeds' ValueError)
//   │   ├── ConfinementError             a path escapes or passes through a link — never a not-found
//   │   ├── HostToolNotDeclared
//   │   └── HostToolIdentityNotAllowed
//   ├── SystemError                      an operation failed in the OS or guest (OSError); errno + path
//   │   ├── NotFound
//   │   ├── NotADirectory                a non-directory where a directory was expected (not a link)
//   │   ├── IsADirectory
//   │   └── Timeout                      the caller's deadline expired (TimeoutError)
//   │       ├── QueuedTimeout            …while the call was still queued: nothing ran, retry unchanged
//   │       └── ProgramTimeout           a host-tool run's own bound; carries the signal outcome
//   ├── RouterRefusal                    the router refused before anything ran; names the check
//   │   ├── BackendNotPermitted          below the floor, or a rung not on the ladder
//   │   ├── CapabilityNotSupported
//   │   ├── OsFamilyNotSupported
//   │   ├── CapabilityDenied             host posture: a hard stop
//   │   ├── IdentityDenied
//   │   ├── EgressNotEnforced
//   │   └── TransferLimitsNotPermitted
//   ├── NoSandboxBackend
//   ├── OutputError                      declared outputs and sinks
//   │   ├── OutputMissing, OutputNotConfined, OutputNotRegular, OutputSizeUnknown,
//   │   ├── OutputUnreachable, TransferCapExceeded, LandingNotConfined,
//   │   └── OutputSinkRequired, ArtifactNameInvalid, ArtifactNameCollision
//   ├── ExecOutputLimitExceeded          a bounded exec's output passed its ceiling; output dropped
//   ├── FileRefused                      a shell road classified a refusal (not found, is a dir, …)
//   ├── ShellTransferFailed              a shell road's command ended and said something else
//   ├── ShellTransferUnfinished          a shell road's command end is unknown: condemn the sandbox
//   ├── NotSupported                     the backend does not implement this (NotImplementedError)
//   ├── BackendError                     the provider failed for a reason of its own
//   │   └── BackendNotInstalled          its provider program is not on this host (ImportError)
//   └── ConformanceFailure               a conformance suite found failed probes
//
// Every message names what was refused and, for checks, which check refused it. Messages built
// here never carry provider detail (engine endpoints, host paths): a `BackendError`'s `detail()`
// holds that for logs, and its `what()` stays model-safe.
#pragma once

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "airlock/vocabulary.hpp"

namespace airlock {

class Error : public std::exception {
 public:
  // `type` is the stable name of the refusal on every wire (JSON "type", the Python class):
  // the seeds' spelling, e.g. "SandboxEgressNotEnforced".
  Error(std::string type, std::string message, std::string check = {});

  const char* what() const noexcept override { return message_.c_str(); }
  const std::string& message() const noexcept { return message_; }
  const std::string& type() const noexcept { return type_; }
  // Which check refused, e.g. "egress", "isolation-floor", "files_out.max_files"; may be empty.
  const std::string& check() const noexcept { return check_; }

 private:
  std::string type_;
  std::string message_;
  std::string check_;
};

// ---- bad input -----------------------------------------------------------------------------

class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(std::string message, std::string check = {})
      : Error("InvalidArgument", std::move(message), std::move(check)) {}

 protected:
  InvalidArgument(std::string type, std::string message, std::string check)
      : Error(std::move(type), std::move(message), std::move(check)) {}
};

// A guest path that resolves outside its working directory, passes through a link, lands on a
// link where a write was asked, or names the working directory itself where that is refused.
class ConfinementError : public InvalidArgument {
 public:
  explicit ConfinementError(std::string message, std::string check = "confinement")
      : InvalidArgument("ConfinementError", std::move(message), std::move(check)) {}
};

class HostToolNotDeclared : public InvalidArgument {
 public:
  explicit HostToolNotDeclared(std::string message)
      : InvalidArgument("HostToolNotDeclared", std::move(message), "require_declared") {}
};

class HostToolIdentityNotAllowed : public InvalidArgument {
 public:
  explicit HostToolIdentityNotAllowed(std::string message)
      : InvalidArgument("HostToolIdentityNotAllowed", std::move(message), "allowed_identities") {}
};

// ---- operating-system and guest failures ---------------------------------------------------

class SystemError : public Error {
 public:
  // `error_number` is the errno when one exists (0 otherwise); `path` is a *guest* path or empty.
  SystemError(std::string message, int error_number = 0, std::string path = {})
      : SystemError("SystemError", std::move(message), error_number, std::move(path)) {}

  int error_number() const noexcept { return error_number_; }
  const std::string& path() const noexcept { return path_; }

 protected:
  SystemError(std::string type, std::string message, int error_number, std::string path)
      : Error(std::move(type), std::move(message)),
        error_number_(error_number),
        path_(std::move(path)) {}

 private:
  int error_number_;
  std::string path_;
};

class NotFound : public SystemError {
 public:
  NotFound(std::string message, std::string path = {})
      : SystemError("NotFound", std::move(message), 2 /*ENOENT*/, std::move(path)) {}
};

class NotADirectory : public SystemError {
 public:
  NotADirectory(std::string message, std::string path = {})
      : SystemError("NotADirectory", std::move(message), 20 /*ENOTDIR*/, std::move(path)) {}
};

class IsADirectory : public SystemError {
 public:
  IsADirectory(std::string message, std::string path = {})
      : SystemError("IsADirectory", std::move(message), 21 /*EISDIR*/, std::move(path)) {}
};

// The caller's deadline expired — and nothing else. A backend with a shorter ceiling of its own
// raises something else. `kill_confirmed` says whether the command's whole process group was
// confirmed gone (nullopt: the backend cannot tell). Partial output is carried when known.
class Timeout : public SystemError {
 public:
  explicit Timeout(std::string message, std::optional<bool> kill_confirmed = std::nullopt,
                   std::string partial_stdout = {}, std::string partial_stderr = {})
      : Timeout("Timeout", std::move(message), kill_confirmed, std::move(partial_stdout),
                std::move(partial_stderr)) {}

  std::optional<bool> kill_confirmed() const noexcept { return kill_confirmed_; }
  const std::string& partial_stdout() const noexcept { return partial_stdout_; }
  const std::string& partial_stderr() const noexcept { return partial_stderr_; }

 protected:
  Timeout(std::string type, std::string message, std::optional<bool> kill_confirmed,
          std::string partial_stdout, std::string partial_stderr)
      : SystemError(std::move(type), std::move(message), 110 /*ETIMEDOUT*/, {}),
        kill_confirmed_(kill_confirmed),
        partial_stdout_(std::move(partial_stdout)),
        partial_stderr_(std::move(partial_stderr)) {}

 private:
  std::optional<bool> kill_confirmed_;
  std::string partial_stdout_;
  std::string partial_stderr_;
};

// The deadline passed while the call waited for its turn: the program never started.
class QueuedTimeout : public Timeout {
 public:
  explicit QueuedTimeout(std::string message)
      : Timeout("SandboxQueuedTimeout", std::move(message), std::nullopt, {}, {}) {}
};

// A host-tool run's own bound expired. `output` is the program's output so far (≤ 2000 chars).
// Branch on `signal()`, not on the message: only `absent` says nothing was started, and none of
// the others confirms the program stopped.
class ProgramTimeout : public Timeout {
 public:
  ProgramTimeout(std::string message, std::string output = {},
                 SignalOutcome signal = SignalOutcome::unknown,
                 SignalReach reach = SignalReach::nothing)
      : Timeout("SandboxProgramTimeout", std::move(message), std::nullopt, {}, {}),
        output_(std::move(output)),
        signal_(signal),
        reach_(reach) {}

  const std::string& output() const noexcept { return output_; }
  SignalOutcome signal() const noexcept { return signal_; }
  SignalReach reach() const noexcept { return reach_; }

 private:
  std::string output_;
  SignalOutcome signal_;
  SignalReach reach_;
};

// ---- the router's refusals -----------------------------------------------------------------

class RouterRefusal : public Error {
 protected:
  RouterRefusal(std::string type, std::string message, std::string check)
      : Error(std::move(type), std::move(message), std::move(check)) {}
};

#define AIRLOCK_ROUTER_REFUSAL(Name, TypeString)                                   \
  class Name : public RouterRefusal {                                              \
   public:                                                                         \
    Name(std::string message, std::string check)                                   \
        : RouterRefusal(TypeString, std::move(message), std::move(check)) {}       \
  }

AIRLOCK_ROUTER_REFUSAL(BackendNotPermitted, "SandboxBackendNotPermitted");
AIRLOCK_ROUTER_REFUSAL(CapabilityNotSupported, "SandboxCapabilityNotSupported");
AIRLOCK_ROUTER_REFUSAL(OsFamilyNotSupported, "SandboxOsFamilyNotSupported");
AIRLOCK_ROUTER_REFUSAL(CapabilityDenied, "SandboxCapabilityDenied");
AIRLOCK_ROUTER_REFUSAL(IdentityDenied, "SandboxIdentityDenied");
AIRLOCK_ROUTER_REFUSAL(EgressNotEnforced, "SandboxEgressNotEnforced");
AIRLOCK_ROUTER_REFUSAL(TransferLimitsNotPermitted, "SandboxTransferLimitsNotPermitted");
#undef AIRLOCK_ROUTER_REFUSAL

class NoSandboxBackend : public Error {
 public:
  explicit NoSandboxBackend(std::string message)
      : Error("NoSandboxBackend", std::move(message), "backend-selection") {}
};

// ---- declared outputs and sinks ------------------------------------------------------------

class OutputError : public Error {
 protected:
  OutputError(std::string type, std::string message, std::string check = {})
      : Error(std::move(type), std::move(message), std::move(check)) {}
};

#define AIRLOCK_OUTPUT_ERROR(Name, TypeString)                        \
  class Name : public OutputError {                                   \
   public:                                                            \
    explicit Name(std::string message, std::string check = {})        \
        : OutputError(TypeString, std::move(message), std::move(check)) {} \
  }

AIRLOCK_OUTPUT_ERROR(OutputMissing, "SandboxOutputMissing");
AIRLOCK_OUTPUT_ERROR(OutputNotConfined, "SandboxOutputNotConfined");
AIRLOCK_OUTPUT_ERROR(OutputNotRegular, "SandboxOutputNotRegular");
AIRLOCK_OUTPUT_ERROR(OutputSizeUnknown, "SandboxOutputSizeUnknown");
AIRLOCK_OUTPUT_ERROR(OutputUnreachable, "SandboxOutputUnreachable");
AIRLOCK_OUTPUT_ERROR(LandingNotConfined, "SandboxLandingNotConfined");
AIRLOCK_OUTPUT_ERROR(OutputSinkRequired, "SandboxOutputSinkRequired");
AIRLOCK_OUTPUT_ERROR(ArtifactNameInvalid, "SandboxArtifactNameInvalid");
AIRLOCK_OUTPUT_ERROR(ArtifactNameCollision, "SandboxArtifactNameCollision");
#undef AIRLOCK_OUTPUT_ERROR

// A transfer cap was breached. Names the cap ("files_out.max_bytes_per_file"), the file (a
// guest path or artifact name), the limit, and the size that breached it when known.
class TransferCapExceeded : public OutputError {
 public:
  TransferCapExceeded(std::string cap, std::string file, std::uint64_t limit,
                      std::optional<std::uint64_t> size = std::nullopt);

  const std::string& cap() const noexcept { return cap_; }
  const std::string& file() const noexcept { return file_; }
  std::uint64_t limit() const noexcept { return limit_; }
  std::optional<std::uint64_t> size() const noexcept { return size_; }

 private:
  std::string cap_;
  std::string file_;
  std::uint64_t limit_;
  std::optional<std::uint64_t> size_;
};

// ---- exec ----------------------------------------------------------------------------------

// A bounded exec's output passed `max_output_bytes`. The command's process group was killed and
// none of its output is returned: a partial result is never mistaken for a shorter one.
class ExecOutputLimitExceeded : public Error {
 public:
  ExecOutputLimitExceeded(std::uint64_t limit, std::optional<bool> kill_confirmed);
  std::uint64_t limit() const noexcept { return limit_; }
  std::optional<bool> kill_confirmed() const noexcept { return kill_confirmed_; }

 private:
  std::uint64_t limit_;
  std::optional<bool> kill_confirmed_;
};

// ---- shell roads ---------------------------------------------------------------------------

// How a file road classified a refusal; maps one-to-one onto deepagents' error codes.
enum class FileRefusal : std::uint8_t { not_found, is_directory, permission_denied, invalid_path };
std::string_view to_string(FileRefusal refusal) noexcept;

class FileRefused : public Error {
 public:
  FileRefused(FileRefusal refusal, std::string path, std::string detail);
  FileRefusal refusal() const noexcept { return refusal_; }
  const std::string& path() const noexcept { return path_; }
  const std::string& detail() const noexcept { return detail_; }

 private:
  FileRefusal refusal_;
  std::string path_;
  std::string detail_;
};

class ShellTransferFailed : public Error {
 public:
  explicit ShellTransferFailed(std::string message)
      : Error("SandboxShellTransferFailed", std::move(message)) {}
};

// The command's end is unknown (a timeout, an overflow, a cancellation, a lost result): the
// caller condemns the sandbox. `over_cap` is set when the transfer's own byte budget ended it.
class ShellTransferUnfinished : public Error {
 public:
  ShellTransferUnfinished(std::string message, bool over_cap = false)
      : Error("SandboxShellTransferUnfinished", std::move(message)), over_cap_(over_cap) {}
  bool over_cap() const noexcept { return over_cap_; }

 private:
  bool over_cap_;
};

// ---- backends ------------------------------------------------------------------------------

class NotSupported : public Error {
 public:
  explicit NotSupported(std::string message) : Error("NotSupported", std::move(message)) {}
};

// The provider failed for a reason of its own. `what()` is safe to show a model; `detail()`
// carries the provider's words (status, body, host paths) for logs only. When the failure was a
// system call's, `code()` is its errno (std::generic_category()) — branch on that, never on the
// detail's text; otherwise it is empty (`!code()`). When the provider answered over HTTP,
// `response()` holds its status and body — for logs only too (`error_detail` prints them).
class BackendError : public Error {
 public:
  struct ProviderResponse {
    long status = 0;
    std::string body;
  };

  BackendError(std::string message, std::string detail = {}, std::error_code code = {})
      : BackendError("BackendError", std::move(message), std::move(detail), code) {}
  // A failed system call: `cause.what()` ("pipe2: Too many open files", naming the call and the
  // path it was given) becomes the detail and `cause.code()` the code.
  BackendError(std::string message, const std::system_error& cause)
      : BackendError(std::move(message), cause.what(), cause.code()) {}
  // The provider's HTTP answer refused the request.
  BackendError(std::string message, std::string detail, ProviderResponse response)
      : BackendError(std::move(message), std::move(detail)) {
    response_ = std::move(response);
  }
  const std::string& detail() const noexcept { return detail_; }
  const std::error_code& code() const noexcept { return code_; }
  const std::optional<ProviderResponse>& response() const noexcept { return response_; }

 protected:
  BackendError(std::string type, std::string message, std::string detail, std::error_code code)
      : Error(std::move(type), std::move(message)), detail_(std::move(detail)), code_(code) {}

 private:
  std::string detail_;
  std::error_code code_;
  std::optional<ProviderResponse> response_;
};

// The backend's provider is not installed on this host: the program it drives (the container
// engine at its configured endpoint, runsc) is not there. The reference reads this as its
// ImportError: a tool binding answers the model "the sandbox backend is not installed".
class BackendNotInstalled : public BackendError {
 public:
  explicit BackendNotInstalled(std::string message, std::string detail = {})
      : BackendError("SandboxBackendNotInstalled", std::move(message), std::move(detail), {}) {}
};

// A warm sandbox exists for this conversation and kind under another egress policy. Its policy
// is fixed for its life (the service applies it at creation), so it is refused rather than
// reused; dispose that kind successfully (after the calls using it end) or use another key.
class EgressPolicyConflict : public BackendError {
 public:
  explicit EgressPolicyConflict(std::string message, std::string detail = {})
      : BackendError("SandboxEgressPolicyConflict", std::move(message), std::move(detail), {}) {}
};

// The sandbox behind this handle was disposed by its backend because a command's end could not
// be established (a timeout, a cancellation, an incomplete capture): whatever the command would
// have done, it cannot do it in a sandbox that no longer exists. Every file the conversation
// wrote there is gone with it. Acquire again for a fresh sandbox.
class SandboxInvalidated : public BackendError {
 public:
  explicit SandboxInvalidated(std::string message, std::string detail = {})
      : BackendError("SandboxInvalidated", std::move(message), std::move(detail), {}) {}
};

// ---- conformance ---------------------------------------------------------------------------

// The message says how many of how many probes failed, then each failed probe with what it
// proves and what happened instead: "2 of 20 conformance probes failed: …".
class ConformanceFailure : public Error {
 public:
  struct Failed {
    std::string probe;
    std::string why;      // what the probe proves
    std::string failure;  // what happened instead
  };
  // `total`: how many probes the run had (skips included); unset, the failures are the run.
  explicit ConformanceFailure(std::vector<Failed> failures,
                              std::optional<std::size_t> total = std::nullopt);
  const std::vector<Failed>& failures() const noexcept { return failures_; }
  std::size_t total() const noexcept { return total_; }

 private:
  std::vector<Failed> failures_;
  std::size_t total_;
};

// For logs only, never a model: "<Type>: <message>", then " | <detail>" when a BackendError
// carries one, " | status=<status>" and " | body=<the first 600 characters>" when the provider
// answered over HTTP. Never throws (on an allocation failure it returns what it has, or "").
std::string error_detail(const std::exception& error) noexcept;

}  // namespace airlock
