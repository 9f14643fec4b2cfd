#include "cli/exec_io.hpp"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <unistd.h>

#include <cstring>

#include "airlock/errors.hpp"
#include "cli/tokens.hpp"

namespace airlock::cli {
namespace {

sigset_t relayed_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int number : {SIGINT, SIGTERM, SIGHUP, SIGWINCH}) sigaddset(&set, number);
  return set;
}

void note(const std::string& text) {
  const std::string line = "airlock: " + text + "\n";
  write_fully(2, line);
}

}  // namespace

bool write_fully(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t wrote = ::write(fd, bytes.data(), bytes.size());
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd ready{fd, POLLOUT, 0};
      ::poll(&ready, 1, -1);
      continue;
    }
    if (wrote <= 0) return false;
    bytes.remove_prefix(static_cast<std::size_t>(wrote));
  }
  return true;
}

SignalRelay::SignalRelay(bool quiet) : quiet_(quiet), control_(std::make_shared<ExecControl>()) {
  ::signal(SIGPIPE, SIG_IGN);
  const sigset_t set = relayed_signals();
  if (const int failed = ::pthread_sigmask(SIG_BLOCK, &set, nullptr); failed != 0) {
    throw SystemError("cannot block the signals the CLI relays (pthread_sigmask)", failed);
  }
  // Relayed even when this process was started with one ignored (a background job of a script
  // ignores SIGINT), as docker's CLI does: what the operator sends reaches the command.
  for (int number : {SIGINT, SIGTERM, SIGHUP}) ::signal(number, SIG_DFL);
  signals_.reset(::signalfd(-1, &set, SFD_CLOEXEC));
  if (!signals_) throw SystemError("cannot read the signals the CLI relays (signalfd)", errno);
  wake_.reset(::eventfd(0, EFD_CLOEXEC));
  if (!wake_) throw SystemError("cannot make the signal relay's eventfd", errno);
  thread_ = std::thread([this] { loop(); });
}

SignalRelay::~SignalRelay() {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t ignored = ::write(wake_.get(), &one, sizeof one);
  if (thread_.joinable()) thread_.join();
}

void SignalRelay::watch_window(int tty) {
  tty_.store(tty);
}

void SignalRelay::set_abandon_note(std::string note) {
  const std::lock_guard lock(mutex_);
  abandon_note_ = std::move(note);
}

void SignalRelay::set_before_forced_exit(std::function<void()> hook) {
  const std::lock_guard lock(mutex_);
  before_forced_exit_ = std::move(hook);
}

void SignalRelay::loop() {
  for (;;) {
    pollfd ready[2] = {{signals_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (::poll(ready, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (ready[1].revents != 0) return;
    signalfd_siginfo info{};
    const ssize_t got = ::read(signals_.get(), &info, sizeof info);
    if (got != static_cast<ssize_t>(sizeof info)) continue;
    const int number = static_cast<int>(info.ssi_signo);
    if (number == SIGWINCH) {
      if (const int tty = tty_.load(); tty >= 0) {
        if (auto size = terminal_size(tty)) control_->resize(*size);
      }
      continue;
    }
    on_terminating(number);
  }
}

void SignalRelay::on_terminating(int number) {
  ++count_;
  if (count_ == 1 && stop_on_first_.load()) {
    // Nothing can pass the signal on: the first one stops the command, as a second would.
    first_.store(number);
    count_ = 2;
    stop_.request_stop();
    if (!quiet_) {
      note(signal_name(number) +
           ": this backend cannot pass signals on; stopping the command (again to leave at once)");
    }
    return;
  }
  const std::string name = signal_name(number);
  if (count_ == 1) {
    first_.store(number);
    control_->signal(number);
    if (!quiet_) note(name + ": passed to the command (again to force it to stop)");
    return;
  }
  if (count_ == 2) {
    stop_.request_stop();
    if (!quiet_) note(name + ": stopping the command (again to leave at once)");
    return;
  }
  std::function<void()> hook;
  std::string abandon;
  {
    const std::lock_guard lock(mutex_);
    hook = before_forced_exit_;
    abandon = abandon_note_;
  }
  if (hook) hook();
  if (!abandon.empty()) note(abandon);
  ::_exit(128 + first_.load());
}

ExecResult exec_relayed(Sandbox& sandbox, const Command& command, ExecOptions options,
                        SignalRelay& relay) {
  if (!options.stop.stop_possible()) options.stop = relay.stop_token();
  if (options.control) return sandbox.exec(command, options);
  options.control = relay.control();
  try {
    return sandbox.exec(command, options);
  } catch (const NotSupported&) {
    // Refused before anything ran (the backends check the options first). Whatever else it
    // refuses (a terminal, say) is refused again below, by the same words.
    relay.stop_on_first_signal();
    options.control.reset();
    return sandbox.exec(command, options);
  }
}

std::optional<WindowSize> terminal_size(int fd) {
  winsize size{};
  if (fd < 0 || ::ioctl(fd, TIOCGWINSZ, &size) != 0 || size.ws_row == 0 || size.ws_col == 0) {
    return std::nullopt;
  }
  return WindowSize{size.ws_row, size.ws_col};
}

RawTerminal::RawTerminal(int fd) {
  if (!::isatty(fd) || ::tcgetattr(fd, &saved_) != 0) return;
  termios raw = saved_;
  ::cfmakeraw(&raw);
  if (::tcsetattr(fd, TCSADRAIN, &raw) != 0) {
    throw SystemError("cannot put the local terminal in raw mode (tcsetattr)", errno);
  }
  fd_ = fd;
  active_ = true;
}

void RawTerminal::restore() noexcept {
  if (!active_.exchange(false)) return;
  ::tcsetattr(fd_, TCSADRAIN, &saved_);
}

OutputCallback OutputRelay::callback() {
  return [this](OutputStream stream, std::string_view bytes) {
    const int index = stream == OutputStream::stdout_stream ? 0 : 1;
    if (closed_[index]) return;
    if (!write_fully(index + 1, bytes)) closed_[index] = true;
  };
}

}  // namespace airlock::cli
