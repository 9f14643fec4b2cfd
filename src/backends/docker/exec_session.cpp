#include "backends/docker/exec_session.hpp"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <nlohmann/json.hpp>
#include <thread>

#include "airlock/errors.hpp"
#include "backends/docker/engine_streams.hpp"
#include "backends/docker/multiplexed.hpp"

namespace airlock::docker {
namespace {

using nlohmann::json;

std::chrono::milliseconds left_until(Clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
}

// Output accounting as the frames arrive: nothing past the ceiling is ever kept or handed on.
// With a callback, each frame's payload goes to it as it is decoded (the attach stream streams).
struct Collected {
  std::string out;
  std::string err;
  std::uint64_t used = 0;
  std::uint64_t limit = 0;
  bool truncate = false;
  bool truncated = false;
  bool refused = false;
  const OutputCallback* on_output = nullptr;

  void take(StreamType stream, std::string_view payload) {
    if (stream == StreamType::stdin_stream || refused) return;
    std::string& target = stream == StreamType::stdout_stream ? out : err;
    if (used + payload.size() > limit) {
      if (!truncate) {
        refused = true;
        return;
      }
      truncated = true;
      payload = payload.substr(0, static_cast<std::size_t>(limit - used));
    }
    used += payload.size();
    if (payload.empty()) return;
    if (on_output != nullptr && *on_output) {
      (*on_output)(stream == StreamType::stdout_stream ? OutputStream::stdout_stream
                                                       : OutputStream::stderr_stream,
                   payload);
    } else {
      target.append(payload);
    }
  }
};

std::string create_exec(EngineClient& client, const std::string& container_id,
                        const Command& command, const ExecOptions& options,
                        Clock::time_point deadline) {
  json body = {{"AttachStdin", !options.stdin_bytes.empty() || options.stdin_fd >= 0},
               {"AttachStdout", true},
               {"AttachStderr", true},
               {"Tty", false},
               {"Cmd", command.arguments()}};
  if (!options.working_directory.empty()) body["WorkingDir"] = options.working_directory;
  if (!options.environment.empty()) {
    json environment = json::array();
    for (const auto& [name, value] : options.environment) {
      if (name.empty() || name.find('=') != std::string::npos ||
          name.find('\0') != std::string::npos || value.find('\0') != std::string::npos) {
        throw InvalidArgument("exec environment: \"" + name +
                              "\" is not a variable name (no '=', no NUL, not empty)");
      }
      environment.push_back(name + "=" + value);
    }
    body["Env"] = environment;
  }
  const std::string text = body.dump();
  const std::string path = "/containers/" + container_id + "/exec";
  // A container can be briefly unable to take an exec: restarting after another call's forced
  // stop, or paused by someone. Wait for the first (bounded); lift the second.
  const auto patience = std::min(deadline, Clock::now() + std::chrono::seconds(10));
  EngineResponse response;
  while (true) {
    CallOptions call;
    call.body = text;
    call.timeout =
        std::clamp(left_until(deadline), std::chrono::milliseconds(1), client.request_timeout());
    try {
      response = client.call("POST", path, call);
    } catch (const BackendError&) {
      if (Clock::now() >= deadline) throw Timeout("the command could not be started in time");
      throw;
    }
    if (response.status != 409 || Clock::now() >= patience) break;
    if (response.engine_message().find("paused") != std::string::npos) {
      client.call("POST", "/containers/" + container_id + "/unpause");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (response.status == 404) {
    EngineClient::fail("the sandbox's container no longer exists", "POST", path, response);
  }
  if (response.status == 409) {
    EngineClient::fail("the sandbox's container is not running", "POST", path, response);
  }
  if (response.status != 201) {
    EngineClient::fail("the container engine refused to start a command", "POST", path, response);
  }
  const auto parsed = json::parse(response.body, nullptr, false);
  if (!parsed.is_object() || !parsed.contains("Id") || !parsed["Id"].is_string()) {
    throw BackendError("the container engine's exec answer has no Id",
                       response.body.substr(0, 300));
  }
  return parsed["Id"].get<std::string>();
}

// The exit code, once the engine has recorded it (it may lag the end of the stream slightly).
std::optional<int> exit_code(EngineClient& client, const std::string& exec_id,
                             Clock::time_point deadline) {
  const std::string path = "/exec/" + exec_id + "/json";
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    CallOptions call;
    call.timeout = client.request_timeout();
    const EngineResponse response = client.call("GET", path, call);
    if (response.status != 200) {
      EngineClient::fail("the container engine lost track of a command", "GET", path, response);
    }
    const auto parsed = json::parse(response.body, nullptr, false);
    if (!parsed.is_object())
      throw BackendError("unreadable exec inspection", response.body.substr(0, 300));
    const bool running = parsed.value("Running", false);
    if (!running && parsed.contains("ExitCode") && parsed["ExitCode"].is_number_integer()) {
      return parsed["ExitCode"].get<int>();
    }
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

}  // namespace

ExecOutcome run_exec(EngineClient& client, const std::string& container_id, const Command& command,
                     const ExecOptions& options, std::uint64_t backend_ceiling,
                     const ForceStop& force_stop) {
  check_exec_options(options);
  if (options.terminal) {
    throw NotSupported(
        "the docker backend gives no terminal: its exec streams are demultiplexed pipes");
  }
  if (options.control) {
    throw NotSupported(
        "the docker backend cannot forward signals to a running command: the Engine API signals "
        "only a container's PID 1, never one exec's process group");
  }
  const Clock::time_point deadline = Clock::now() + options.timeout;
  if ((!options.stdin_bytes.empty() || options.stdin_fd >= 0) && client.endpoint().tls) {
    throw NotSupported(
        "stdin over a TLS connection to the engine is not supported: the engine learns that "
        "stdin ended only from a half-closed connection");
  }

  Collected collected;
  collected.limit = options.max_output_bytes.value_or(backend_ceiling);
  collected.truncate =
      options.max_output_bytes.has_value() && options.overflow == OutputOverflow::truncate;
  collected.on_output = &options.on_output;

  std::optional<HijackedConnection> connection;
  // The attach is closed before the stop: an engine may hold a stop until the attached client
  // lets go of the stream (Podman does).
  const auto stop_now = [&] {
    connection.reset();
    return force_stop();
  };
  const auto timed_out = [&](const std::string& why) -> Timeout {
    const bool confirmed = stop_now();
    return Timeout(why + (confirmed ? "; every process in the sandbox was killed to stop it"
                                    : "; stopping it was not confirmed"),
                   confirmed, collected.out, collected.err);
  };
  const auto expired_message = [&] {
    return "the command did not finish within " + std::to_string(options.timeout.count()) + " ms";
  };

  const std::string exec_id = create_exec(client, container_id, command, options, deadline);
  try {
    connection.emplace(client, "POST", client.versioned("/exec/" + exec_id + "/start"),
                       R"({"Detach":false,"Tty":false})", deadline);
  } catch (const StreamDeadline&) {
    throw timed_out(expired_message());
  }
  if (connection->status() != 101 && connection->status() != 200) {
    EngineResponse failed;
    failed.status = connection->status();
    failed.body = connection->error_body();
    EngineClient::fail("the container engine refused to attach to a command", "POST",
                       "/exec/" + exec_id + "/start", failed);
  }

  MultiplexedDecoder decoder(
      [&](StreamType stream, std::string_view payload) { collected.take(stream, payload); });
  // What stdin has still to take: the bytes, then what the caller's descriptor gives (read
  // only when poll says it is readable, so never blocking) until its end of file.
  std::string stdin_pending = options.stdin_bytes;
  std::size_t stdin_written = 0;
  bool caller_stdin_open = options.stdin_fd >= 0;
  bool stdin_closed = options.stdin_bytes.empty() && !caller_stdin_open;
  char chunk[65536];
  while (true) {
    if (options.stop.stop_requested()) throw timed_out("cancelled");
    if (Clock::now() >= deadline) throw timed_out(expired_message());
    if (stdin_written < stdin_pending.size()) {
      stdin_written +=
          connection->write_some(std::string_view(stdin_pending).substr(stdin_written));
    }
    if (stdin_written == stdin_pending.size()) {
      stdin_pending.clear();
      stdin_written = 0;
      if (caller_stdin_open) {
        pollfd caller{options.stdin_fd, POLLIN, 0};
        if (::poll(&caller, 1, 0) > 0) {
          const ssize_t got = ::read(options.stdin_fd, chunk, sizeof chunk);
          if (got > 0) {
            stdin_pending.assign(chunk, static_cast<std::size_t>(got));
            continue;
          }
          if (got == 0 || (errno != EAGAIN && errno != EINTR)) caller_stdin_open = false;
        }
      }
    }
    if (stdin_pending.empty() && !caller_stdin_open && !stdin_closed) {
      connection->shutdown_write();
      stdin_closed = true;
    }
    const auto read = connection->read_some(chunk, sizeof chunk);
    if (read.bytes > 0) {
      decoder.feed(std::string_view(chunk, read.bytes));
      if (collected.refused) {
        const bool confirmed = stop_now();
        throw ExecOutputLimitExceeded(collected.limit, confirmed);
      }
      continue;
    }
    if (read.end) break;
    pollfd descriptors[2] = {
        {connection->socket(), static_cast<short>(POLLIN | (stdin_pending.empty() ? 0 : POLLOUT)),
         0},
        {caller_stdin_open && stdin_pending.empty() ? options.stdin_fd : -1, POLLIN, 0}};
    const auto wait = std::min<long long>(left_until(deadline).count(), 50);
    ::poll(descriptors, 2, static_cast<int>(std::max<long long>(wait, 1)));
  }
  connection.reset();

  const auto code = exit_code(client, exec_id, deadline);
  if (!code) throw timed_out(expired_message());
  ExecOutcome outcome;
  outcome.result.stdout_bytes = std::move(collected.out);
  outcome.result.stderr_bytes = std::move(collected.err);
  outcome.result.exit_code = *code;
  outcome.result.truncated = collected.truncated;
  outcome.may_not_have_started = *code == 126 || *code == 127;
  return outcome;
}

}  // namespace airlock::docker
