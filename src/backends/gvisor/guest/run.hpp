// The pieces of a command's life in the guest (its handler, serve.cpp, uses them), `keeper`, the
// PID 1 that reaps what commands leave behind, and `shepherd`, the host-side subreaper of a
// container's runsc processes.
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace airlock::gvisor_guest {

// Every process whose parent chain reaches `root`, from the guest's /proc.
std::set<pid_t> descendants_of(pid_t root);

// Kills the process group of `leader` and every descendant of the caller (a child subreaper,
// so a command's orphans are among them) until none is left, reaping them. Returns how many
// distinct processes were signalled, or -1 when some were still there after about 5 s.
long kill_tree(pid_t leader);

// gVisor 20240729 creates a character or block device for a caller without CAP_MKNOD, so every
// command carries a filter refusing mknod(at) of S_IFCHR and S_IFBLK with EPERM (and every
// system call of another architecture or ABI). Built before a vfork, applied in its child.
std::vector<sock_filter> device_node_filter();
bool apply_filter(std::vector<sock_filter>& program);

// chdir, except that a missing directory is waited for (up to 3 s) while the keeper has not yet
// said it made the work dir.
bool enter_directory(const char* directory);  // system calls only: safe in a vfork child

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
