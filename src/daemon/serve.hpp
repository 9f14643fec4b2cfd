// The command line shared by `airlockd` and `airlock serve`: the same flags, the same code.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace airlock::daemon {

struct ServeFlags {
  std::string config_file;  // the router document (backend_factory.hpp), required
  std::string socket = "/run/airlock/airlockd.sock";
  std::string socket_mode = "0660";
  std::string socket_group;
  std::string tcp;
  std::string token_file;
  bool dangerously_allow_tcp_without_token = false;
  std::string state_dir = "/var/lib/airlock/daemon";
  std::string ready_file;

  unsigned max_connections = 256;
  unsigned max_connections_per_ip = 64;
  unsigned idle_timeout_seconds = 60;
  unsigned long long header_timeout_ms = 10'000;
  unsigned long long body_timeout_ms = 120'000;
  unsigned long long max_json_body_bytes = 1u << 20;
  unsigned long long default_exec_timeout_ms = 60'000;
  unsigned long long max_exec_timeout_ms = 3'600'000;
  unsigned long long default_max_output_bytes = 1u << 20;
  unsigned long long max_output_bytes = 64u << 20;
  unsigned long long admission_timeout_ms = 30'000;
  unsigned long long shutdown_grace_ms = 30'000;
  // Not a flag: set only by a test rig's own main (exchange_log.hpp).
  std::string exchange_log;
};

void add_serve_flags(CLI::App& app, ServeFlags& flags);

// Builds the router from --config, starts the daemon, writes the ready file, and serves until
// SIGTERM or SIGINT (a second signal cancels what is still in flight). Returns the exit code.
// Must be called before the process starts any thread: it blocks those signals for all of them.
int run_serve(const ServeFlags& flags);

// The whole of `airlockd`: parses argv (the flags above plus --log-level and --version), serves,
// and returns the exit code (125 when airlock could not serve, with the reason on stderr).
// `exchange_log`: see ServeFlags; the shipped airlockd passes none.
int airlockd_main(int argc, char** argv, const std::string& exchange_log = {});

}  // namespace airlock::daemon
