// Names the host and the microVM's agent agree on.
#pragma once

namespace airlock::microvm_backend {

// The virtio-serial port every stream travels on (mux.hpp).
inline constexpr const char* kControlPortName = "airlock.ctl";
// The agent's own binary, visible to guest programs read-only: the file plane runs it as
// `airlock-microvm-agent stat|list|read|write|remove …` (backends/kit/guest/file_commands.hpp).
inline constexpr const char* kAgentDirectory = "/.airlock";
inline constexpr const char* kAgentPath = "/.airlock/airlock-microvm-agent";
// The kernel command-line word that makes /init the agent (and not a debugging shell).
inline constexpr const char* kAgentCmdlineWord = "airlock.agent";

}  // namespace airlock::microvm_backend
