// A small libmicrohttpd server for the double: one thread per connection (an exec that runs for
// half a minute must not hold up any other route), optional TLS, and three kinds of answer — a
// buffered body, a body streamed from a descriptor (so a FIFO read can hang the way the real
// service's does, until the client gives up), or a dropped connection.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/unique_fd.hpp"

struct MHD_Daemon;

namespace airlock::acas_double {

struct Request {
  std::string method;
  std::string path;                            // percent-decoded
  std::map<std::string, std::string> query;    // percent-decoded
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;

  std::optional<std::string> header(const std::string& lower_name) const;
  std::optional<std::string> query_value(const std::string& name) const;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // Close the connection without answering (a fault: the client sees a reset or an empty reply).
  bool drop = false;
  // Stream the body from this descriptor instead of `body` (size unknown: chunked).
  std::shared_ptr<base::UniqueFd> stream;
  std::optional<std::uint64_t> stream_size;
};

using Handler = std::function<Response(const Request&)>;

struct TlsFiles {
  std::string certificate_pem;
  std::string key_pem;
};

class HttpServer {
 public:
  // Listens on 127.0.0.1:`port` (0: an ephemeral port). Throws std::runtime_error on failure.
  HttpServer(Handler handler, std::uint16_t port, std::optional<TlsFiles> tls,
             std::uint64_t max_body_bytes);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  std::uint16_t port() const noexcept { return port_; }
  // Ends streams in flight and stops accepting; joins every connection thread.
  void stop();

  // For streamed bodies: set once the server stops, so a body waiting on a FIFO gives up.
  const std::atomic<bool>& stopping() const noexcept { return stopping_; }

  struct Impl;

 private:
  Handler handler_;
  std::uint64_t max_body_bytes_;
  std::optional<TlsFiles> tls_;
  MHD_Daemon* daemon_ = nullptr;
  std::uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
};

}  // namespace airlock::acas_double
