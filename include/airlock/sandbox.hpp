// The sandbox handle: what a workload gets, gated by what its backend declares.
//
// Every path-taking method takes the guest `working_directory` the path is relative to, and
// confines to it:
//   - a path is POSIX-shaped; an absolute path is accepted only if it resolves inside;
//   - `..` is judged after lexical normalisation; a backslash anywhere is refused;
//   - a link in *any* parent — including the working directory's own ancestors, walked from the
//     filesystem root — is refused as a `ConfinementError`, never followed;
//   - a non-directory parent that is not a link is a `NotADirectory`.
// Refusals are `ConfinementError` (an escape), never `NotFound`: a caller can tell an attack
// from an absence.
//
// Thread safety: a Sandbox may be used from many threads at once. Backends serialise what must
// be serialised; a call that waits for its turn past its deadline raises `QueuedTimeout`.
#pragma once

#include <chrono>
#include <csignal>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "airlock/records.hpp"

namespace airlock {

using Milliseconds = std::chrono::milliseconds;

// A command: either an argv that reaches execve unchanged (never through a shell), or a shell
// line run as `sh -c <line>`.
class Command {
 public:
  static Command argv(std::vector<std::string> arguments);
  static Command shell(std::string line);

  bool is_shell() const noexcept { return shell_; }
  // The argv that runs: the arguments as given, or {"sh", "-c", line}.
  const std::vector<std::string>& arguments() const noexcept { return arguments_; }
  // The shell line (empty for an argv command).
  const std::string& line() const noexcept { return line_; }
  // One line for logs: the shell line, or the argv POSIX-quoted.
  std::string display() const;

 private:
  Command() = default;
  std::vector<std::string> arguments_;
  std::string line_;
  bool shell_ = false;
};

// What to do when a command's output passes `max_output_bytes`.
enum class OutputOverflow : std::uint8_t {
  refuse,    // kill the command's process group; raise ExecOutputLimitExceeded; return nothing
  truncate,  // keep the first max_output_bytes, discard the rest, let the command finish;
             // the result says `truncated`
};

// Which of a command's two output streams a chunk came from.
enum class OutputStream : std::uint8_t { stdout_stream, stderr_stream };

// Receives a command's output as it arrives, on the thread that called `exec`, one chunk at a
// time and in arrival order per stream. The ceiling (`max_output_bytes`) counts what is
// delivered; with `truncate`, delivery stops at the ceiling.
using OutputCallback = std::function<void(OutputStream stream, std::string_view bytes)>;

// A terminal's size in character cells.
struct WindowSize {
  std::uint16_t rows = 24;
  std::uint16_t columns = 80;
};

// The signals a caller may forward to a running command: SIGHUP, SIGINT, SIGQUIT, SIGKILL,
// SIGUSR1, SIGUSR2, SIGALRM, SIGTERM, SIGCONT, SIGTSTP, SIGWINCH. Not SIGSTOP (a command stopped
// beyond its own reach holds its sandbox's slot until its deadline), nor the signals the kernel
// raises for a fault (SIGSEGV, SIGBUS, …), which would only forge a crash.
constexpr bool forwardable_signal(int number) noexcept {
  switch (number) {
    case SIGHUP:
    case SIGINT:
    case SIGQUIT:
    case SIGKILL:
    case SIGUSR1:
    case SIGUSR2:
    case SIGALRM:
    case SIGTERM:
    case SIGCONT:
    case SIGTSTP:
    case SIGWINCH:
      return true;
    default:
      return false;
  }
}

// A running command's controls, for a caller on another thread (a signal handler's thread, a
// SIGWINCH watcher): forward a signal to the command's process group, or resize its terminal.
// Requests queue and are delivered in order by the backend's exec loop, which waits on
// `wake_fd()` and calls `take()`. Shared by pointer so a request made as the command ends
// stays safe. Thread-safe.
class ExecControl {
 public:
  ExecControl();
  ~ExecControl();
  ExecControl(const ExecControl&) = delete;
  ExecControl& operator=(const ExecControl&) = delete;

  // Queue `number` for the command's process group. InvalidArgument unless
  // `forwardable_signal(number)`.
  void signal(int number);
  // Queue a new terminal size (meaningful for a command run with `ExecOptions::terminal`).
  void resize(WindowSize size);

  // For backends: a descriptor readable while requests are pending, and the requests.
  int wake_fd() const noexcept;
  struct Pending {
    std::vector<int> signals;
    std::optional<WindowSize> size;  // the latest size asked for, if any
  };
  Pending take();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

struct ExecOptions {
  std::string working_directory;  // guest-native absolute path; the caller makes sure it exists
  Milliseconds timeout{60'000};   // wall clock from the call, including any time spent queued
  // Combined ceiling on stdout + stderr, enforced as the bytes stream — never after buffering.
  std::optional<std::uint64_t> max_output_bytes;
  OutputOverflow overflow = OutputOverflow::refuse;
  // Bytes fed to the command's stdin (then closed). Empty (and no `stdin_fd`): stdin is
  // /dev/null.
  std::string stdin_bytes;
  // Live stdin: a descriptor of the caller's (a pipe, a terminal) read while the command runs
  // and forwarded until its end of file, when the command's stdin is closed. The caller keeps
  // ownership. Exclusive with `stdin_bytes` (InvalidArgument when both are given).
  int stdin_fd = -1;
  // Streaming: when set, output is handed here as it arrives instead of being collected, and the
  // result's (and a Timeout's) stdout/stderr bytes stay empty. A backend that cannot stream hands
  // everything over in one piece per stream when the command ends, before `exec` returns.
  OutputCallback on_output;
  // A terminal: the command gets a pseudo-terminal of this size as its stdin, stdout, stderr and
  // controlling terminal, in a session of its own, so the terminal's line discipline turns ^C
  // into SIGINT for it. Its output arrives as stdout only. `NotSupported` from a backend that
  // cannot give one (it says so before anything runs).
  std::optional<WindowSize> terminal;
  // Signals and resizes while the command runs (see ExecControl). Null: none.
  std::shared_ptr<ExecControl> control;
  // Extra environment, added to the guest's default environment.
  std::vector<std::pair<std::string, std::string>> environment;
  // Cancellation: when requested, the command's process group is killed and the call raises
  // `Timeout` with the message "cancelled".
  std::stop_token stop;
};

// For backends. Refuses (InvalidArgument) options that contradict each other: `stdin_fd` with
// `stdin_bytes`, a negative timeout.
void check_exec_options(const ExecOptions& options);
// For a backend that collects before it answers: hands the collected bytes to
// `options.on_output` (stdout first) when it is set, and empties the result's bytes. A no-op
// without a callback.
void deliver_collected_output(ExecResult& result, const ExecOptions& options);

class Sandbox {
 public:
  virtual ~Sandbox() = default;
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  // Unique per live instance: two acquires that reach the same sandbox report the same id, and
  // a sandbox created after a dispose reports a new one.
  virtual std::string instance_id() const = 0;
  virtual const SandboxKey& key() const = 0;
  virtual const std::string& kind() const = 0;

  // Write `content` (bytes, verbatim) at `path`, creating parents and replacing what was there.
  // Refuses (ConfinementError): outside the working directory; through a linked parent; a final
  // component that is a link (never followed); the working directory itself.
  virtual void write_file(std::string_view path, std::string_view content,
                          std::string_view working_directory) = 0;

  // Run `command`. A `Timeout` means exactly that the caller's timeout expired (or `stop` was
  // requested); the command's whole process group is killed, and the error says whether the
  // kill was confirmed. With `max_output_bytes` set, see `OutputOverflow`.
  virtual ExecResult exec(const Command& command, const ExecOptions& options) = 0;

  // `exec` with an output ceiling that refuses: the seeds' bounded exec, and the only exec an
  // agent-written command should reach.
  ExecResult exec_bounded(const Command& command, std::string_view working_directory,
                          Milliseconds timeout, std::uint64_t max_output_bytes);

  // Run `code` with the guest's python3 in the spec's work dir. `timeout` is wall clock from the
  // call: expiry while queued behind another call raises `QueuedTimeout` (retry unchanged);
  // expiry while running raises `Timeout` (make the program smaller). `NotSupported` unless the
  // backend declares `run_code`.
  virtual ExecResult run_code(std::string_view code, Milliseconds timeout) = 0;

  // Describe `path` like lstat: a link is reported as `symlink` (size unset), never followed.
  // nullopt when nothing is there. Parents are walked and refused as above.
  virtual std::optional<SandboxEntry> stat_file(std::string_view path,
                                                std::string_view working_directory) = 0;

  // Read a regular file. A link is refused (SystemError) whether or not its target is legitimate;
  // other non-regular entries raise SystemError; a missing file raises NotFound; a directory
  // IsADirectory. `max_bytes` is a refusal, never a truncation: a larger file raises
  // `TransferCapExceeded` without its body being read.
  virtual std::string read_file(std::string_view path, std::string_view working_directory,
                                std::uint64_t max_bytes) = 0;

  // The direct children of `path` (one level), links listed as links, paths relative to the
  // working directory. `path` itself is walked too. `NotSupported` unless `files_list`.
  virtual std::vector<SandboxEntry> list_dir(std::string_view path,
                                             std::string_view working_directory) = 0;

  // Remove `path`. A missing path is success (cleanup runs in `finally`). A link is removed,
  // never followed — also inside a recursive removal. A directory, even an empty one, needs
  // `recursive`. Refuses (ConfinementError) the working directory itself. `NotSupported` unless
  // `files_delete`.
  virtual void remove(std::string_view path, std::string_view working_directory,
                      bool recursive) = 0;

  // A directory shared between host and guest for unix sockets only — the host creates a
  // listening socket under `host_directory`, a guest program connects to it under
  // `guest_directory` — or nullopt when the backend cannot offer one. The directory is read-only
  // inside the guest (connecting to a socket needs no write access to its directory), and is
  // never used to move files.
  struct SocketChannel {
    std::string host_directory;
    std::string guest_directory;
  };
  virtual std::optional<SocketChannel> socket_channel() { return std::nullopt; }

  // Save this sandbox's state (SnapshotRecord): what it holds is its backend's
  // `snapshot_content()`. The sandbox is quiesced while its state is captured — frozen, or
  // stopped — and runs on unchanged afterwards; a command in flight is refused rather than cut
  // (BackendError: run it as an exclusive call, as SandboxRouter::snapshot does). NotSupported
  // from a backend that takes no snapshots.
  virtual SnapshotRecord snapshot();

  // Guest directories holding unix sockets the backend itself serves the guest, besides
  // socket_channel()'s: the gvisor backend's command channel, say. The isolation suite lets the
  // guest reach sockets there and nowhere else; each backend proves its own channel harmless.
  virtual std::vector<std::string> backend_socket_directories() const { return {}; }

 protected:
  Sandbox() = default;
};

}  // namespace airlock
