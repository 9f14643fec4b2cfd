#include "backends/gvisor/guest_exec.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>

#include "airlock/errors.hpp"
#include "backends/gvisor/guest_protocol.hpp"
#include "base/syscall_error.hpp"

namespace airlock::gvisor_backend {
namespace {

using Clock = std::chrono::steady_clock;

// How long the helper gets to kill the tree and say so, and how long output may still trickle
// in after the command's end (a background process may hold the pipes open for ever).
constexpr auto kKillGrace = std::chrono::seconds(6);
constexpr auto kDrainGrace = std::chrono::milliseconds(150);

void set_nonblocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// write(2) without SIGPIPE: a command that closes its stdin must not kill the caller's process.
// SIGPIPE is blocked on this thread for the call, and one it raised is taken back.
ssize_t write_quietly(int fd, const char* data, std::size_t size) {
  sigset_t pipe_only;
  sigset_t previous;
  ::sigemptyset(&pipe_only);
  ::sigaddset(&pipe_only, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_only, &previous);
  sigset_t pending;
  ::sigpending(&pending);
  const bool already_pending = ::sigismember(&pending, SIGPIPE) == 1;
  const ssize_t sent = ::write(fd, data, size);
  const int error = errno;
  if (sent < 0 && error == EPIPE && !already_pending) {
    const struct timespec zero {};
    while (::sigtimedwait(&pipe_only, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  errno = error;
  return sent;
}

struct Streams {
  base::UniqueFd out;
  base::UniqueFd err;
  base::UniqueFd status;
  base::UniqueFd in;       // our end of the command's stdin
  base::UniqueFd control;  // our end of the control pipe
};

}  // namespace

ExecResult run_in_guest(const Runsc& runsc, const std::string& id, const GuestCommand& command) {
  if (command.argv.empty()) throw InvalidArgument("exec: an empty command", "command");
  Pipe out = Pipe::make();
  Pipe err = Pipe::make();
  Pipe status = Pipe::make();
  Pipe control = Pipe::make();
  std::optional<Pipe> in;
  if (command.feed_stdin || command.stdin_fd >= 0) in = Pipe::make();

  std::vector<std::string> arguments = {"exec"};
  std::vector<int> extra;
  if (!command.direct) {
    arguments.push_back("--pass-fd=" + std::to_string(gvisor_guest::kStatusFd) + ":" +
                        std::to_string(gvisor_guest::kStatusFd));
    arguments.push_back("--pass-fd=" + std::to_string(gvisor_guest::kControlFd) + ":" +
                        std::to_string(gvisor_guest::kControlFd));
    extra = {status.write.get(), control.read.get()};
  }
  for (const auto& [name, value] : command.environment) {
    arguments.push_back("--env=" + name + "=" + value);
  }
  arguments.push_back(id);
  if (command.direct) {
    arguments.insert(arguments.end(), command.argv.begin(), command.argv.end());
  } else {
    arguments.push_back(gvisor_guest::kGuestHelperPath);
    arguments.push_back("run");
    if (!command.working_directory.empty()) {
      arguments.push_back("--cwd");
      arguments.push_back(command.working_directory);
    }
    arguments.push_back("--");
    arguments.insert(arguments.end(), command.argv.begin(), command.argv.end());
  }

  SpawnRequest request{runsc.command(arguments), in ? in->read.get() : -1, out.write.get(),
                       err.write.get(), extra};
  const pid_t client = spawn_process(request);
  // The client's exit as a descriptor, so the loop below wakes the moment it ends. Without one
  // (a kernel before 5.3) the loop looks again every 20 ms, which on a fast machine was most
  // of a warm exec's cost over a raw `runsc exec`.
  const base::UniqueFd client_exited(static_cast<int>(::syscall(SYS_pidfd_open, client, 0)));
  out.write.reset();
  err.write.reset();
  status.write.reset();
  control.read.reset();
  if (in) in->read.reset();

  Streams streams{std::move(out.read), std::move(err.read), std::move(status.read),
                  in ? std::move(in->write) : base::UniqueFd(), std::move(control.write)};
  if (command.direct) streams.status.reset();
  for (const base::UniqueFd* fd : {&streams.out, &streams.err, &streams.status, &streams.in}) {
    if (*fd) set_nonblocking(fd->get());
  }
  // What the command's stdin has still to take: the bytes, then what the caller's descriptor
  // gives until its end of file.
  std::string stdin_pending = command.stdin_bytes;
  bool caller_stdin_open = command.stdin_fd >= 0;
  if (streams.in && stdin_pending.empty() && !caller_stdin_open) streams.in.reset();

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
  int client_exit = -1;
  std::optional<Clock::time_point> drain_until;
  Clock::time_point kill_deadline{};

  auto request_kill = [&] {
    if (killing) return;
    killing = true;
    kill_deadline = Clock::now() + kKillGrace;
    if (command.direct) {
      ::kill(client, SIGKILL);
    } else if (streams.control) {
      const char byte = 'k';
      (void)!::write(streams.control.get(), &byte, 1);
    }
  };

  char buffer[65536];
  for (;;) {
    const bool status_done = !streams.status;
    if (client_exit < 0) client_exit = poll_process(client);
    if (client_exit >= 0 && status_done && !drain_until) drain_until = Clock::now() + kDrainGrace;
    const bool streams_done = !streams.out && !streams.err;
    if (client_exit >= 0 && status_done && (streams_done || Clock::now() >= *drain_until)) break;
    if (killing && Clock::now() >= kill_deadline) {
      ::kill(client, SIGKILL);
      if (client_exit < 0) client_exit = wait_process(client);
      break;
    }
    if (!killing && !command.stop.stop_requested() && Clock::now() >= command.deadline) {
      timed_out = true;
      request_kill();
    }
    if (!killing && command.stop.stop_requested()) {
      cancelled = true;
      request_kill();
    }

    const bool forwarding = streams.in && caller_stdin_open && stdin_pending.empty();
    pollfd fds[8] = {{streams.out.get(), POLLIN, 0},
                     {streams.err.get(), POLLIN, 0},
                     {streams.status.get(), POLLIN, 0},
                     {stdin_pending.empty() ? -1 : streams.in.get(), POLLOUT, 0},
                     {wake.get(), POLLIN, 0},
                     {forwarding ? command.stdin_fd : -1, POLLIN, 0},
                     {command.control && !killing ? command.control->wake_fd() : -1, POLLIN, 0},
                     {client_exit < 0 ? client_exited.get() : -1, POLLIN, 0}};
    auto next = killing ? kill_deadline : command.deadline;
    if (drain_until && *drain_until < next) next = *drain_until;
    auto wait_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
    wait_ms = std::max<long long>(0, std::min<long long>(wait_ms, client_exited ? 60'000 : 20));
    if (::poll(fds, 8, static_cast<int>(wait_ms)) < 0 && errno != EINTR) break;

    if (fds[6].revents != 0) {
      for (const int number : command.control->take().signals) {
        if (!forwardable_signal(number) || !streams.control) continue;
        const char signal_request[2] = {gvisor_guest::kSignalRequest, static_cast<char>(number)};
        (void)!write_quietly(streams.control.get(), signal_request, sizeof signal_request);
      }
    }
    if (forwarding && fds[5].revents != 0) {
      const ssize_t got = ::read(command.stdin_fd, buffer, sizeof buffer);
      if (got > 0) {
        stdin_pending.assign(buffer, static_cast<std::size_t>(got));
      } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
        caller_stdin_open = false;  // end of file, or a descriptor that cannot be read
      }
    }
    if (streams.in && !stdin_pending.empty() &&
        (fds[3].revents & (POLLOUT | POLLERR | POLLHUP)) != 0) {
      const ssize_t wrote =
          write_quietly(streams.in.get(), stdin_pending.data(), stdin_pending.size());
      if (wrote > 0) {
        stdin_pending.erase(0, static_cast<std::size_t>(wrote));
      } else if (wrote < 0 && errno != EAGAIN && errno != EINTR) {
        // EPIPE: the command closed its stdin; nothing more of the caller's input goes anywhere.
        stdin_pending.clear();
        caller_stdin_open = false;
      }
    }
    if (streams.in && stdin_pending.empty() && !caller_stdin_open) streams.in.reset();
    if (streams.status && (fds[2].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      const ssize_t got = ::read(streams.status.get(), buffer, sizeof buffer);
      if (got > 0 && status_text.size() < 4096) {
        status_text.append(buffer, static_cast<std::size_t>(got));
      } else if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
        streams.status.reset();
      }
    }
    for (int index = 0; index < 2; ++index) {
      base::UniqueFd& stream = index == 0 ? streams.out : streams.err;
      if (!stream || (fds[index].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t got = ::read(stream.get(), buffer, sizeof buffer);
      if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
        stream.reset();
        continue;
      }
      if (got < 0) continue;
      std::string& text = index == 0 ? result.stdout_bytes : result.stderr_bytes;
      const auto deliver = [&](std::size_t size) {
        if (size == 0) return;
        if (command.on_output) {
          command.on_output(index == 0 ? OutputStream::stdout_stream : OutputStream::stderr_stream,
                            std::string_view(buffer, size));
        } else {
          text.append(buffer, size);
        }
      };
      const auto size = static_cast<std::uint64_t>(got);
      if (overflowed) continue;  // past the ceiling: dropped (truncate) or being killed
      if (total + size > command.max_output_bytes) {
        const auto room = command.max_output_bytes - total;
        // Refused, nothing past the ceiling is handed over; truncated, the head up to it is.
        if (command.truncate) deliver(static_cast<std::size_t>(room));
        total = command.max_output_bytes;
        if (!overflowed) {
          overflowed = true;
          if (command.truncate) {
            result.truncated = true;
          } else {
            request_kill();
          }
        }
      } else {
        deliver(static_cast<std::size_t>(got));
        total += size;
      }
    }
  }
  if (client_exit < 0) client_exit = wait_process(client);

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
    // No status line: runsc itself failed (container gone), or the helper was killed from
    // inside the guest.
    // runsc's own refusals ("loading sandbox: file does not exist", "loading container: …")
    // come before the helper could say anything; a guest-side kill of the helper does not.
    const bool runsc_refused = result.stderr_bytes.find("loading sandbox") != std::string::npos ||
                               result.stderr_bytes.find("container") != std::string::npos;
    if (client_exit >= 125 && result.stdout_bytes.empty() && runsc_refused) {
      throw BackendError(
          "the sandbox's container is gone or could not run the command",
          "runsc exec exit " + std::to_string(client_exit) + ": " + result.stderr_bytes);
    }
    result.exit_code = client_exit;
  }
  return result;
}

}  // namespace airlock::gvisor_backend
