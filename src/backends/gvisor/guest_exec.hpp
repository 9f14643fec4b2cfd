// One command in a running container: `runsc exec` of the guest helper's `run`, with the
// command's stdout and stderr on separate pipes (never one file: gVisor garbles a shared one),
// its status on a third, and a control pipe on which we ask the helper to kill the command's
// whole tree or to signal its process group. Used by exec, run_code and every file-plane
// operation.
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
#include "backends/gvisor/runsc.hpp"

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
  // Run the argv directly (the file plane's helper subcommands), not under `run`: no status or
  // control descriptors, the exit code is runsc's. Timeouts then kill the runsc client only.
  bool direct = false;
  // Streaming: each chunk as it is read, under the same ceiling, instead of into the result.
  OutputCallback on_output;
  // Live stdin: polled and forwarded into the command's stdin until its end of file.
  int stdin_fd = -1;
  // Signals for the command's process group, sent on the control pipe (not with `direct`).
  std::shared_ptr<ExecControl> control;
};

// Runs `command` in container `id`. Returns the result, or throws:
//   Timeout (message "cancelled" for a stop request) with kill_confirmed — the deadline passed;
//   ExecOutputLimitExceeded — the ceiling was passed and `truncate` is false;
//   NotFound — the working directory does not exist in the guest;
//   BackendError — runsc could not run it (the container is gone, …).
ExecResult run_in_guest(const Runsc& runsc, const std::string& id, const GuestCommand& command);

}  // namespace airlock::gvisor_backend
