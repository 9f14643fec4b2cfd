// What a foreground command in the CLI needs around `Sandbox::exec`: the signals an operator
// sends relayed to the guest, output written as it arrives, and the local terminal in raw mode
// while the guest owns a pseudo-terminal.
#pragma once

#include <termios.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>

#include "airlock/sandbox.hpp"
#include "base/unique_fd.hpp"

namespace airlock::cli {

// Relays SIGINT, SIGTERM and SIGHUP to a running command, and SIGWINCH as a terminal resize.
//
// Made on the main thread before anything starts a thread: it blocks those signals there, so
// every thread started later (the router's, a backend's) inherits the block and the signals
// reach only the relay's own thread, which reads them from a signalfd. They stay blocked for
// the rest of the process — the CLI exits once the command is over, and a signal arriving
// after the relay has stopped must not kill it before its sandbox is disposed.
//
//   first terminating signal   `control().signal(N)`: the command is asked to end as the
//                              operator asked; `received()` is N from then on
//   second                     `stop_token()` is requested: the backend kills the command's
//                              process group and `exec` raises Timeout ("cancelled")
//   third                      the terminal is restored and the process exits 128+N at once,
//                              printing `abandon_note` (what is left behind and how to remove it)
//
// SIGPIPE is ignored too: a closed stdout ends the output, never the process (its sandbox
// would be left running).
class SignalRelay {
 public:
  explicit SignalRelay(bool quiet);
  ~SignalRelay();
  SignalRelay(const SignalRelay&) = delete;
  SignalRelay& operator=(const SignalRelay&) = delete;

  // What every exec of the command gets as `ExecOptions::control` and `stop`.
  const std::shared_ptr<ExecControl>& control() const noexcept { return control_; }
  std::stop_token stop_token() const noexcept { return stop_.get_token(); }

  // The first terminating signal received, or 0; the CLI then exits 128 + it.
  int received() const noexcept { return first_.load(); }
  int exit_code() const noexcept { return 128 + received(); }

  // For a backend that cannot pass signals on: from now on the first terminating signal stops
  // the command (its process group is killed, as the second would) instead of forwarding it.
  void stop_on_first_signal() noexcept { stop_on_first_.store(true); }

  // SIGWINCH resizes the command's terminal to the size of `tty` (a local terminal's fd).
  void watch_window(int tty);
  // Printed before a forced exit (third signal).
  void set_abandon_note(std::string note);
  // Run before a forced exit (restores the local terminal).
  void set_before_forced_exit(std::function<void()> hook);

 private:
  void loop();
  void on_terminating(int number);

  bool quiet_;
  std::shared_ptr<ExecControl> control_;
  std::stop_source stop_;
  std::atomic<int> first_{0};
  std::atomic<int> tty_{-1};
  std::atomic<bool> stop_on_first_{false};
  int count_ = 0;
  std::mutex mutex_;  // abandon_note_, before_forced_exit_
  std::string abandon_note_;
  std::function<void()> before_forced_exit_;
  base::UniqueFd signals_;
  base::UniqueFd wake_;
  std::thread thread_;
};

// `sandbox.exec(command, options)` with the relay's control and stop attached (unless the caller
// set its own). A backend that refuses signal forwarding up front (NotSupported, before anything
// ran) is asked again without it, and the relay then stops the command on the first signal.
ExecResult exec_relayed(Sandbox& sandbox, const Command& command, ExecOptions options,
                        SignalRelay& relay);

// The local terminal's size (rows and columns of `fd`), or nullopt when `fd` is no terminal.
std::optional<WindowSize> terminal_size(int fd);

// The local terminal in raw mode (no echo, no line editing, ^C a byte for the guest) for as long
// as it lives; the saved modes are restored on destruction and by `restore()` (idempotent, for
// a forced exit). A no-op when `fd` is not a terminal.
class RawTerminal {
 public:
  explicit RawTerminal(int fd);
  ~RawTerminal() { restore(); }
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;
  void restore() noexcept;

 private:
  int fd_ = -1;
  std::atomic<bool> active_{false};  // restore() may race in from the signal relay's thread
  termios saved_{};
};

// Writes a command's output as it arrives to this process's stdout and stderr, unbuffered.
// A closed reader (EPIPE) ends that stream's writing quietly; the command runs on.
class OutputRelay {
 public:
  OutputCallback callback();

 private:
  bool closed_[2] = {false, false};
};

// Every byte of `bytes` to `fd`, retrying on EINTR and waiting out EAGAIN; false on EPIPE or
// another write error.
bool write_fully(int fd, std::string_view bytes);

}  // namespace airlock::cli
