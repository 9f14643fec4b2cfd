#include "daemon/daemon.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include "airlock/errors.hpp"
#include "daemon/listeners.hpp"

namespace airlock::daemon {

Daemon::Daemon(DaemonOptions options, std::unique_ptr<SandboxRouter> router)
    : options_(std::move(options)),
      router_(std::move(router)),
      store_(options_.state_dir),
      api_(*router_, store_, metrics_, options_.api) {
  if (!router_) throw InvalidArgument("daemon: a router is required", "router");
  api_.add_routes(routes_);
}

Daemon::~Daemon() {
  shutdown();
}

void Daemon::start() {
  server_ = std::make_unique<HttpServer>(routes_, metrics_, options_.server, options_.token,
                                         options_.dangerously_allow_tcp_without_token);
  if (!options_.exchange_log.empty()) {
    server_->record_exchanges(std::make_shared<ExchangeLog>(options_.exchange_log));
  }
  if (!options_.tcp.empty() && options_.token.empty() &&
      !options_.dangerously_allow_tcp_without_token) {
    throw InvalidArgument(
        "--tcp needs --token-file: without a bearer token any process that can reach the port "
        "could drive sandboxes (--dangerously-allow-tcp-without-token exists for test rigs)",
        "tcp");
  }
  const int unix_fd =
      bind_unix_socket(options_.socket_path, options_.socket_mode, options_.socket_group);
  struct stat bound {};
  if (lstat(options_.socket_path.c_str(), &bound) == 0) {
    socket_device_ = bound.st_dev;
    socket_inode_ = bound.st_ino;
    unix_bound_ = true;
  }
  server_->serve(unix_fd, /*tcp=*/false);
  if (!options_.tcp.empty()) {
    TcpListener tcp = bind_tcp_socket(options_.tcp);
    tcp_address_ = tcp.address;
    server_->serve(tcp.fd, /*tcp=*/true);
    if (options_.token.empty()) {
      spdlog::warn(
          "serving TCP on {} WITHOUT a bearer token: any process that reaches the port "
          "drives sandboxes",
          tcp_address_);
    }
  }
  spdlog::info("airlockd: serving on unix:{}{}{}", options_.socket_path,
               tcp_address_.empty() ? "" : " tcp:", tcp_address_);
}

void Daemon::shutdown() {
  if (stopped_.exchange(true)) return;
  if (!server_) return;
  api_.set_draining();
  server_->stop_accepting();
  if (unix_bound_) unlink_unix_socket(options_.socket_path, socket_device_, socket_inode_);
  const auto deadline = std::chrono::steady_clock::now() + options_.shutdown_grace;
  if (!server_->wait_idle(deadline)) {
    spdlog::warn("shutdown: {} request(s) still in flight after the grace; cancelling them",
                 server_->in_flight());
    server_->cancel_in_flight();
    if (!server_->wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(10))) {
      spdlog::error("shutdown: {} request(s) did not end after cancellation", server_->in_flight());
    }
  }
  server_->stop();
  spdlog::info("airlockd: stopped");
}

void Daemon::hurry() {
  if (server_) server_->cancel_in_flight();
}

std::size_t Daemon::requests_in_flight() const {
  return server_ ? server_->in_flight() : 0;
}

}  // namespace airlock::daemon
