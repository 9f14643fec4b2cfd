// airlockd as an object: one router, its durable handle records, the /v1 API, and the HTTP
// server on a unix socket (and optionally TCP). `airlock serve`, the `airlockd` executable and
// the daemon's tests all build one of these.
//
// Lifecycle: construct (loads the handle records), `start()` (binds and serves), `shutdown()`
// (stop accepting — the unix socket disappears — let requests in flight finish within the
// grace, then cancel what is left: a cancelled exec condemns its instance unless its kill is
// confirmed; then stop). Sandboxes are *not* disposed on shutdown: they live in the backends'
// durable state and the handle records, and a restarted daemon answers the same handles.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "airlock/router.hpp"
#include "daemon/api.hpp"
#include "daemon/handle_store.hpp"
#include "daemon/http.hpp"
#include "daemon/http_server.hpp"
#include "daemon/metrics.hpp"

namespace airlock::daemon {

struct DaemonOptions {
  std::string socket_path = "/run/airlock/airlockd.sock";
  mode_t socket_mode = 0660;
  std::optional<gid_t> socket_group;
  std::string tcp;    // "HOST:PORT"; empty: no TCP listener
  std::string token;  // the bearer token TCP requests must carry
  // Serve TCP with no token at all. Only for a test rig on a machine nobody else uses.
  bool dangerously_allow_tcp_without_token = false;
  std::filesystem::path state_dir = "/var/lib/airlock/daemon";
  ServerLimits server;
  ApiLimits api;
  Milliseconds shutdown_grace{30'000};
  // Record every exchange to this file (exchange_log.hpp). Test rigs only; empty: off.
  std::string exchange_log;
};

class Daemon {
 public:
  Daemon(DaemonOptions options, std::unique_ptr<SandboxRouter> router);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Binds the listeners and starts serving. Throws InvalidArgument / SystemError.
  void start();

  // Graceful: see the header comment. Idempotent.
  void shutdown();
  // Cancel every request in flight now (a second signal during shutdown).
  void hurry();

  const std::string& socket_path() const noexcept { return options_.socket_path; }
  const std::string& tcp_address() const noexcept { return tcp_address_; }
  const RouteTable& routes() const noexcept { return routes_; }
  Metrics& metrics() noexcept { return metrics_; }
  HandleStore& handles() noexcept { return store_; }
  SandboxRouter& router() noexcept { return *router_; }
  std::size_t requests_in_flight() const;

 private:
  DaemonOptions options_;
  std::unique_ptr<SandboxRouter> router_;  // outlives the server: handlers call into it
  Metrics metrics_;
  HandleStore store_;
  Api api_;
  RouteTable routes_;
  std::unique_ptr<HttpServer> server_;
  bool unix_bound_ = false;
  dev_t socket_device_ = 0;
  ino_t socket_inode_ = 0;
  std::string tcp_address_;
  std::atomic<bool> stopped_{false};
};

}  // namespace airlock::daemon
