// `keeper`, the PID 1 that reaps what commands leave behind, and `shepherd`, the host-side
// subreaper of a container's runsc processes.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "backends/kit/guest/process_tree.hpp"

namespace airlock::gvisor_guest {

// descendants_of, kill_tree, the device filter and enter_directory are the kit's
// (backends/kit/guest/process_tree.hpp).
using namespace guest_kit;

// PID 1: makes `workdir` (when not empty), optionally bridges 127.0.0.1:`bridge_port` to the
// unix socket at `bridge_socket`, keeps connections to the host's `control_socket` open for
// commands (each announced with the token it reads from its stdin, a pipe from the shepherd),
// and reaps forever.
int keep(const std::string& workdir, const std::string& bridge_socket, int bridge_port,
         const std::string& control_socket);

// Host side: detaches, becomes a child subreaper, (with a storage directory) enters a mount
// namespace of its own and mounts a tmpfs of `storage_bytes` there, listens on `control_socket`
// (where the keeper connects) and on `broker_socket` (where host processes ask for the
// former's listening descriptor), runs `argv` (runsc run --detach …) with the content of
// `token_file` on its stdin (which runsc hands to the container's PID 1), writes
// "create <exit code>\n" to `status_fd`, then serves the broker and reaps until no descendant
// is left. A host process holding a broker connection sees it hang up at that moment.
int shepherd(int status_fd, const std::string& storage_directory, std::uint64_t storage_bytes,
             const std::string& control_socket, const std::string& broker_socket,
             const std::string& token_file, const std::vector<std::string>& argv);

}  // namespace airlock::gvisor_guest
