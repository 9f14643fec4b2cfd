#include "backends/linux/control_channel.hpp"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>

#include "airlock/errors.hpp"
#include "backends/linux/protocol.hpp"
#include "base/syscall_error.hpp"

namespace airlock::linux_backend {
namespace {

using Clock = std::chrono::steady_clock;

// How long past its deadline the host waits for the init's own answer (the init enforces the
// deadline; this only guards against an init that stopped answering).
constexpr auto kReplyGrace = std::chrono::seconds(5);

struct sockaddr_un address_for(const std::string& path) {
  struct sockaddr_un address {};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return address;
}

std::string resolve_address(const std::filesystem::path& path, base::UniqueFd& directory) {
  const std::string direct = path.string();
  if (direct.size() < sizeof(sockaddr_un::sun_path)) return direct;
  directory.reset(::open(path.parent_path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!directory) {
    throw BackendError("the sandbox's control socket is unreachable",
                       base::errno_error("open", path.parent_path().string()));
  }
  return "/proc/self/fd/" + std::to_string(directory.get()) + "/" + path.filename().string();
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

protocol::Reply receive_reply(int socket) {
  std::string bytes;
  std::vector<base::UniqueFd> fds;
  const long received = protocol::receive_message(socket, bytes, fds);
  protocol::Reply reply;
  if (received <= 0 || !protocol::decode_reply(bytes, reply)) {
    throw BackendError("the sandbox's init stopped answering",
                       "control reply: " + std::to_string(received));
  }
  return reply;
}

int milliseconds_until(Clock::time_point when) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(when - Clock::now());
  if (left.count() <= 0) return 0;
  if (left.count() > 60'000) return 60'000;
  return static_cast<int>(left.count());
}

}  // namespace

base::UniqueFd listen_control_socket(const std::filesystem::path& path) {
  base::UniqueFd directory;
  const std::string address_text = resolve_address(path, directory);
  base::UniqueFd listener(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!listener) {
    throw BackendError("the control socket could not be made", base::errno_error("socket"));
  }
  const struct sockaddr_un address = address_for(address_text);
  if (::bind(listener.get(), reinterpret_cast<const struct sockaddr*>(&address), sizeof address) !=
      0) {
    throw BackendError("the control socket could not be made",
                       base::errno_error("bind", path.string()));
  }
  if (::listen(listener.get(), 128) != 0) {
    throw BackendError("the control socket could not be made",
                       base::errno_error("listen", path.string()));
  }
  return listener;
}

ControlChannel::ControlChannel(const std::filesystem::path& socket_path, std::string secret)
    : address_(resolve_address(socket_path, directory_)), secret_(std::move(secret)) {}

base::UniqueFd ControlChannel::connect() const {
  base::UniqueFd socket(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!socket) throw BackendError("cannot reach the sandbox", base::errno_error("socket"));
  const struct sockaddr_un address = address_for(address_);
  while (::connect(socket.get(), reinterpret_cast<const struct sockaddr*>(&address),
                   sizeof address) != 0) {
    if (errno == EINTR) continue;
    throw BackendError("the sandbox is gone (disposed, or its init died)",
                       base::errno_error("connect", address_));
  }
  return socket;
}

bool ControlChannel::ping() const noexcept {
  try {
    base::UniqueFd socket = connect();
    if (protocol::send_message(socket.get(), protocol::encode_header(protocol::Op::ping, 0, secret_),
                               nullptr, 0) != 0) {
      return false;
    }
    struct pollfd wait {socket.get(), POLLIN, 0};
    if (::poll(&wait, 1, 5000) != 1) return false;
    const protocol::Reply reply = receive_reply(socket.get());
    return reply.kind == protocol::ReplyKind::ok && reply.version == protocol::kVersion;
  } catch (...) {
    return false;
  }
}

ControlChannel::Roots ControlChannel::fetch_roots() const {
  base::UniqueFd socket = connect();
  if (const int error = protocol::send_message(
          socket.get(), protocol::encode_header(protocol::Op::root, 0, secret_), nullptr, 0);
      error != 0) {
    throw BackendError("the sandbox's init stopped answering",
                       base::SyscallError(error, "sendmsg"));
  }
  std::string bytes;
  std::vector<base::UniqueFd> fds;
  const long received = protocol::receive_message(socket.get(), bytes, fds);
  protocol::Reply reply;
  if (received <= 0 || !protocol::decode_reply(bytes, reply) ||
      reply.kind != protocol::ReplyKind::ok || fds.size() != 2) {
    throw BackendError("the sandbox's init did not hand over its root", "root request");
  }
  return Roots{std::move(fds[0]), std::move(fds[1])};
}

ControlChannel::Namespaces ControlChannel::fetch_namespaces() const {
  base::UniqueFd socket = connect();
  if (const int error = protocol::send_message(
          socket.get(), protocol::encode_header(protocol::Op::namespaces, 0, secret_), nullptr, 0);
      error != 0) {
    throw BackendError("the sandbox's init stopped answering",
                       base::SyscallError(error, "sendmsg"));
  }
  std::string bytes;
  std::vector<base::UniqueFd> fds;
  const long received = protocol::receive_message(socket.get(), bytes, fds);
  protocol::Reply reply;
  if (received <= 0 || !protocol::decode_reply(bytes, reply) ||
      reply.kind != protocol::ReplyKind::ok || fds.size() != 2) {
    throw BackendError("the sandbox's init did not hand over its namespaces",
                       reply.message.empty() ? "namespaces request" : reply.message);
  }
  return Namespaces{std::move(fds[0]), std::move(fds[1])};
}

ExecResult ControlChannel::exec(const ExecPlan& plan) const {
  const auto remaining =
      std::chrono::duration_cast<std::chrono::milliseconds>(plan.deadline - Clock::now());
  if (remaining.count() <= 0) {
    throw QueuedTimeout("the deadline passed before the command could be sent; nothing ran");
  }
  protocol::ExecRequest request;
  request.argv = plan.argv;
  request.env = plan.environment;
  request.working_directory = plan.working_directory;
  request.deadline_ms = remaining.count();
  if (plan.serial) request.flags |= protocol::kSerial;
  if (plan.feed_stdin) request.flags |= protocol::kStdinPipe;

  int out_pipe[2];
  int err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    throw BackendError("pipe failed", base::errno_error("pipe2"));
  }
  base::UniqueFd out_read(out_pipe[0]);
  base::UniqueFd out_write(out_pipe[1]);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    throw BackendError("pipe failed", base::errno_error("pipe2"));
  }
  base::UniqueFd err_read(err_pipe[0]);
  base::UniqueFd err_write(err_pipe[1]);
  base::UniqueFd in_read;
  base::UniqueFd in_write;
  if (plan.feed_stdin) {
    int in_pipe[2];
    if (::pipe2(in_pipe, O_CLOEXEC) != 0) {
      throw BackendError("pipe failed", base::errno_error("pipe2"));
    }
    in_read.reset(in_pipe[0]);
    in_write.reset(in_pipe[1]);
  }

  const std::string body = protocol::encode_exec(request);
  if (body.size() > protocol::kMaxRequestBytes) {
    throw InvalidArgument("the command and its environment are too large (" +
                          std::to_string(body.size()) + " bytes; at most " +
                          std::to_string(protocol::kMaxRequestBytes) + ")");
  }
  std::vector<int> fds;
  std::string message;
  base::UniqueFd body_memfd;
  if (body.size() > protocol::kInlineLimit) {
    body_memfd.reset(::memfd_create("airlock-exec", MFD_CLOEXEC));
    if (!body_memfd) {
      throw BackendError("the command could not be sent", base::errno_error("memfd_create"));
    }
    if (::write(body_memfd.get(), body.data(), body.size()) != static_cast<ssize_t>(body.size())) {
      throw BackendError("the command could not be sent", base::errno_error("write", "memfd"));
    }
    message = protocol::encode_header(protocol::Op::exec, protocol::kBodyInMemfd, secret_);
    fds.push_back(body_memfd.get());
  } else {
    message = protocol::encode_header(protocol::Op::exec, 0, secret_) + body;
  }
  fds.push_back(out_write.get());
  fds.push_back(err_write.get());
  if (plan.feed_stdin) fds.push_back(in_read.get());

  base::UniqueFd socket = connect();
  if (const int error = protocol::send_message(socket.get(), message, fds.data(), fds.size());
      error != 0) {
    throw BackendError("the command could not be sent to the sandbox",
                       base::SyscallError(error, "sendmsg"));
  }
  // Only the command holds the write ends now: end of stream means it (and its heirs) closed them.
  out_write.reset();
  err_write.reset();
  in_read.reset();
  body_memfd.reset();
  set_nonblocking(out_read.get());
  set_nonblocking(err_read.get());
  if (in_write) set_nonblocking(in_write.get());

  base::UniqueFd cancel;
  std::optional<std::stop_callback<std::function<void()>>> on_stop;
  if (plan.stop.stop_possible()) {
    cancel.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!cancel) throw BackendError("eventfd failed", base::errno_error("eventfd"));
    const int cancel_fd = cancel.get();
    on_stop.emplace(plan.stop, std::function<void()>([cancel_fd] {
                      const std::uint64_t one = 1;
                      ssize_t ignored = ::write(cancel_fd, &one, sizeof one);
                      (void)ignored;
                    }));
  }

  const std::optional<std::uint64_t> limit =
      plan.max_output_bytes ? plan.max_output_bytes
                            : (plan.output_ceiling > 0 ? std::optional(plan.output_ceiling)
                                                       : std::nullopt);
  const bool truncate = plan.max_output_bytes && plan.overflow == OutputOverflow::truncate;
  ExecResult result;
  std::uint64_t total = 0;
  bool overflowed = false;
  bool kill_sent = false;
  bool cancelled = false;
  std::size_t stdin_done = 0;
  std::optional<protocol::Reply> reply;
  auto send_kill = [&] {
    if (kill_sent) return;
    kill_sent = true;
    (void)protocol::send_message(socket.get(), protocol::encode_header(protocol::Op::kill, 0, secret_),
                                 nullptr, 0);
  };
  // Appends what arrived, under the ceiling; past it, refuse (kill, drop) or truncate (discard).
  auto take = [&](std::string& into, const char* data, std::size_t size) {
    if (overflowed && !truncate) return;
    if (limit && total + size > *limit) {
      const std::uint64_t room = *limit - total;
      if (truncate) {
        into.append(data, static_cast<std::size_t>(room));
        total = *limit;
        result.truncated = true;
        return;
      }
      overflowed = true;
      send_kill();
      return;
    }
    into.append(data, size);
    total += size;
  };
  auto drain = [&](base::UniqueFd& pipe, std::string& into) {
    char chunk[65536];
    for (;;) {
      const ssize_t got = ::read(pipe.get(), chunk, sizeof chunk);
      if (got > 0) {
        take(into, chunk, static_cast<std::size_t>(got));
        continue;
      }
      if (got == 0 || (errno != EAGAIN && errno != EINTR)) pipe.reset();
      return;
    }
  };

  const Clock::time_point hard_limit = plan.deadline + kReplyGrace;
  Clock::time_point kill_limit = Clock::time_point::max();
  while (!reply) {
    struct pollfd polled[5];
    nfds_t count = 0;
    auto add = [&](int fd, short events) {
      polled[count] = {fd, events, 0};
      return count++;
    };
    const nfds_t socket_index = add(socket.get(), POLLIN);
    const nfds_t cancel_index = cancel ? add(cancel.get(), POLLIN) : ~nfds_t{0};
    const nfds_t out_index = out_read ? add(out_read.get(), POLLIN) : ~nfds_t{0};
    const nfds_t err_index = err_read ? add(err_read.get(), POLLIN) : ~nfds_t{0};
    const nfds_t in_index = in_write ? add(in_write.get(), POLLOUT) : ~nfds_t{0};
    const Clock::time_point wake = std::min(hard_limit, kill_limit);
    const int ready = ::poll(polled, count, milliseconds_until(wake));
    if (ready < 0 && errno != EINTR) throw BackendError("poll failed", base::errno_error("poll"));
    if (ready == 0 && Clock::now() >= wake) {
      // The init did not answer: we cannot know whether the command is still running.
      send_kill();
      throw Timeout("the command did not finish and the sandbox's init did not answer; whether "
                    "the command stopped is unknown",
                    std::nullopt, std::move(result.stdout_bytes),
                    std::move(result.stderr_bytes));
    }
    if (out_index != ~nfds_t{0} && polled[out_index].revents != 0) drain(out_read, result.stdout_bytes);
    if (err_index != ~nfds_t{0} && polled[err_index].revents != 0) drain(err_read, result.stderr_bytes);
    if (in_index != ~nfds_t{0} && polled[in_index].revents != 0) {
      while (stdin_done < plan.stdin_bytes.size()) {
        const ssize_t sent = ::write(in_write.get(), plan.stdin_bytes.data() + stdin_done,
                                     plan.stdin_bytes.size() - stdin_done);
        if (sent > 0) {
          stdin_done += static_cast<std::size_t>(sent);
          continue;
        }
        if (sent < 0 && (errno == EAGAIN || errno == EINTR)) break;
        stdin_done = plan.stdin_bytes.size();  // the command stopped reading: that is its call
      }
      if (stdin_done == plan.stdin_bytes.size()) in_write.reset();
    }
    if (cancel_index != ~nfds_t{0} && (polled[cancel_index].revents & POLLIN) != 0 &&
        !cancelled) {
      cancelled = true;
      send_kill();
    }
    if (kill_sent && kill_limit == Clock::time_point::max()) {
      kill_limit = Clock::now() + kReplyGrace;
    }
    if ((polled[socket_index].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      reply = receive_reply(socket.get());
    }
  }
  // The command has ended: what it wrote is already in the pipes. Take it without waiting for
  // end of stream, which a detached descendant holding the pipe could postpone forever.
  if (out_read) drain(out_read, result.stdout_bytes);
  if (err_read) drain(err_read, result.stderr_bytes);

  const auto confirmed = [&](const protocol::ExitReport& report) -> std::optional<bool> {
    if ((report.flags & protocol::kKillChecked) == 0) return std::nullopt;
    return (report.flags & protocol::kKillConfirmed) != 0;
  };
  switch (reply->kind) {
    case protocol::ReplyKind::exited: {
      const protocol::ExitReport& report = reply->exit;
      if (cancelled) {
        throw Timeout("cancelled", confirmed(report), std::move(result.stdout_bytes),
                      std::move(result.stderr_bytes));
      }
      if (overflowed) throw ExecOutputLimitExceeded(*limit, confirmed(report));
      if ((report.flags & protocol::kTimedOut) != 0) {
        throw Timeout("the command did not finish before its deadline and was killed",
                      confirmed(report), std::move(result.stdout_bytes),
                      std::move(result.stderr_bytes));
      }
      const int status = report.wait_status;
      if (WIFSIGNALED(status)) {
        result.term_signal = WTERMSIG(status);
        result.exit_code = 128 + WTERMSIG(status);
      } else {
        result.exit_code = WEXITSTATUS(status);
      }
      return result;
    }
    case protocol::ReplyKind::queued_timeout:
      throw QueuedTimeout(
          "the deadline passed while the command waited for its turn in the sandbox; nothing ran");
    case protocol::ReplyKind::spawn_failed: {
      const int error = reply->failure.error_number;
      const std::string reason = base::errno_text(error);
      switch (reply->failure.stage) {
        case protocol::SpawnStage::execute:
          result.exit_code = error == ENOENT ? 127 : 126;
          result.stderr_bytes = "airlock: cannot run '" + plan.argv.front() + "': " + reason + "\n";
          return result;
        case protocol::SpawnStage::working_directory:
          if (error == ENOENT) {
            throw NotFound("the working directory " + plan.working_directory + " does not exist",
                           plan.working_directory);
          }
          if (error == ENOTDIR) {
            throw NotADirectory("the working directory " + plan.working_directory +
                                    " is not a directory",
                                plan.working_directory);
          }
          throw SystemError("cannot enter the working directory " + plan.working_directory +
                                ": " + reason,
                            error, plan.working_directory);
        default:
          throw BackendError("the sandbox could not start the command",
                             "spawn stage " +
                                 std::to_string(static_cast<unsigned>(reply->failure.stage)) +
                                 ": " + reason,
                             std::error_code(error, std::generic_category()));
      }
    }
    case protocol::ReplyKind::error:
      throw BackendError("the sandbox refused the command", reply->message);
    default:
      throw BackendError("the sandbox's init answered something unexpected", "exec reply");
  }
}

}  // namespace airlock::linux_backend
