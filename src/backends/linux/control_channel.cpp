#include "backends/linux/control_channel.hpp"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cstring>
#include <functional>

#include "airlock/errors.hpp"
#include "backends/linux/protocol.hpp"
#include "base/openat2.hpp"
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

// A signal the host forwards just as the command ends can still sit unread in the init's queue
// when the init closes the connection after its answer; the kernel then reports ECONNRESET once,
// ahead of the answer already queued here. The error is cleared by being reported, so one more
// receive takes the answer.
protocol::Reply receive_reply(int socket) {
  std::string bytes;
  std::vector<base::UniqueFd> fds;
  long received = protocol::receive_message(socket, bytes, fds);
  if (received == -ECONNRESET) received = protocol::receive_message(socket, bytes, fds);
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
// write ends travel to the init with the request. With a terminal, out_read and in_write are
// the pty's master (and `master` a third handle on it, for resizes), and the slave travels as
// all three of the command's streams; there is no separate stderr.
struct CommandPipes {
  base::UniqueFd out_read, out_write;
  base::UniqueFd err_read, err_write;
  base::UniqueFd in_read, in_write;
  base::UniqueFd master;
};

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

void set_window_size(int master, WindowSize size) {
  struct winsize cells {};
  cells.ws_row = size.rows;
  cells.ws_col = size.columns;
  ::ioctl(master, TIOCSWINSZ, &cells);
}

base::UniqueFd duplicate(int fd, const char* what) {
  base::UniqueFd copy(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
  if (!copy)
    throw BackendError("the command's terminal could not be made", base::errno_error("dup", what));
  return copy;
}

// A pty pair from the sandbox's own devpts instance, opened through its root (`root`, an O_PATH
// descriptor of the guest's /): so the guest's ttyname() finds its terminal under its /dev/pts,
// and the sandbox's pty ceiling (max_ptys) counts it. The walk never follows a link the guest
// could plant, and what it reaches must be a devpts ptmx — nothing else the guest could mount
// there is opened as one. The slave is opened through the master (TIOCGPTPEER), never by a
// path; the guest holds only the slave, of its own pty.
void open_terminal(CommandPipes& pipes, int root, WindowSize size) {
  const auto refuse = [](const auto& detail) {
    return BackendError("the command's terminal could not be made", detail);
  };
  base::Opened opened =
      base::openat2(root, "dev/pts/ptmx", O_RDWR | O_NOCTTY,
                    RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
  if (!opened) throw refuse(base::SyscallError(opened.error, "openat2", "/dev/pts/ptmx"));
  base::UniqueFd master = std::move(opened.fd);
  struct statfs filesystem {};
  struct stat node {};
  if (::fstatfs(master.get(), &filesystem) != 0 || filesystem.f_type != DEVPTS_SUPER_MAGIC ||
      ::fstat(master.get(), &node) != 0 || !S_ISCHR(node.st_mode) ||
      node.st_rdev != ::makedev(5, 2)) {
    throw refuse(std::string("the guest's /dev/pts/ptmx is not a devpts multiplexer"));
  }
  if (::unlockpt(master.get()) != 0) {
    throw refuse(base::errno_error("unlockpt", "/dev/pts/ptmx"));
  }
  base::UniqueFd slave(::ioctl(master.get(), TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!slave) throw refuse(base::errno_error("ioctl TIOCGPTPEER", "/dev/pts/ptmx"));
  set_window_size(master.get(), size);
  pipes.err_write = duplicate(slave.get(), "pty slave");
  pipes.in_read = duplicate(slave.get(), "pty slave");
  pipes.out_write = std::move(slave);
  pipes.out_read = duplicate(master.get(), "pty master");
  pipes.in_write = duplicate(master.get(), "pty master");
  pipes.master = std::move(master);
}

void open_pipe(base::UniqueFd& read_end, base::UniqueFd& write_end) {
  int ends[2];
  if (::pipe2(ends, O_CLOEXEC) != 0) throw BackendError("pipe failed", base::errno_error("pipe2"));
  read_end.reset(ends[0]);
  write_end.reset(ends[1]);
}

CommandPipes open_command_pipes(bool feed_stdin, const std::optional<WindowSize>& terminal,
                                int root) {
  CommandPipes pipes;
  if (terminal) {
    open_terminal(pipes, root, *terminal);
    return pipes;
  }
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
  if (pipes.err_read) set_nonblocking(pipes.err_read.get());
  if (pipes.in_write) set_nonblocking(pipes.in_write.get());
}

std::optional<bool> kill_confirmed(const protocol::ExitReport& report) {
  if ((report.flags & protocol::kKillChecked) == 0) return std::nullopt;
  return (report.flags & protocol::kKillConfirmed) != 0;
}

// One command in flight: its output under the ceiling (collected, or handed to the caller's
// callback chunk by chunk), its stdin (bytes, or the caller's descriptor forwarded as it
// becomes readable), a caller's cancellation, signals and resizes, and the init's answer, polled
// together until the init reports the end (or stops answering). Nothing here blocks: stdin
// waits for POLLOUT, and the caller's descriptor is read only when poll says it is readable.
class CommandStream {
 public:
  CommandStream(base::UniqueFd socket, const std::string& secret, const ExecPlan& plan,
                CommandPipes pipes)
      : socket_(std::move(socket)),
        secret_(secret),
        plan_(plan),
        pipes_(std::move(pipes)),
        stdin_pending_(plan.stdin_bytes),
        caller_stdin_open_(plan.stdin_fd >= 0),
        // Only a terminal that was given input is told where the input ends.
        end_of_input_typed_(!plan.terminal || (plan.stdin_bytes.empty() && plan.stdin_fd < 0)) {
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
  void send_signal(int number) {
    const std::string message =
        protocol::encode_header(protocol::Op::signal, 0, secret_) + protocol::encode_signal(number);
    // A send that fails means the init is gone; its missing answer says so below.
    (void)protocol::send_message(socket_.get(), message, nullptr, 0);
  }
  void apply_control() {
    ExecControl::Pending pending = plan_.control->take();
    for (const int number : pending.signals) {
      if (forwardable_signal(number)) send_signal(number);
    }
    if (pending.size && pipes_.master) set_window_size(pipes_.master.get(), *pending.size);
  }
  // What arrived goes to the callback or into the result, under the ceiling; past it, refuse
  // (kill, drop) or truncate (discard).
  void take(OutputStream stream, std::string& into, const char* data, std::size_t size) {
    if (overflowed_ && !truncate_) return;
    if (limit_ && total_ + size > *limit_) {
      const std::uint64_t room = *limit_ - total_;
      if (truncate_) {
        deliver(stream, into, data, static_cast<std::size_t>(room));
        total_ = *limit_;
        result_.truncated = true;
        return;
      }
      overflowed_ = true;
      send_kill();
      return;
    }
    deliver(stream, into, data, size);
    total_ += size;
  }
  void deliver(OutputStream stream, std::string& into, const char* data, std::size_t size) {
    if (size == 0) return;
    if (plan_.on_output) {
      plan_.on_output(stream, std::string_view(data, size));
    } else {
      into.append(data, size);
    }
  }
  // Reads until the pipe is empty. End of stream, or EIO from a terminal whose every slave
  // handle is closed, ends the stream.
  void drain(OutputStream stream, base::UniqueFd& pipe, std::string& into) {
    char chunk[65536];
    for (;;) {
      const ssize_t got = ::read(pipe.get(), chunk, sizeof chunk);
      if (got > 0) {
        take(stream, into, chunk, static_cast<std::size_t>(got));
        continue;
      }
      if (got == 0 || (errno != EAGAIN && errno != EINTR)) pipe.reset();
      return;
    }
  }
  // Writes what is pending into the command's stdin until it would block. When the input has
  // ended (the bytes are written, the caller's descriptor reached end of file), the command's
  // stdin is closed — or, on a terminal, the end-of-file character is typed once.
  void feed_stdin() {
    while (pipes_.in_write) {
      while (!stdin_pending_.empty()) {
        const ssize_t sent =
            write_quietly(pipes_.in_write.get(), stdin_pending_.data(), stdin_pending_.size());
        if (sent > 0) {
          stdin_pending_.erase(0, static_cast<std::size_t>(sent));
          continue;
        }
        if (sent < 0 && (errno == EAGAIN || errno == EINTR)) return;
        // EPIPE (the command closed its stdin) or EIO (its terminal hung up): that is its call,
        // and nothing more of the caller's input goes anywhere.
        stdin_pending_.clear();
        caller_stdin_open_ = false;
        end_of_input_typed_ = true;
        break;
      }
      if (caller_stdin_open_) return;
      if (!end_of_input_typed_) {
        end_of_input_typed_ = true;
        struct termios modes {};
        const bool known = ::tcgetattr(pipes_.in_write.get(), &modes) == 0;
        stdin_pending_.assign(
            1, known && modes.c_cc[VEOF] != 0 ? static_cast<char>(modes.c_cc[VEOF]) : '\x04');
        continue;
      }
      pipes_.in_write.reset();
    }
  }
  // The caller's descriptor is readable: one read (it cannot block after POLLIN), then on.
  void read_caller_stdin() {
    char chunk[65536];
    const ssize_t got = ::read(plan_.stdin_fd, chunk, sizeof chunk);
    if (got > 0) {
      stdin_pending_.append(chunk, static_cast<std::size_t>(got));
    } else if (got < 0 && (errno == EAGAIN || errno == EINTR)) {
      return;
    } else {
      caller_stdin_open_ = false;  // end of file, or a descriptor that cannot be read
    }
    feed_stdin();
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
  std::string stdin_pending_;
  bool caller_stdin_open_ = false;
  bool end_of_input_typed_ = true;
};

protocol::Reply CommandStream::run() {
  const Clock::time_point hard_limit = plan_.deadline + kReplyGrace;
  Clock::time_point kill_limit = Clock::time_point::max();
  std::optional<protocol::Reply> reply;
  feed_stdin();
  while (!reply) {
    struct pollfd polled[7];
    nfds_t count = 0;
    auto add = [&](int fd, short events) {
      polled[count] = {fd, events, 0};
      return count++;
    };
    const nfds_t socket_index = add(socket_.get(), POLLIN);
    const nfds_t cancel_index = cancel_ ? add(cancel_.get(), POLLIN) : kAbsent;
    const nfds_t out_index = pipes_.out_read ? add(pipes_.out_read.get(), POLLIN) : kAbsent;
    const nfds_t err_index = pipes_.err_read ? add(pipes_.err_read.get(), POLLIN) : kAbsent;
    const nfds_t in_index =
        pipes_.in_write && !stdin_pending_.empty() ? add(pipes_.in_write.get(), POLLOUT) : kAbsent;
    const nfds_t caller_index = pipes_.in_write && caller_stdin_open_ && stdin_pending_.empty()
                                    ? add(plan_.stdin_fd, POLLIN)
                                    : kAbsent;
    const nfds_t control_index = plan_.control ? add(plan_.control->wake_fd(), POLLIN) : kAbsent;
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
      drain(OutputStream::stdout_stream, pipes_.out_read, result_.stdout_bytes);
    }
    if (err_index != kAbsent && polled[err_index].revents != 0) {
      drain(OutputStream::stderr_stream, pipes_.err_read, result_.stderr_bytes);
    }
    if (in_index != kAbsent && polled[in_index].revents != 0) feed_stdin();
    if (caller_index != kAbsent && polled[caller_index].revents != 0) read_caller_stdin();
    if (control_index != kAbsent && (polled[control_index].revents & POLLIN) != 0) {
      apply_control();
    }
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
  if (pipes_.out_read) drain(OutputStream::stdout_stream, pipes_.out_read, result_.stdout_bytes);
  if (pipes_.err_read) drain(OutputStream::stderr_stream, pipes_.err_read, result_.stderr_bytes);
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

base::UniqueFd ControlChannel::fetch_storage() const {
  auto fds = request_descriptors(protocol::Op::storage, 1, "storage");
  return std::move(fds[0]);
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
  const bool with_stdin = plan.feed_stdin || plan.stdin_fd >= 0 || plan.terminal.has_value();
  if (with_stdin) request.flags |= protocol::kStdinPipe;
  if (plan.terminal) request.flags |= protocol::kTerminal;

  CommandPipes pipes = open_command_pipes(with_stdin, plan.terminal, plan.terminal_root);
  const std::string body = encode_checked(request);
  base::UniqueFd socket = connect();
  send_command(socket.get(), body, secret_, pipes);

  CommandStream stream(std::move(socket), secret_, plan, std::move(pipes));
  const protocol::Reply reply = stream.run();
  return stream.finish(reply);
}

}  // namespace airlock::linux_backend
