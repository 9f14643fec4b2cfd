// `run`: the wrapper every exec goes through (see guest_protocol.hpp), and `keeper`, the PID 1
// that reaps what the wrapper leaves behind. `shepherd` is the host-side subreaper of a
// container's runsc processes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace airlock::gvisor_guest {

// Runs `argv` in `cwd` as the leader of a new session. Returns the helper's exit code.
int run_command(const std::string& cwd, const std::vector<std::string>& argv);

// PID 1: makes `workdir` (when not empty), optionally bridges 127.0.0.1:`bridge_port` to the
// unix socket at `bridge_socket`, and reaps forever.
int keep(const std::string& workdir, const std::string& bridge_socket, int bridge_port);

// Host side: detaches, becomes a child subreaper, (with a storage directory) enters a mount
// namespace of its own and mounts a tmpfs of `storage_bytes` there, runs `argv` (runsc run
// --detach …), writes "create <exit code>\n" to `status_fd`, then reaps until no descendant is
// left.
int shepherd(int status_fd, const std::string& storage_directory, std::uint64_t storage_bytes,
             const std::vector<std::string>& argv);

}  // namespace airlock::gvisor_guest
