// One command in a running container, over the sandbox's command channel (guest_channel.hpp):
// the keeper starts the guest helper's `run` for it (or, for the file plane, the helper's
// subcommand itself), and the connection carries its stdin, stdout and stderr as separate
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
#include "backends/gvisor/guest_channel.hpp"

namespace airlock::gvisor_backend {

struct GuestCommand {
  std::vector<std::string> argv;  // run inside the container
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
//   BackendError — the container is gone (before or while the command ran).
ExecResult run_in_guest(GuestChannel& channel, const GuestCommand& command);

}  // namespace airlock::gvisor_backend
