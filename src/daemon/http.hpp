// The daemon's HTTP vocabulary: one request, one response, one route, and the table of routes.
//
// Handlers see a fully received request (body included, already held to its cap) and return a
// response; they never touch libmicrohttpd. A handler may throw: airlock's errors become JSON
// error bodies with the status `http_status_for` picks (see http_errors.hpp); anything else
// becomes a generic 500 whose detail goes to the log only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "airlock/json.hpp"

namespace airlock::daemon {

struct HttpRequest {
  std::string method;
  std::string path;                           // percent-decoded by the HTTP library
  std::map<std::string, std::string> query;   // each name at most once; values NUL-free
  std::map<std::string, std::string> params;  // the route's {placeholders}
  std::string body;
  // Requested when the client hangs up mid-request, or when the daemon's shutdown grace has run
  // out. A handler passes it to whatever waits (admission, exec) so that nothing outlives a
  // caller who has left.
  std::stop_token cancelled;
  bool over_tcp = false;

  // The query value of `name`, if present.
  std::optional<std::string_view> query_value(std::string_view name) const;
};

// Hands one piece of a streamed body to the connection. Never blocks: the pieces queue in
// memory until the client reads them, so a producer must bound what it writes (the exec stream
// is bounded by the command's output ceiling). Returns false once the client has gone; what is
// written after that is dropped.
using BodyWriter = std::function<bool(std::string_view piece)>;

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // A body produced while it is sent (chunked transfer encoding), instead of `body`. It runs on
  // a thread of its own once the status and headers are queued, and the body ends when it
  // returns. The request's `cancelled` stays live until then: a client that hangs up mid-stream
  // requests it, and so does the daemon's shutdown grace running out. It must not throw.
  std::function<void(const BodyWriter& write)> stream;

  static HttpResponse json(int status, const json::Json& body);
  static HttpResponse bytes(int status, std::string body);
  static HttpResponse streaming(int status, std::string content_type,
                                std::function<void(const BodyWriter& write)> produce);
};

enum class BodyKind : std::uint8_t {
  none,   // a body is refused (413 past zero bytes)
  json,   // held to the server's JSON cap, parsed by the handler
  bytes,  // raw bytes, held to the route's own cap
};

struct Route {
  std::string method;   // "GET", "POST", …
  std::string pattern;  // "/v1/sandboxes/{handle}/exec"; a placeholder matches one segment
  std::string summary;  // one line, for logs and the route listing
  BodyKind body = BodyKind::none;
  // For `bytes` bodies: the most this request may send, judged from its params and query before
  // any byte of the body is read. May throw (an unknown handle is a 404 before the upload).
  std::function<std::uint64_t(const HttpRequest&)> body_cap;
  // What a 413 names as the cap that refused the body, e.g. "spec.files_in.max_bytes_per_file".
  std::string body_cap_check = "body";
  std::function<HttpResponse(HttpRequest&)> handle;
};

class RouteTable {
 public:
  void add(Route route);

  struct Match {
    const Route* route = nullptr;  // null: no route for this method
    std::map<std::string, std::string> params;
    std::vector<std::string> allowed;  // methods the path has, when `route` is null
  };
  // The route for (method, path). `allowed` empty and `route` null: the path is unknown (404);
  // `allowed` non-empty: the path exists under other methods (405).
  Match match(std::string_view method, std::string_view path) const;

  const std::vector<Route>& routes() const noexcept { return routes_; }

 private:
  std::vector<Route> routes_;
};

}  // namespace airlock::daemon
