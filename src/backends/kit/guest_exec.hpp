// One command in a running guest, over the sandbox's command channel (guest/channel_frames.hpp):
// the guest's agent starts it as a session leader (or, for the file plane, the helper's
// subcommand as it is), and the connection carries its stdin, stdout and stderr as separate
// streams, its status, and our requests to signal its process group or kill its whole tree.
// Used by exec, run_code and every file-plane operation.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "airlock/records.hpp"
#include "airlock/sandbox.hpp"
#include "base/unique_fd.hpp"

namespace airlock::backend_kit {

// Where a command's connection comes from: a backend's transport to the agent in its guest.
class CommandChannel {
 public:
  virtual ~CommandChannel() = default;
  // A connection ready for one request. An empty descriptor when `deadline` passed or `stop`
  // was requested first. Throws BackendError once the sandbox is gone.
  virtual base::UniqueFd take(std::chrono::steady_clock::time_point deadline,
                              std::stop_token stop) = 0;
};

struct GuestCommand {
  std::vector<std::string> argv;  // run inside the guest
  std::string working_directory;  // empty: "/"
  std::vector<std::pair<std::string, std::string>> environment;
  std::string stdin_bytes;
  bool feed_stdin = false;  // false: stdin is /dev/null
  std::chrono::steady_clock::time_point deadline;
  std::uint64_t max_output_bytes = 0;  // combined stdout + stderr
  bool truncate = false;               // past the ceiling: drop (true) or refuse (false)
  std::stop_token stop;
  // Run the argv as it is (the file plane's helper subcommands): no session, no status line
  // nor process group; a timeout kills that one process.
  bool direct = false;
  // Streaming: each chunk as it is read, under the same ceiling, instead of into the result.
  OutputCallback on_output;
  // Live stdin: polled and forwarded into the command's stdin until its end of file.
  int stdin_fd = -1;
  // Signals for the command's process group, sent on the control pipe (not with `direct`).
  std::shared_ptr<ExecControl> control;
};

// Runs `command` in the sandbox `channel` reaches. Returns the result, or throws:
//   Timeout (message "cancelled" for a stop request) with kill_confirmed — the deadline passed;
//   ExecOutputLimitExceeded — the ceiling was passed and `truncate` is false;
//   NotFound — the working directory does not exist in the guest;
//   BackendError — the sandbox is gone (before or while the command ran).
ExecResult run_in_guest(CommandChannel& channel, const GuestCommand& command);

}  // namespace airlock::backend_kit
