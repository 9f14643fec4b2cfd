#include "daemon/serve.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "airlock/backend_factory.hpp"
#include "airlock/errors.hpp"
#include "daemon/daemon.hpp"
#include "daemon/listeners.hpp"

namespace airlock::daemon {
namespace {

std::string read_file(const std::string& path, std::string_view what) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    throw InvalidArgument(std::string(what) + ": cannot read '" + path + "'", std::string(what));
  }
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

std::string read_token(const std::string& path) {
  struct stat info {};
  if (stat(path.c_str(), &info) == 0 && (info.st_mode & 0077) != 0) {
    spdlog::warn("--token-file '{}' is readable by others than its owner", path);
  }
  std::string token = read_file(path, "--token-file");
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  if (token.size() < 16) {
    throw InvalidArgument("--token-file: the token must be at least 16 characters", "token-file");
  }
  if (token.find_first_of(" \t\r\n") != std::string::npos) {
    throw InvalidArgument("--token-file: the token must not contain whitespace", "token-file");
  }
  return token;
}

mode_t parse_mode(const std::string& text) {
  if (text.empty() || text.size() > 4 || text.find_first_not_of("01234567") != std::string::npos) {
    throw InvalidArgument("--socket-mode: expected an octal mode such as 0660", "socket-mode");
  }
  const auto mode = static_cast<mode_t>(std::stoul(text, nullptr, 8));
  if ((mode & 0007) != 0) {
    throw InvalidArgument("--socket-mode: other users may not reach the socket (mode " + text +
                              " grants them access)",
                          "socket-mode");
  }
  return mode;
}

void write_ready_file(const std::string& path, const Daemon& daemon) {
  const json::Json ready{{"unix", daemon.socket_path()},
                         {"tcp", daemon.tcp_address().empty() ? json::Json(nullptr)
                                                              : json::Json(daemon.tcp_address())},
                         {"pid", getpid()}};
  const std::string temporary = path + ".tmp";
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    file << ready.dump() << "\n";
    if (!file) throw SystemError("cannot write the ready file", errno, path);
  }
  if (rename(temporary.c_str(), path.c_str()) != 0) {
    throw SystemError("cannot write the ready file", errno, path);
  }
}

}  // namespace

void add_serve_flags(CLI::App& app, ServeFlags& flags) {
  app.add_option("--config", flags.config_file,
                 "JSON router configuration: backends, min_isolation, selected, denials")
      ->required();
  app.add_option("--socket", flags.socket, "unix socket path")->capture_default_str();
  app.add_option("--socket-mode", flags.socket_mode, "unix socket mode (octal; never for others)")
      ->capture_default_str();
  app.add_option("--socket-group", flags.socket_group, "unix socket group (name or number)");
  app.add_option("--tcp", flags.tcp, "also listen on HOST:PORT (needs --token-file)");
  app.add_option("--token-file", flags.token_file,
                 "file holding the bearer token TCP requests must carry");
  app.add_flag("--dangerously-allow-tcp-without-token", flags.dangerously_allow_tcp_without_token,
               "serve TCP with no token at all (test rigs only)");
  app.add_option("--state-dir", flags.state_dir, "where handle records are kept")
      ->capture_default_str();
  app.add_option("--ready-file", flags.ready_file,
                 "write {unix, tcp, pid} as JSON here once serving");
  app.add_option("--max-connections", flags.max_connections, "per listener")->capture_default_str();
  app.add_option("--max-connections-per-ip", flags.max_connections_per_ip, "TCP only")
      ->capture_default_str();
  app.add_option("--idle-timeout-seconds", flags.idle_timeout_seconds,
                 "close a connection silent this long")
      ->capture_default_str();
  app.add_option("--header-timeout-ms", flags.header_timeout_ms,
                 "a request line and headers must arrive within this")
      ->capture_default_str();
  app.add_option("--body-timeout-ms", flags.body_timeout_ms,
                 "a request body must arrive within this")
      ->capture_default_str();
  app.add_option("--max-json-body-bytes", flags.max_json_body_bytes, "cap on JSON request bodies")
      ->capture_default_str();
  app.add_option("--default-exec-timeout-ms", flags.default_exec_timeout_ms,
                 "an exec's timeout when the request names none")
      ->capture_default_str();
  app.add_option("--max-exec-timeout-ms", flags.max_exec_timeout_ms,
                 "the longest timeout a request may ask for")
      ->capture_default_str();
  app.add_option("--default-max-output-bytes", flags.default_max_output_bytes,
                 "an exec's output ceiling when the request names none")
      ->capture_default_str();
  app.add_option("--max-output-bytes", flags.max_output_bytes,
                 "the largest output ceiling a request may ask for")
      ->capture_default_str();
  app.add_option("--admission-timeout-ms", flags.admission_timeout_ms,
                 "how long a non-exec call may wait for admission")
      ->capture_default_str();
  app.add_option("--shutdown-grace-ms", flags.shutdown_grace_ms,
                 "on SIGTERM, how long requests in flight may run on")
      ->capture_default_str();
}

int run_serve(const ServeFlags& flags) {
  // Blocked before any thread exists, so every thread inherits the mask and the signals reach
  // only the sigwait below. SIGPIPE is ignored: a client that hangs up is an error return.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  DaemonOptions options;
  options.socket_path = flags.socket;
  options.socket_mode = parse_mode(flags.socket_mode);
  if (!flags.socket_group.empty()) options.socket_group = resolve_group(flags.socket_group);
  options.tcp = flags.tcp;
  if (!flags.token_file.empty()) options.token = read_token(flags.token_file);
  options.dangerously_allow_tcp_without_token = flags.dangerously_allow_tcp_without_token;
  options.state_dir = flags.state_dir;
  options.exchange_log = flags.exchange_log;
  options.server.max_connections = flags.max_connections;
  options.server.max_connections_per_ip = flags.max_connections_per_ip;
  options.server.idle_timeout_seconds = flags.idle_timeout_seconds;
  options.server.header_deadline = Milliseconds(flags.header_timeout_ms);
  options.server.body_deadline = Milliseconds(flags.body_timeout_ms);
  options.server.max_json_body_bytes = flags.max_json_body_bytes;
  options.api.default_exec_timeout = Milliseconds(flags.default_exec_timeout_ms);
  options.api.max_exec_timeout = Milliseconds(flags.max_exec_timeout_ms);
  options.api.default_max_output_bytes = flags.default_max_output_bytes;
  options.api.max_output_bytes = flags.max_output_bytes;
  options.api.admission_timeout = Milliseconds(flags.admission_timeout_ms);
  options.shutdown_grace = Milliseconds(flags.shutdown_grace_ms);
  if (options.api.default_exec_timeout > options.api.max_exec_timeout) {
    throw InvalidArgument("--default-exec-timeout-ms exceeds --max-exec-timeout-ms",
                          "default-exec-timeout-ms");
  }
  if (options.api.default_max_output_bytes > options.api.max_output_bytes) {
    throw InvalidArgument("--default-max-output-bytes exceeds --max-output-bytes",
                          "default-max-output-bytes");
  }

  const json::Json config = json::parse_text(read_file(flags.config_file, "--config"),
                                             "config (" + flags.config_file + ")");
  Daemon daemon(std::move(options), make_router(config, "config"));
  daemon.start();
  if (!flags.ready_file.empty()) write_ready_file(flags.ready_file, daemon);
  std::cerr << "airlockd: serving on unix:" << daemon.socket_path()
            << (daemon.tcp_address().empty() ? "" : " tcp:") << daemon.tcp_address() << std::endl;

  int received = 0;
  sigwait(&signals, &received);
  spdlog::info("airlockd: signal {} received; draining (a second signal cancels what is left)",
               received);
  std::atomic<bool> done{false};
  std::jthread drain([&daemon, &done] {
    daemon.shutdown();
    done = true;
  });
  const timespec tick{0, 100'000'000};
  while (!done) {
    siginfo_t info{};
    if (sigtimedwait(&signals, &info, &tick) > 0) {
      spdlog::warn("airlockd: second signal; cancelling requests in flight");
      daemon.hurry();
    }
  }
  drain.join();
  if (!flags.ready_file.empty()) unlink(flags.ready_file.c_str());
  return 0;
}

}  // namespace airlock::daemon

namespace airlock::daemon {

int airlockd_main(int argc, char** argv, const std::string& exchange_log) {
  ServeFlags flags;
  flags.exchange_log = exchange_log;
  std::string log_level = "info";
  CLI::App app{"airlockd: airlock's HTTP/1.1 + JSON API on a unix socket (and TCP with a token)"};
  add_serve_flags(app, flags);
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off")
      ->capture_default_str();
  app.set_version_flag("--version", "airlockd 0.1.0");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int code = app.exit(error);
    return code == 0 ? 0 : 125;
  }
  spdlog::set_level(spdlog::level::from_str(log_level));
  try {
    return run_serve(flags);
  } catch (const Error& error) {
    std::cerr << "airlockd: " << error.type() << ": " << error.message() << std::endl;
    return 125;
  } catch (const std::exception& error) {
    std::cerr << "airlockd: " << error.what() << std::endl;
    return 125;
  }
}

}  // namespace airlock::daemon
