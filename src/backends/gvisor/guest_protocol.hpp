// What the host side and airlock-gvisor-guest agree on: subcommands, exit codes, record formats.
//
// airlock-gvisor-guest is one small static binary with several jobs. Inside every sandbox it is
// bind-mounted read-only at kGuestHelperPath and serves as:
//   keeper    PID 1 of the container: reaps orphans, creates the work dir, serves the host's
//             commands over the command channel (channel_frames.hpp: it keeps connections open
//             to the keeper socket, each with a handler forked in advance), and (allowlist)
//             runs the egress bridge from 127.0.0.1:3128 to the proxy's unix socket. A handler
//             is the child subreaper of its command, which it starts by vfork as a session
//             leader under the device filter; it kills the command's whole tree on request
//             (reported as `killed` only once none is left) and signals its process group;
//   stat, read, write, list, remove
//             the file plane: every path is walked from "/" one component at a time with
//             O_NOFOLLOW | O_DIRECTORY on descriptors, so a link anywhere on the path — also one
//             raced in while the operation runs — is refused by the (guest) kernel in the very
//             lookup that does the work; there is no check-then-use window;
//   probe     exits 0: proves a platform can run a container at all.
// On the host it serves as:
//   shepherd  the subreaper that starts `runsc run --detach`, reports its outcome, holds the
//             image pin for as long as the sandbox's processes live, and reaps them the moment
//             they die (so a delete never waits for a slow host init to reap a zombie). It also
//             owns the keeper socket, pipes the sandbox's token to the keeper's stdin, and hands
//             the socket's listening descriptor to host processes (guest_channel.hpp).
#pragma once

#include "backends/kit/guest/file_protocol.hpp"

namespace airlock::gvisor_guest {

// Where the helper directory is mounted inside every container, and the helper's name in it.
inline constexpr const char* kGuestHelperDirectory = "/.airlock";
inline constexpr const char* kGuestHelperName = "airlock-gvisor-guest";
inline constexpr const char* kGuestHelperPath = "/.airlock/airlock-gvisor-guest";

// The keeper's name (/proc/1/comm) once it has made the work dir. The keeper serves commands
// only after that, so a command never races the mkdir; its wait for the name stays as a guard.
inline constexpr const char* kKeeperReadyName = guest_kit::kGuestReadyName;

// The file plane's exit codes, the command status lines and the list record format are the
// kit's (backends/kit/guest/file_protocol.hpp), shared with every agent that serves the channel.
using namespace guest_kit;

}  // namespace airlock::gvisor_guest
