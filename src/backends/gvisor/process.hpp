// Host-side processes for the gvisor backend: owned descriptors, spawning with a chosen set of
// descriptors (and nothing else) in the child, and running a short runsc call to completion.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "base/unique_fd.hpp"

namespace airlock::gvisor_backend {

struct Pipe {
  base::UniqueFd read;
  base::UniqueFd write;
  static Pipe make();  // both ends O_CLOEXEC; throws BackendError
};

// What the child gets: stdin/stdout/stderr (-1: /dev/null) and `extra` as descriptors 3, 4, …
// in order. Nothing else crosses, whatever the parent holds without O_CLOEXEC.
struct SpawnRequest {
  std::vector<std::string> argv;
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  std::vector<int> extra;
};
// Throws BackendError naming argv[0] when the spawn fails.
pid_t spawn_process(const SpawnRequest& request);

// Waits for `pid` (EINTR retried). Returns the exit code, or 128 + signal.
int wait_process(pid_t pid);
// waitpid without blocking: the exit code (as wait_process) or -1 while it runs.
int poll_process(pid_t pid);

struct Completed {
  int exit_code = -1;
  std::string stdout_text;
  std::string stderr_text;
  bool timed_out = false;  // killed at the deadline; exit_code is then the signal's
};
// Runs argv to completion with both streams captured (each bounded to `max_output` bytes;
// further bytes are drained and dropped) and stdin fed from `input`. Past `timeout` the child
// is SIGKILLed and reaped.
Completed run_to_completion(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                            const std::string& input = {}, std::size_t max_output = 1 << 20);

}  // namespace airlock::gvisor_backend
