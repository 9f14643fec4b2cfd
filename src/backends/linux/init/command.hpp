// The child side of one command: everything between clone and execve. Runs in a fresh copy of
// the init's address space (the init is single-threaded, so this is safe), never returns.
#pragma once

#include <cstdint>

#include "backends/linux/protocol.hpp"
#include "backends/linux/spawn_config.hpp"

namespace airlock::linux_backend::init {

// What the child writes to its error pipe when a step fails before execve succeeds.
struct ChildFailure {
  std::uint32_t stage;
  std::int32_t error_number;
};

// Own session and process group; stdio from the host's pipes (stdin: the given descriptor or
// the guest's /dev/null; with kTerminal, a pty slave that becomes the controlling terminal);
// every other descriptor closed; rlimits; oom_score_adj 1000; the
// working directory; every capability dropped (bounding and ambient sets too, and the
// securebits that would hand uid 0 its capabilities back on execve locked); no_new_privs; the
// seccomp filter; then execve, searching the request's PATH for a bare name.
[[noreturn]] void run_command(const protocol::ExecRequest& request, int stdin_fd, int stdout_fd,
                              int stderr_fd, int error_pipe, const SpawnConfig& config,
                              int last_capability);

// The highest capability number this kernel knows (from /proc/sys/kernel/cap_last_cap).
int read_last_capability();

}  // namespace airlock::linux_backend::init
