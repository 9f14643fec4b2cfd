// airlock-egress-proxy: the egress proxy as a process of its own, for container backends that
// run it in a proxy container on the sandbox's internal network.
//
//   airlock-egress-proxy --listen 0.0.0.0:3128 --allow pypi.org --allow '*.pythonhosted.org'
//
// Every flag has an environment variable (AIRLOCK_EGRESS_*), so an image can be configured with
// `-e` alone. Logs go to stdout, one line per decision, flushed at once. When every listener is
// open it prints the readiness line
//
//   listening on 0.0.0.0:3128; allowing: pypi.org, *.pythonhosted.org; ports 443
//
// and it stops cleanly on SIGTERM or SIGINT. Exit status: 0 after a signal, 2 for bad flags or
// an invalid policy, 1 when a listener cannot be opened.
// GCC 12 reports a false "potential null pointer dereference" inside CLI11's config-file parsing
// (CLI::detail::split, inlined into this translation unit); nothing of ours is concerned.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wnull-dereference"
#endif

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <iostream>

#include "airlock/egress.hpp"
#include "airlock/errors.hpp"

namespace {

struct Flags {
  std::vector<std::string> listen{"0.0.0.0:3128"};
  std::vector<std::string> allow;
  std::vector<std::string> ports{"443"};
  std::vector<std::string> allow_nonglobal_for_tests;
  std::string sandbox_id = "-";
  long long header_timeout_ms = 10'000;
  long long dial_timeout_ms = 20'000;
  long long idle_timeout_ms = 300'000;
  std::size_t max_connections = 256;
  std::size_t max_header_bytes = 8 * 1024;
  std::size_t resolver_threads = 2;
  std::string log_level = "info";
};

// Each value may itself be a comma-separated list (environment variables carry lists so).
std::vector<std::string> split_lists(const std::vector<std::string>& values) {
  std::vector<std::string> items;
  for (const auto& value : values) {
    std::size_t start = 0;
    while (start <= value.size()) {
      const auto comma = std::min(value.find(',', start), value.size());
      std::string item = value.substr(start, comma - start);
      item.erase(0, item.find_first_not_of(" \t"));
      item.erase(item.find_last_not_of(" \t") + 1);
      if (!item.empty()) items.push_back(std::move(item));
      start = comma + 1;
    }
  }
  return items;
}

std::vector<std::uint16_t> parse_ports(const std::vector<std::string>& values) {
  std::vector<std::uint16_t> ports;
  for (const auto& item : split_lists(values)) {
    std::size_t used = 0;
    unsigned long port = 0;
    try {
      port = std::stoul(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || port == 0 || port > 65535) {
      throw airlock::InvalidArgument("--port \"" + item + "\" is not a port from 1 to 65535",
                                     "--port");
    }
    ports.push_back(static_cast<std::uint16_t>(port));
  }
  return ports;
}

// "unix:/path" or anything containing '/' is a unix socket; otherwise host:port, with an IPv6
// host in brackets.
airlock::EgressListener open_listener(airlock::EgressProxy& proxy, const std::string& where,
                                      const airlock::EgressPolicy& policy,
                                      const std::string& sandbox_id) {
  if (where.rfind("unix:", 0) == 0) return proxy.listen(where.substr(5), policy, sandbox_id);
  if (where.find('/') != std::string::npos) return proxy.listen(where, policy, sandbox_id);
  const auto colon = where.rfind(':');
  if (colon == std::string::npos || colon + 1 == where.size()) {
    throw airlock::InvalidArgument("--listen \"" + where + "\" is neither host:port nor a path",
                                   "--listen");
  }
  std::string host = where.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  unsigned long port = 0;
  try {
    std::size_t used = 0;
    port = std::stoul(where.substr(colon + 1), &used);
    if (used != where.size() - colon - 1 || port > 65535) throw std::out_of_range("port");
  } catch (const std::exception&) {
    throw airlock::InvalidArgument("--listen \"" + where + "\" has no valid port", "--listen");
  }
  return proxy.listen_tcp(host, static_cast<std::uint16_t>(port), policy, sandbox_id);
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  CLI::App app{"airlock-egress-proxy: airlock's CONNECT-only egress allowlist proxy"};
  app.add_option("--listen", flags.listen,
                 "host:port or a unix socket path (repeatable; default 0.0.0.0:3128)")
      ->envname("AIRLOCK_EGRESS_LISTEN");
  app.add_option("--allow", flags.allow,
                 "host pattern to allow (repeatable or comma-separated; '*' matches dots too)")
      ->envname("AIRLOCK_EGRESS_ALLOW");
  app.add_option("--port", flags.ports, "destination port to allow (repeatable; default 443)")
      ->envname("AIRLOCK_EGRESS_PORTS");
  app.add_option("--sandbox-id", flags.sandbox_id, "sandbox id written into every decision")
      ->envname("AIRLOCK_EGRESS_SANDBOX_ID");
  app.add_option("--header-timeout-ms", flags.header_timeout_ms)
      ->envname("AIRLOCK_EGRESS_HEADER_TIMEOUT_MS")
      ->capture_default_str();
  app.add_option("--dial-timeout-ms", flags.dial_timeout_ms)
      ->envname("AIRLOCK_EGRESS_DIAL_TIMEOUT_MS")
      ->capture_default_str();
  app.add_option("--idle-timeout-ms", flags.idle_timeout_ms)
      ->envname("AIRLOCK_EGRESS_IDLE_TIMEOUT_MS")
      ->capture_default_str();
  app.add_option("--max-connections", flags.max_connections, "per listener")
      ->envname("AIRLOCK_EGRESS_MAX_CONNECTIONS")
      ->capture_default_str();
  app.add_option("--max-header-bytes", flags.max_header_bytes)
      ->envname("AIRLOCK_EGRESS_MAX_HEADER_BYTES")
      ->capture_default_str();
  app.add_option("--resolver-threads", flags.resolver_threads)->capture_default_str();
  app.add_option("--allow-nonglobal-for-tests", flags.allow_nonglobal_for_tests,
                 "WEAKENS THE BOUNDARY: CIDR ranges of non-global addresses to let through "
                 "(tests only)")
      ->envname("AIRLOCK_EGRESS_ALLOW_NONGLOBAL_FOR_TESTS");
  app.add_option("--log-level", flags.log_level, "trace, debug, info, warn, error, off")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error) == 0 ? 0 : 2;
  }

  auto logger = spdlog::stdout_logger_mt("airlock-egress");
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(flags.log_level));

  airlock::EgressPolicy policy;
  try {
    policy.allowed_hosts = split_lists(flags.allow);
    policy.allowed_ports = parse_ports(flags.ports);
  } catch (const airlock::InvalidArgument& error) {
    std::cerr << "airlock-egress-proxy: " << error.what() << std::endl;
    return 2;
  }
  policy.allow_nonglobal_for_tests = split_lists(flags.allow_nonglobal_for_tests);
  policy.header_timeout = std::chrono::milliseconds(flags.header_timeout_ms);
  policy.dial_timeout = std::chrono::milliseconds(flags.dial_timeout_ms);
  policy.idle_timeout = std::chrono::milliseconds(flags.idle_timeout_ms);
  policy.max_connections = flags.max_connections;
  policy.max_header_bytes = flags.max_header_bytes;

  // Block the stop signals before any thread exists, so that every thread inherits the mask
  // and only sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  try {
    airlock::EgressProxy::Options options;
    options.resolver_threads = flags.resolver_threads;
    airlock::EgressProxy proxy(std::move(options));
    std::vector<airlock::EgressListener> listeners;
    std::string endpoints;
    for (const auto& where : split_lists(flags.listen)) {
      listeners.push_back(open_listener(proxy, where, policy, flags.sandbox_id));
      endpoints += (endpoints.empty() ? "" : ", ") + listeners.back().endpoint();
    }
    std::string allowing;
    for (const auto& host : policy.allowed_hosts) allowing += (allowing.empty() ? "" : ", ") + host;
    std::string ports;
    for (const auto port : policy.allowed_ports) {
      ports += (ports.empty() ? "" : ",") + std::to_string(port);
    }
    std::cout << "listening on " << endpoints
              << "; allowing: " << (allowing.empty() ? "nothing" : allowing) << "; ports " << ports;
    if (!policy.allow_nonglobal_for_tests.empty()) {
      std::cout << "; TEST ONLY non-global ranges allowed:";
      for (const auto& range : policy.allow_nonglobal_for_tests) std::cout << " " << range;
    }
    std::cout << std::endl;

    int received = 0;
    sigwait(&stop_signals, &received);
    spdlog::info("egress proxy: stopping on signal {}", received);
  } catch (const airlock::InvalidArgument& error) {
    std::cerr << "airlock-egress-proxy: " << error.what() << std::endl;
    return 2;
  } catch (const std::exception& error) {
    std::cerr << "airlock-egress-proxy: " << error.what() << std::endl;
    return 1;
  }
  return 0;
}
