// The guest's side of the command channel (channel_frames.hpp): one handler process per
// connection, forked by the guest's agent (the gvisor keeper, the microvm init) before or as
// its request arrives, which starts the command the host asks for and relays its streams as
// frames.
#pragma once

#include <string>
#include <vector>

namespace airlock::guest_kit {

// Waits for the one command that arrives on `connection`, writes a byte to `claimed` the moment
// it is no longer idle (the agent then forks the next handler; -1: nobody to tell), serves the
// command as the subreaper of its tree, then exits the process. Called in a child of the agent that
// holds no other descriptor of it.
[[noreturn]] void serve_command(int connection, int claimed);

}  // namespace airlock::guest_kit
