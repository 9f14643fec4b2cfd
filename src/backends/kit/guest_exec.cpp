#include "backends/kit/guest_exec.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "airlock/errors.hpp"
#include "backends/kit/guest/channel_frames.hpp"
#include "backends/kit/guest/file_protocol.hpp"
#include "base/syscall_error.hpp"

namespace airlock::backend_kit {
namespace {

using Clock = std::chrono::steady_clock;

// How long the helper gets to kill the tree and say so, and how long output may still trickle
// in after the command's end (a background process may hold the pipes open for ever).
constexpr auto kKillGrace = std::chrono::seconds(6);
constexpr auto kDrainGrace = std::chrono::milliseconds(150);

// send(2) of what is queued, without SIGPIPE. False once the peer is gone.
bool send_queued(int fd, std::string& queued) {
  while (!queued.empty()) {
    const ssize_t sent = ::send(fd, queued.data(), queued.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent > 0) {
      queued.erase(0, static_cast<std::size_t>(sent));
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    return sent < 0 && errno == EAGAIN;
  }
  return true;
}

bool parse_count(const std::string& text, std::uint64_t& value) {
  if (text.empty() || text.size() > 12) return false;
  value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return true;
}

}  // namespace

ExecResult run_in_guest(CommandChannel& channel, const GuestCommand& command) {
  if (command.argv.empty()) throw InvalidArgument("exec: an empty command", "command");
  base::UniqueFd connection = channel.take(command.deadline, command.stop);
  if (!connection) {
    // Nothing was started: there is nothing to kill.
    throw Timeout(command.stop.stop_requested()
                      ? "cancelled"
                      : "the command did not start within its timeout: the sandbox's agent "
                        "took no command",
                  true);
  }

  guest_kit::ChannelRequest request;
  request.direct = command.direct;
  request.feed_stdin = command.feed_stdin || command.stdin_fd >= 0;
  request.cwd = command.working_directory;
  request.argv = command.argv;
  for (const auto& [name, value] : command.environment) {
    request.environment.push_back(name + "=" + value);
  }
  const std::string encoded = guest_kit::encode_request(request);
  if (encoded.size() > guest_kit::kMaxFramePayload) {
    throw InvalidArgument("exec: the command line and environment exceed 1 MiB", "command");
  }
  std::string outgoing = guest_kit::frame(guest_kit::kRequest, encoded);

  // What the command's stdin has still to take: the bytes, then what the caller's descriptor
  // gives until its end of file. At most kStdinWindow bytes are in flight, unacknowledged.
  std::string stdin_pending = command.stdin_bytes;
  bool caller_stdin_open = command.stdin_fd >= 0;
  bool stdin_open = request.feed_stdin;
  std::uint64_t in_flight = 0;

  // A stop request wakes the poll through an eventfd.
  base::UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  std::stop_callback on_stop(command.stop, [&wake] {
    const std::uint64_t one = 1;
    (void)!::write(wake.get(), &one, sizeof one);
  });

  ExecResult result;
  std::string status_text;
  std::uint64_t total = 0;
  bool overflowed = false;
  bool killing = false;
  bool cancelled = false;
  bool timed_out = false;
  bool connection_open = true;
  std::optional<int> done_code;
  std::optional<Clock::time_point> drain_until;
  Clock::time_point kill_deadline{};
  guest_kit::FrameReader reader;

  auto request_kill = [&] {
    if (killing) return;
    killing = true;
    kill_deadline = Clock::now() + kKillGrace;
    outgoing += guest_kit::frame(guest_kit::kKill, {});
  };
  auto deliver_output = [&](int index, std::string_view chunk) {
    std::string& text = index == 0 ? result.stdout_bytes : result.stderr_bytes;
    const auto deliver = [&](std::size_t size) {
      if (size == 0) return;
      if (command.on_output) {
        command.on_output(index == 0 ? OutputStream::stdout_stream : OutputStream::stderr_stream,
                          chunk.substr(0, size));
      } else {
        text.append(chunk.data(), size);
      }
    };
    const auto size = static_cast<std::uint64_t>(chunk.size());
    if (overflowed) return;  // past the ceiling: dropped (truncate) or being killed
    if (total + size > command.max_output_bytes) {
      const auto room = command.max_output_bytes - total;
      // Refused, nothing past the ceiling is handed over; truncated, the head up to it is.
      if (command.truncate) deliver(static_cast<std::size_t>(room));
      total = command.max_output_bytes;
      overflowed = true;
      if (command.truncate) {
        result.truncated = true;
      } else {
        request_kill();
      }
    } else {
      deliver(chunk.size());
      total += size;
    }
  };

  char buffer[65536];
  for (;;) {
    if (done_code && !drain_until) drain_until = Clock::now() + kDrainGrace;
    if (done_code && (!connection_open || Clock::now() >= *drain_until)) break;
    if (!connection_open) break;
    if (killing && Clock::now() >= kill_deadline) break;
    if (!killing && !done_code && !command.stop.stop_requested() &&
        Clock::now() >= command.deadline) {
      timed_out = true;
      request_kill();
    }
    if (!killing && !done_code && command.stop.stop_requested()) {
      cancelled = true;
      request_kill();
    }
    // Stdin under the window, then its end once nothing more will come.
    while (stdin_open && !stdin_pending.empty() && in_flight < guest_kit::kStdinWindow) {
      const auto take = static_cast<std::size_t>(std::min<std::uint64_t>(
          {stdin_pending.size(), guest_kit::kStdinWindow - in_flight, 64u << 10}));
      outgoing +=
          guest_kit::frame(guest_kit::kStdin, std::string_view(stdin_pending).substr(0, take));
      stdin_pending.erase(0, take);
      in_flight += take;
    }
    if (stdin_open && stdin_pending.empty() && !caller_stdin_open) {
      outgoing += guest_kit::frame(guest_kit::kStdinEnd, {});
      stdin_open = false;
    }

    const bool forwarding = stdin_open && caller_stdin_open && stdin_pending.empty() &&
                            in_flight < guest_kit::kStdinWindow;
    pollfd fds[4] = {
        {connection.get(), static_cast<short>(POLLIN | (outgoing.empty() ? 0 : POLLOUT)), 0},
        {wake.get(), POLLIN, 0},
        {forwarding ? command.stdin_fd : -1, POLLIN, 0},
        {command.control && !killing ? command.control->wake_fd() : -1, POLLIN, 0}};
    auto next = killing ? kill_deadline : command.deadline;
    if (drain_until && *drain_until < next) next = *drain_until;
    auto wait_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
    wait_ms = std::clamp<long long>(wait_ms, 0, 60'000);
    if (::poll(fds, 4, static_cast<int>(wait_ms)) < 0 && errno != EINTR) break;

    if (fds[3].revents != 0) {
      for (const int number : command.control->take().signals) {
        if (!forwardable_signal(number) || command.direct) continue;
        outgoing += guest_kit::frame(guest_kit::kSignal, std::string(1, static_cast<char>(number)));
      }
    }
    if (forwarding && fds[2].revents != 0) {
      const ssize_t got = ::read(command.stdin_fd, buffer, sizeof buffer);
      if (got > 0) {
        stdin_pending.assign(buffer, static_cast<std::size_t>(got));
      } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
        caller_stdin_open = false;  // end of file, or a descriptor that cannot be read
      }
    }
    if (!outgoing.empty() && (fds[0].revents & (POLLOUT | POLLERR | POLLHUP)) != 0 &&
        !send_queued(connection.get(), outgoing)) {
      connection_open = false;
      outgoing.clear();
    }
    if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
    const ssize_t got = ::read(connection.get(), buffer, sizeof buffer);
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (got <= 0) {
      connection_open = false;
      continue;
    }
    reader.feed(buffer, static_cast<std::size_t>(got));
    char type = 0;
    std::string payload;
    while (reader.next(type, payload)) {
      std::uint64_t count = 0;
      if (type == guest_kit::kStdout || type == guest_kit::kStderr) {
        deliver_output(type == guest_kit::kStdout ? 0 : 1, payload);
      } else if (type == guest_kit::kStdinTaken && parse_count(payload, count)) {
        in_flight -= std::min(in_flight, count);
      } else if (type == guest_kit::kStatus && status_text.empty()) {
        status_text = payload.substr(0, 4096);
      } else if (type == guest_kit::kDone && parse_count(payload, count) && count < 256 &&
                 !done_code) {
        done_code = static_cast<int>(count);
      } else {
        connection_open = false;  // out of protocol
        break;
      }
    }
    if (reader.failed()) connection_open = false;
  }
  // Closing the connection ends whatever of the command is left (the handler kills its tree).
  connection.reset();
  const int client_exit = done_code.value_or(-1);

  // The helper's word, when it gave one.
  std::optional<std::string> verb;
  long value = 0;
  std::string rest;
  if (const auto newline = status_text.find('\n'); newline != std::string::npos) {
    const std::string line = status_text.substr(0, newline);
    const auto space = line.find(' ');
    verb = line.substr(0, space);
    if (space != std::string::npos) {
      rest = line.substr(space + 1);
      value = std::strtol(rest.c_str(), nullptr, 10);
    }
  }
  const std::optional<bool> kill_confirmed =
      command.direct ? std::nullopt : std::optional<bool>(verb && *verb == "killed");

  if (cancelled || timed_out) {
    throw Timeout(cancelled ? "cancelled"
                            : "the command did not finish within its timeout; its process tree "
                              "was killed",
                  kill_confirmed, result.stdout_bytes, result.stderr_bytes);
  }
  if (overflowed && !command.truncate) {
    throw ExecOutputLimitExceeded(command.max_output_bytes, kill_confirmed);
  }
  if (!done_code) {
    // The connection ended before the command did: the sandbox died under it.
    throw BackendError("the sandbox is gone or could not run the command",
                       "the agent's connection closed before the command ended");
  }
  if (command.direct) {
    result.exit_code = client_exit;
    return result;
  }
  if (verb == std::optional<std::string>("exit")) {
    result.exit_code = static_cast<int>(value);
  } else if (verb == std::optional<std::string>("signal")) {
    result.exit_code = 128 + static_cast<int>(value);
    result.term_signal = static_cast<int>(value);
  } else if (verb == std::optional<std::string>("error")) {
    const auto space = rest.find(' ');
    const std::string what = space == std::string::npos ? rest : rest.substr(space + 1);
    if (what.rfind("chdir ", 0) == 0) {
      throw NotFound("the working directory " + command.working_directory +
                         " does not exist in the sandbox (errno " + std::to_string(value) + ")",
                     command.working_directory);
    }
    // As a shell would answer: 127 for a command that could not be found or run.
    result.exit_code = 127;
    result.stderr_bytes +=
        command.argv[0] + ": " + base::errno_text(static_cast<int>(value)) + "\n";
  } else {
    // No status line: `run` was killed from inside the guest; its exit code says how.
    result.exit_code = client_exit;
  }
  return result;
}

}  // namespace airlock::backend_kit
