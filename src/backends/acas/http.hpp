// One HTTP exchange over libcurl, and nothing more: no retries, no authentication, no API
// versions (the data-plane client and the credentials add those). Bodies are bounded and never
// truncated; every exchange has a deadline and can be cancelled.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace airlock::acas::http {

using Clock = std::chrono::steady_clock;
using Headers = std::vector<std::pair<std::string, std::string>>;

struct Request {
  std::string method = "GET";
  std::string url;  // absolute: https://host[:port]/path?query (http only where allowed)
  Headers headers;  // sent as given
  std::string body;
  // The whole exchange (connect, send, wait, receive) ends by this instant.
  Clock::time_point deadline = Clock::now() + std::chrono::seconds(60);
  // Past this many body bytes the exchange fails with BodyTooLarge; a body is never truncated.
  std::uint64_t max_response_bytes = 16ull << 20;
  // Requested: the exchange is abandoned (the connection closed) and Cancelled is thrown.
  std::stop_token stop;
};

struct Response {
  long status = 0;
  std::string body;
  Headers headers;  // names lower-cased, in arrival order (final response only)

  // The first value of a header, by lower-case name.
  std::optional<std::string> header(std::string_view lower_name) const;
};

// Why an exchange produced no response. Each carries a message safe for logs (it names the
// method and the URL's host and path, never a query value, header or body).
class TransportError : public std::runtime_error {  // connect, TLS, reset, malformed response
 public:
  using std::runtime_error::runtime_error;
};
class DeadlineExceeded : public TransportError {
 public:
  using TransportError::TransportError;
};
class Cancelled : public TransportError {
 public:
  using TransportError::TransportError;
};
class BodyTooLarge : public TransportError {
 public:
  using TransportError::TransportError;
};

struct ClientOptions {
  std::string ca_file;        // empty: the system's trust store
  bool allow_http = false;    // plain http:// URLs (IMDS and local identity endpoints only)
};

// Thread-safe; keeps idle connections for reuse between exchanges.
class Client {
 public:
  explicit Client(ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // One exchange. Any HTTP status is returned; only the failures above throw. A URL that is
  // not https (or http with allow_http) is refused with std::invalid_argument before any I/O.
  Response perform(const Request& request);

 private:
  struct Pool;
  std::unique_ptr<Pool> pool_;
  ClientOptions options_;
};

// Percent-encode one query value or path segment (RFC 3986 unreserved characters kept).
std::string url_encode(std::string_view value);
// "a=1&b=two%20words" from pairs, each value encoded.
std::string query_string(const std::vector<std::pair<std::string, std::string>>& pairs);

}  // namespace airlock::acas::http
