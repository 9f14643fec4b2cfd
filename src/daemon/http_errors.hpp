// How airlock's errors travel over HTTP: a status, and a JSON body
//
//   {"error": {"type": "SandboxEgressNotEnforced", "message": "…", "check": "egress", …}}
//
// built by json::error_to_json (never a BackendError's detail, which goes to the log).
//
// Status codes (docs/daemon.md has the table with reasons):
//   400 InvalidArgument (bad JSON, unknown field, bad path; `check` names the field),
//       ConfinementError, a link or non-regular entry refused by the file plane
//   400/403/404/409 FileRefused (a shell road's probe), by its refusal
//   401 missing or wrong bearer token (TCP only)
//   403 RouterRefusal (every check of the router), permission denied in the guest
//   404 unknown route, unknown sandbox handle, NotFound in the guest
//   405 the path exists under other methods (Allow header)
//   409 IsADirectory / NotADirectory in the guest; a handle that exists with a different spec
//   413 a request body over its cap; TransferCapExceeded (either direction)
//   422 ExecOutputLimitExceeded: the command ran and its output broke the ceiling asked for;
//       the outputs family (missing, not regular, unreachable, names invalid or colliding)
//   500 anything unexpected (generic message; detail logged)
//   501 NotSupported: the backend does not do this
//   502 BackendError: the provider failed (model-safe message; detail logged); a shell road's
//       command ended badly (ShellTransferFailed) or unknown (ShellTransferUnfinished, condemned)
//   503 QueuedTimeout (Retry-After: 1; nothing ran), NoSandboxBackend, the daemon draining
//   504 Timeout: the command's own deadline passed (the instance is condemned unless the
//       backend confirmed the kill; `sandbox_reset` says which)
//
// File routes add "refusal": one of file_not_found, is_directory, permission_denied, invalid_path —
// the classification a Deep Agents client turns into its per-file error codes.
#pragma once

#include <exception>
#include <optional>
#include <string>

#include "airlock/errors.hpp"
#include "daemon/http.hpp"

namespace airlock::daemon {

// An HTTP-level refusal that is not one of airlock's errors (unknown handle, 405, 409, 413 …).
// Its status is the error table's for `type` (airlock/error_table.hpp), so a new refusal is
// added there, where the tests that hold the table to the OpenAPI document see it.
class HttpError : public InvalidArgument {
 public:
  HttpError(std::string type, std::string message, std::string check = {});
  int status() const noexcept { return status_; }

 private:
  int status_;
};

int http_status_for(const std::exception& error) noexcept;

// How a file-plane error reads as a per-file refusal; nullopt when it is not a refusal of the
// path (a backend failure, a timeout, a cap).
std::optional<FileRefusal> file_refusal_of(const std::exception& error) noexcept;

// The full response for `error`. With `file_route`, adds "refusal" where one applies; `extra`
// (an object) is merged into the error object, e.g. {"condemned": true}.
HttpResponse error_response(const std::exception& error, bool file_route = false,
                            const json::Json& extra = json::Json::object());

}  // namespace airlock::daemon
