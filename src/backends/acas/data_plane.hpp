// The service's data plane as airlock speaks it: paths under one sandbox group, the api-version
// on every request, a bearer token from the operation's credential, and the retries of the
// service's own SDK — each bounded by the operation's deadline.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "airlock/backends/acas.hpp"
#include "backends/acas/http.hpp"

namespace airlock::acas {

using Clock = http::Clock;
using Query = std::vector<std::pair<std::string, std::string>>;

// What one operation carries through every request it makes.
struct Call {
  std::shared_ptr<TokenCredential> credential;
  Clock::time_point deadline;
  std::stop_token stop;
};

// The deadline fell while the client waited out a retry the service asked for. `status` is the
// answer that asked; for a 429 the request it answered did not run (the service refused it), so
// whatever it would have changed is unchanged.
class RetryWaitExpired : public http::DeadlineExceeded {
 public:
  RetryWaitExpired(const std::string& what, long status)
      : http::DeadlineExceeded(what), status_(status) {}
  long status() const noexcept { return status_; }

 private:
  long status_;
};

struct Body {
  std::string bytes;
  std::string content_type = "application/json";
};

class DataPlane {
 public:
  DataPlane(const AcasConfig& config, std::shared_ptr<http::Client> client);

  // "/subscriptions/…/resourceGroups/…/sandboxGroups/…" (segments checked at construction).
  const std::string& group_path() const noexcept { return group_path_; }
  // group_path() + "/sandboxes/" + id; refuses (BackendError) an id the service could not have
  // given: empty, or holding '/', '\', "..", NUL or anything outside [A-Za-z0-9._-].
  std::string sandbox_path(std::string_view id) const;

  // One request with the SDK's retries. Returns the final answer, whatever its status (the
  // caller decides what a 404 means). Throws http::TransportError (and its kinds) when no
  // answer came, RetryWaitExpired as above, BackendError when the credential fails.
  //
  // `forbidden_is_transient`: a 403 is retried as the SDK does, to ride out a role assignment
  // that has not reached the data plane yet. Requests inside a sandbox that answered before (its
  // commands, its file API) pass false: there a 403 is the guest's or the file API's refusal,
  // and waiting minutes for it to change only hides it.
  http::Response request(const Call& call, std::string_view method, std::string_view path,
                         const Query& query = {}, const std::optional<Body>& body = std::nullopt,
                         std::uint64_t max_response_bytes = 16ull << 20,
                         bool forbidden_is_transient = true) const;

  // request() that parses a JSON answer; any status outside 200..299 raises through fail().
  nlohmann::json json(const Call& call, std::string_view method, std::string_view path,
                      std::string_view doing, const Query& query = {},
                      const std::optional<nlohmann::json>& body = std::nullopt) const;

  // The BackendError for an answer that refused `doing` ("create a sandbox"): a model-safe
  // message (no endpoint, no ids), and for logs the method, the path and the service's answer.
  [[noreturn]] static void fail(std::string_view doing, std::string_view method,
                                std::string_view path, const http::Response& response);

  const AcasConfig& config() const noexcept { return config_; }

 private:
  const AcasConfig& config_;
  std::shared_ptr<http::Client> client_;
  std::string base_;        // endpoint, no trailing '/'
  std::string group_path_;
};

// The wait an answer asks for: Retry-After (seconds or an HTTP date), retry-after-ms,
// x-ms-retry-after-ms; nullopt when it names none.
std::optional<std::chrono::milliseconds> requested_retry_delay(const http::Response& response);

// The endpoint as the config may give it: https://HOST[:PORT], a trailing '/' dropped; anything
// else is an InvalidArgument naming `where`.
std::string checked_endpoint(std::string_view endpoint, std::string_view where);

}  // namespace airlock::acas
