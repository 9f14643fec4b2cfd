// The Engine API over libcurl: where the engine is, which API version we speak, and plain
// request/response calls with bounded bodies. Streaming calls live in engine_streams.hpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "airlock/errors.hpp"

using CURL = void;

namespace airlock::docker {

using Clock = std::chrono::steady_clock;

// Where the engine listens. "unix:///run/docker.sock" or "tcp://host:port" (https when `tls`).
struct EngineEndpoint {
  bool unix_socket = true;
  std::string socket_path;  // unix
  std::string authority;    // tcp: "host:port"
  bool tls = false;

  // The URL prefix requests are made against ("http://docker" over a unix socket).
  std::string base_url() const;
  // For logs and error details: the host as configured.
  std::string display() const;
};

// Refuses (InvalidArgument, naming `what`) anything but unix://ABSOLUTE and tcp://HOST:PORT.
EngineEndpoint parse_engine_host(std::string_view host, bool tls, std::string_view what);

// "1.41" → {1, 41}; nullopt when not of that shape.
std::optional<std::pair<int, int>> parse_api_version(std::string_view text);

// min(engine, ours), refusing an engine below kMinimumApiVersion or whose own minimum is above
// the version we would speak. Throws BackendError naming both versions.
std::string negotiate_api_version(std::string_view engine_version, std::string_view engine_minimum,
                                  std::string_view our_maximum);

struct TlsSettings {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  bool verify = true;
};

struct EngineResponse {
  long status = 0;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased

  std::optional<std::string> header(std::string_view lower_name) const;
  // The engine's own words: the "message" of a JSON error body, else the body (bounded).
  std::string engine_message() const;
};

struct CallOptions {
  std::string_view body;
  std::string_view content_type = "application/json";
  std::optional<std::chrono::milliseconds> timeout;  // default: the client's request timeout
  std::uint64_t max_body_bytes = 16u << 20;          // past it the call fails; never truncated
  bool head = false;                                 // HEAD: no body is read
  // POST/PUT: the body is read from this descriptor (from its current offset, `body_fd_bytes`
  // of it) instead of `body`, so a large upload is never held in memory.
  int body_fd = -1;
  std::uint64_t body_fd_bytes = 0;
};

class EngineClient {
 public:
  EngineClient(EngineEndpoint endpoint, TlsSettings tls, std::string api_version_max,
               std::chrono::milliseconds request_timeout);
  ~EngineClient();
  EngineClient(const EngineClient&) = delete;
  EngineClient& operator=(const EngineClient&) = delete;

  // A call against the negotiated version ("/containers/json" → "/v1.41/containers/json").
  // Transport failures raise BackendError; any HTTP status is returned to the caller.
  EngineResponse call(std::string_view method, std::string_view path,
                      const CallOptions& options = {});
  // The same without the version prefix (for /version and /_ping).
  EngineResponse call_unversioned(std::string_view method, std::string_view path,
                                  const CallOptions& options = {});

  // Negotiates once (GET /version), then returns the cached version.
  std::string api_version();
  // "/v1.41" + path.
  std::string versioned(std::string_view path);

  const EngineEndpoint& endpoint() const noexcept { return endpoint_; }
  std::chrono::milliseconds request_timeout() const noexcept { return request_timeout_; }

  // Set up `handle` for one request to `path` (already versioned): transport, TLS, no signals.
  void configure(CURL* handle, std::string_view path,
                 std::optional<std::chrono::milliseconds> timeout) const;

  // The BackendError every failed call raises: a model-safe `message`, and a detail naming the
  // request, the status and the engine's words.
  [[noreturn]] static void fail(std::string message, std::string_view method, std::string_view path,
                                const EngineResponse& response);

 private:
  EngineResponse perform(std::string_view method, const std::string& path,
                         const CallOptions& options);
  CURL* take_handle();
  void return_handle(CURL* handle);

  EngineEndpoint endpoint_;
  TlsSettings tls_;
  std::string api_version_max_;
  std::chrono::milliseconds request_timeout_;

  std::mutex mutex_;
  std::vector<CURL*> idle_;  // easy handles keep their connection between calls
  std::optional<std::string> api_version_;
};

// Percent-encode a query value.
std::string url_encode(std::string_view value);

}  // namespace airlock::docker
