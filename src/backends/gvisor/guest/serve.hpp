// The keeper's side of the command channel (channel_frames.hpp): one handler process per
// connection, forked before any request arrives, which starts the command the host asks for
// and relays its streams as frames.
#pragma once

#include <string>
#include <vector>

namespace airlock::gvisor_guest {

// Waits for the one command that arrives on `connection`, writes a byte to `claimed` the moment
// it is no longer idle (the keeper then forks the next handler), serves the command as the
// subreaper of its tree, then exits the process. Called in a child of the keeper that holds no
// other descriptor of it.
[[noreturn]] void serve_command(int connection, int claimed);

}  // namespace airlock::gvisor_guest
