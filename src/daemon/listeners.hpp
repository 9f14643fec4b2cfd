// The sockets airlockd listens on, bound before the HTTP library sees them.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace airlock::daemon {

// A bound, listening AF_UNIX stream socket at `path`, mode `mode` (the umask never widens it:
// the socket is created 0600 and then given `mode`), group `group` when set. Missing parent
// directories are created 0755. A stale socket (nobody accepting) is replaced; a live one, or
// anything at `path` that is not a socket, is refused — airlockd never deletes what it did not
// make. Returns the descriptor (close-on-exec). Throws InvalidArgument / SystemError.
int bind_unix_socket(const std::string& path, mode_t mode, std::optional<gid_t> group);

// Removes the socket at `path` if it is still the one bound as (device, inode).
void unlink_unix_socket(const std::string& path, dev_t device, ino_t inode) noexcept;

struct TcpListener {
  int fd = -1;
  std::string address;  // "127.0.0.1:43817", "[::1]:8080" — the port actually bound
};
// "HOST:PORT" or "[V6]:PORT"; PORT 0 picks a free one.
TcpListener bind_tcp_socket(const std::string& host_port);

// The group id for a group name or number. Throws InvalidArgument naming the flag.
gid_t resolve_group(const std::string& name);

}  // namespace airlock::daemon
