// The HTTP/1.1 server under airlockd: libmicrohttpd over listening sockets the daemon bound.
//
// Threading: one thread per connection (libmicrohttpd's thread-per-connection mode, with poll so
// descriptors above FD_SETSIZE work). A handler runs on its connection's thread and may block
// for as long as its command does; the connection limit bounds the threads. A thread pool would
// let a few long execs starve every other request, and suspend/resume would hide the socket
// from both the library and the handler, so a vanished client would go unnoticed.
//
// What keeps a hostile or broken client from taking the daemon down:
//   - a connection limit per listener, and a per-address limit on TCP;
//   - deadlines per phase, enforced by a reaper thread that shuts the socket down: the request
//     line and headers must arrive within `header_deadline` of the connection opening (or of
//     the previous response), the body within `body_deadline` of the headers — so a client
//     that dribbles one byte a second cannot hold a thread; plus the library's idle timeout;
//   - a body cap per route (JSON routes: `max_json_body_bytes`; raw uploads: the route's own
//     cap). A declared Content-Length over the cap is answered 413 before any of the body is
//     read; a chunked body that passes the cap gets the connection closed;
//   - header size bounded by the library's per-connection memory (32 KiB);
//   - a percent-encoded NUL anywhere in the URL is refused (400) rather than truncating a path;
//   - a client that hangs up while its handler runs has `HttpRequest::cancelled` requested.
//
// Authentication: requests over TCP must carry `Authorization: Bearer <token>`, compared in
// constant time; the unix socket relies on its file mode and owner. The server refuses to
// serve TCP without a token unless the caller passed `allow_tcp_without_token`.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon/disconnect_watch.hpp"
#include "daemon/exchange_log.hpp"
#include "daemon/http.hpp"
#include "daemon/metrics.hpp"

struct MHD_Daemon;
struct MHD_Connection;

namespace airlock::daemon {

struct ServerLimits {
  unsigned max_connections = 256;        // per listener
  unsigned max_connections_per_ip = 64;  // TCP listeners only
  unsigned idle_timeout_seconds = 60;    // no byte in either direction for this long
  std::uint64_t max_json_body_bytes = 1u << 20;
  std::chrono::milliseconds header_deadline{10'000};
  std::chrono::milliseconds body_deadline{120'000};
};

class HttpServer {
 public:
  // `bearer_token`: required on TCP listeners (compared in constant time). Empty: TCP listeners
  // are refused unless `allow_tcp_without_token` — a name that says what it does.
  HttpServer(const RouteTable& routes, Metrics& metrics, ServerLimits limits,
             std::string bearer_token = {}, bool allow_tcp_without_token = false);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Takes ownership of a bound, listening socket (even on failure) and serves it. Throws
  // InvalidArgument for TCP without a token, BackendError-free SystemError when the library
  // cannot start.
  void serve(int listen_fd, bool tcp);

  // Stop accepting: the listening sockets are closed, and requests arriving on connections
  // already open are answered 503 with `Connection: close`.
  void stop_accepting();
  bool accepting() const noexcept;

  // Wait until no request is in flight, or until `deadline`. True when idle.
  bool wait_idle(std::chrono::steady_clock::time_point deadline);
  // Request `cancelled` on every request in flight (the shutdown grace ran out).
  void cancel_in_flight();
  std::size_t in_flight() const;

  // Stop the library: every connection is closed. Idempotent; the destructor calls it.
  void stop();

  // Record every exchange from now on (a test rig's: see exchange_log.hpp). Call before serve.
  void record_exchanges(std::shared_ptr<ExchangeLog> log) { exchanges_ = std::move(log); }

 private:
  struct Listener;
  struct Connection;
  struct RequestState;
  friend struct Callbacks;
  friend struct RequestState;

  void reap(std::stop_token stop);
  bool authorized(MHD_Connection* connection) const;
  void request_started(RequestState* state);
  void request_finished(RequestState* state);

  const RouteTable& routes_;
  Metrics& metrics_;
  ServerLimits limits_;
  std::string token_digest_;  // SHA-256 of the token; empty when there is none
  bool allow_tcp_without_token_;

  std::vector<std::unique_ptr<Listener>> listeners_;
  bool accepting_ = true;

  mutable std::mutex mutex_;
  std::condition_variable idle_;
  std::map<Connection*, bool> connections_;  // value: already reaped
  std::map<RequestState*, bool> requests_;   // in flight
  DisconnectWatch watch_;
  std::shared_ptr<ExchangeLog> exchanges_;
  std::jthread reaper_;  // last
};

}  // namespace airlock::daemon
