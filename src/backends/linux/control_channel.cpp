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

void set_nonblocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

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

// The command's standard streams: the host keeps the read ends (and stdin's write end), the
// write ends travel to the init with the request.
struct CommandPipes {
  base::UniqueFd out_read, out_write;
  base::UniqueFd err_read, err_write;
  base::UniqueFd in_read, in_write;
};

void open_pipe(base::UniqueFd& read_end, base::UniqueFd& write_end) {
  int ends[2];
  if (::pipe2(ends, O_CLOEXEC) != 0) throw BackendError("pipe failed", base::errno_error("pipe2"));
  read_end.reset(ends[0]);
  write_end.reset(ends[1]);
}

CommandPipes open_command_pipes(bool feed_stdin) {
  CommandPipes pipes;
  open_pipe(pipes.out_read, pipes.out_write);
  open_pipe(pipes.err_read, pipes.err_write);
  if (feed_stdin) open_pipe(pipes.in_read, pipes.in_write);
  return pipes;
}

std::string encode_checked(const protocol::ExecRequest& request) {
  std::string body = protocol::encode_exec(request);
  if (body.size() > protocol::kMaxRequestBytes) {
    throw InvalidArgument("the command and its environment are too large (" +
                          std::to_string(body.size()) + " bytes; at most " +
                          std::to_string(protocol::kMaxRequestBytes) + ")");
  }
  return body;
}

// Sends the request with the streams' far ends (a large body rides in a memfd), then lets go of
// them: only the command holds the write ends afterwards, so end of stream means it (and its
// heirs) closed them.
void send_command(int socket, const std::string& body, const std::string& secret,
                  CommandPipes& pipes) {
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
    message = protocol::encode_header(protocol::Op::exec, protocol::kBodyInMemfd, secret);
    fds.push_back(body_memfd.get());
  } else {
    message = protocol::encode_header(protocol::Op::exec, 0, secret) + body;
  }
  fds.push_back(pipes.out_write.get());
  fds.push_back(pipes.err_write.get());
  if (pipes.in_read) fds.push_back(pipes.in_read.get());
  if (const int error = protocol::send_message(socket, message, fds.data(), fds.size());
      error != 0) {
    throw BackendError("the command could not be sent to the sandbox",
                       base::SyscallError(error, "sendmsg"));
  }
  pipes.out_write.reset();
  pipes.err_write.reset();
  pipes.in_read.reset();
  set_nonblocking(pipes.out_read.get());
  set_nonblocking(pipes.err_read.get());
  if (pipes.in_write) set_nonblocking(pipes.in_write.get());
}

std::optional<bool> kill_confirmed(const protocol::ExitReport& report) {
  if ((report.flags & protocol::kKillChecked) == 0) return std::nullopt;
  return (report.flags & protocol::kKillConfirmed) != 0;
}

// One command in flight: its output under the ceiling, its stdin, a caller's cancellation, and
// the init's answer, polled together until the init reports the end (or stops answering).
class CommandStream {
 public:
  CommandStream(base::UniqueFd socket, const std::string& secret, const ExecPlan& plan,
                CommandPipes pipes)
      : socket_(std::move(socket)), secret_(secret), plan_(plan), pipes_(std::move(pipes)) {
    limit_ = plan.max_output_bytes
                 ? plan.max_output_bytes
                 : (plan.output_ceiling > 0 ? std::optional(plan.output_ceiling) : std::nullopt);
    truncate_ = plan.max_output_bytes && plan.overflow == OutputOverflow::truncate;
    if (plan.stop.stop_possible()) {
      cancel_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
      if (!cancel_) throw BackendError("eventfd failed", base::errno_error("eventfd"));
      const int cancel_fd = cancel_.get();
      on_stop_.emplace(plan.stop, std::function<void()>([cancel_fd] {
                         const std::uint64_t one = 1;
                         ssize_t ignored = ::write(cancel_fd, &one, sizeof one);
                         (void)ignored;
                       }));
    }
  }

  protocol::Reply run();
  ExecResult finish(const protocol::Reply& reply);

 private:
  static constexpr nfds_t kAbsent = ~nfds_t{0};

  void send_kill() {
    if (kill_sent_) return;
    kill_sent_ = true;
    (void)protocol::send_message(
        socket_.get(), protocol::encode_header(protocol::Op::kill, 0, secret_), nullptr, 0);
  }
  // Appends what arrived, under the ceiling; past it, refuse (kill, drop) or truncate (discard).
  void take(std::string& into, const char* data, std::size_t size) {
    if (overflowed_ && !truncate_) return;
    if (limit_ && total_ + size > *limit_) {
      const std::uint64_t room = *limit_ - total_;
      if (truncate_) {
        into.append(data, static_cast<std::size_t>(room));
        total_ = *limit_;
        result_.truncated = true;
        return;
      }
      overflowed_ = true;
      send_kill();
      return;
    }
    into.append(data, size);
    total_ += size;
  }
  void drain(base::UniqueFd& pipe, std::string& into) {
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
  }
  void feed_stdin() {
    const std::string& bytes = plan_.stdin_bytes;
    while (stdin_done_ < bytes.size()) {
      const ssize_t sent =
          ::write(pipes_.in_write.get(), bytes.data() + stdin_done_, bytes.size() - stdin_done_);
      if (sent > 0) {
        stdin_done_ += static_cast<std::size_t>(sent);
        continue;
      }
      if (sent < 0 && (errno == EAGAIN || errno == EINTR)) break;
      stdin_done_ = bytes.size();  // the command stopped reading: that is its call
    }
    if (stdin_done_ == bytes.size()) pipes_.in_write.reset();
  }
  [[noreturn]] void raise_timeout(std::string message, std::optional<bool> confirmed) {
    throw Timeout(std::move(message), confirmed, std::move(result_.stdout_bytes),
                  std::move(result_.stderr_bytes));
  }

  base::UniqueFd socket_;
  const std::string& secret_;
  const ExecPlan& plan_;
  CommandPipes pipes_;
  base::UniqueFd cancel_;
  std::optional<std::stop_callback<std::function<void()>>> on_stop_;
  std::optional<std::uint64_t> limit_;
  bool truncate_ = false;
  ExecResult result_;
  std::uint64_t total_ = 0;
  bool overflowed_ = false;
  bool kill_sent_ = false;
  bool cancelled_ = false;
  std::size_t stdin_done_ = 0;
};

protocol::Reply CommandStream::run() {
  const Clock::time_point hard_limit = plan_.deadline + kReplyGrace;
  Clock::time_point kill_limit = Clock::time_point::max();
  std::optional<protocol::Reply> reply;
  while (!reply) {
    struct pollfd polled[5];
    nfds_t count = 0;
    auto add = [&](int fd, short events) {
      polled[count] = {fd, events, 0};
      return count++;
    };
    const nfds_t socket_index = add(socket_.get(), POLLIN);
    const nfds_t cancel_index = cancel_ ? add(cancel_.get(), POLLIN) : kAbsent;
    const nfds_t out_index = pipes_.out_read ? add(pipes_.out_read.get(), POLLIN) : kAbsent;
    const nfds_t err_index = pipes_.err_read ? add(pipes_.err_read.get(), POLLIN) : kAbsent;
    const nfds_t in_index = pipes_.in_write ? add(pipes_.in_write.get(), POLLOUT) : kAbsent;
    const Clock::time_point wake = std::min(hard_limit, kill_limit);
    const int ready = ::poll(polled, count, milliseconds_until(wake));
    if (ready < 0 && errno != EINTR) throw BackendError("poll failed", base::errno_error("poll"));
    if (ready == 0 && Clock::now() >= wake) {
      // The init did not answer: we cannot know whether the command is still running.
      send_kill();
      raise_timeout(
          "the command did not finish and the sandbox's init did not answer; whether "
          "the command stopped is unknown",
          std::nullopt);
    }
    if (out_index != kAbsent && polled[out_index].revents != 0) {
      drain(pipes_.out_read, result_.stdout_bytes);
    }
    if (err_index != kAbsent && polled[err_index].revents != 0) {
      drain(pipes_.err_read, result_.stderr_bytes);
    }
    if (in_index != kAbsent && polled[in_index].revents != 0) feed_stdin();
    if (cancel_index != kAbsent && (polled[cancel_index].revents & POLLIN) != 0 && !cancelled_) {
      cancelled_ = true;
      send_kill();
    }
    if (kill_sent_ && kill_limit == Clock::time_point::max()) {
      kill_limit = Clock::now() + kReplyGrace;
    }
    if ((polled[socket_index].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      reply = receive_reply(socket_.get());
    }
  }
  // The command has ended: what it wrote is already in the pipes. Take it without waiting for
  // end of stream, which a detached descendant holding the pipe could postpone forever.
  if (pipes_.out_read) drain(pipes_.out_read, result_.stdout_bytes);
  if (pipes_.err_read) drain(pipes_.err_read, result_.stderr_bytes);
  return *reply;
}

// What the init's answer means for the caller: a result, or the error that names what happened.
ExecResult CommandStream::finish(const protocol::Reply& reply) {
  switch (reply.kind) {
    case protocol::ReplyKind::exited: {
      const protocol::ExitReport& report = reply.exit;
      if (cancelled_) raise_timeout("cancelled", kill_confirmed(report));
      if (overflowed_) throw ExecOutputLimitExceeded(*limit_, kill_confirmed(report));
      if ((report.flags & protocol::kTimedOut) != 0) {
        raise_timeout("the command did not finish before its deadline and was killed",
                      kill_confirmed(report));
      }
      const int status = report.wait_status;
      if (WIFSIGNALED(status)) {
        result_.term_signal = WTERMSIG(status);
        result_.exit_code = 128 + WTERMSIG(status);
      } else {
        result_.exit_code = WEXITSTATUS(status);
      }
      return std::move(result_);
    }
    case protocol::ReplyKind::queued_timeout:
      throw QueuedTimeout(
          "the deadline passed while the command waited for its turn in the sandbox; nothing ran");
    case protocol::ReplyKind::spawn_failed: {
      const int error = reply.failure.error_number;
      const std::string reason = base::errno_text(error);
      const std::string& directory = plan_.working_directory;
      switch (reply.failure.stage) {
        case protocol::SpawnStage::execute:
          result_.exit_code = error == ENOENT ? 127 : 126;
          result_.stderr_bytes =
              "airlock: cannot run '" + plan_.argv.front() + "': " + reason + "\n";
          return std::move(result_);
        case protocol::SpawnStage::working_directory:
          if (error == ENOENT) {
            throw NotFound("the working directory " + directory + " does not exist", directory);
          }
          if (error == ENOTDIR) {
            throw NotADirectory("the working directory " + directory + " is not a directory",
                                directory);
          }
          throw SystemError("cannot enter the working directory " + directory + ": " + reason,
                            error, directory);
        default:
          throw BackendError("the sandbox could not start the command",
                             "spawn stage " +
                                 std::to_string(static_cast<unsigned>(reply.failure.stage)) + ": " +
                                 reason,
                             std::error_code(error, std::generic_category()));
      }
    }
    case protocol::ReplyKind::error:
      throw BackendError("the sandbox refused the command", reply.message);
    default:
      throw BackendError("the sandbox's init answered something unexpected", "exec reply");
  }
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
    if (protocol::send_message(socket.get(),
                               protocol::encode_header(protocol::Op::ping, 0, secret_), nullptr,
                               0) != 0) {
      return false;
    }
    struct pollfd wait {
      socket.get(), POLLIN, 0
    };
    if (::poll(&wait, 1, 5000) != 1) return false;
    const protocol::Reply reply = receive_reply(socket.get());
    return reply.kind == protocol::ReplyKind::ok && reply.version == protocol::kVersion;
  } catch (...) {
    return false;
  }
}

std::vector<base::UniqueFd> ControlChannel::request_descriptors(protocol::Op op, std::size_t count,
                                                                const std::string& what) const {
  base::UniqueFd socket = connect();
  if (const int error =
          protocol::send_message(socket.get(), protocol::encode_header(op, 0, secret_), nullptr, 0);
      error != 0) {
    throw BackendError("the sandbox's init stopped answering",
                       base::SyscallError(error, "sendmsg"));
  }
  std::string bytes;
  std::vector<base::UniqueFd> fds;
  const long received = protocol::receive_message(socket.get(), bytes, fds);
  protocol::Reply reply;
  if (received <= 0 || !protocol::decode_reply(bytes, reply) ||
      reply.kind != protocol::ReplyKind::ok || fds.size() != count) {
    throw BackendError("the sandbox's init did not hand over its " + what,
                       reply.message.empty() ? what + " request" : reply.message);
  }
  return fds;
}

ControlChannel::Roots ControlChannel::fetch_roots() const {
  auto fds = request_descriptors(protocol::Op::root, 2, "root");
  return Roots{std::move(fds[0]), std::move(fds[1])};
}

ControlChannel::Namespaces ControlChannel::fetch_namespaces() const {
  auto fds = request_descriptors(protocol::Op::namespaces, 2, "namespaces");
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

  CommandPipes pipes = open_command_pipes(plan.feed_stdin);
  const std::string body = encode_checked(request);
  base::UniqueFd socket = connect();
  send_command(socket.get(), body, secret_, pipes);

  CommandStream stream(std::move(socket), secret_, plan, std::move(pipes));
  const protocol::Reply reply = stream.run();
  return stream.finish(reply);
}

}  // namespace airlock::linux_backend
