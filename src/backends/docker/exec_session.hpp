// One Engine API exec: create, attach (hijacked, demultiplexed), bounded as it streams, then the
// exit code. The Engine API cannot kill one exec's process tree, so every forced end — the
// caller's timeout, a cancellation, an output refusal — goes through `force_stop`, which stops
// the whole container's processes (see DockerSandbox) and says whether that was confirmed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "airlock/records.hpp"
#include "airlock/sandbox.hpp"
#include "backends/docker/engine_client.hpp"

namespace airlock::docker {

using ForceStop = std::function<bool()>;

struct ExecOutcome {
  ExecResult result;
  // Set when the engine could not start the command at all (exit 126/127 from the runtime,
  // before the program ran). The caller decides what that means (e.g. a missing working
  // directory).
  bool may_not_have_started = false;
};

// Runs `command` in container `container_id`. `backend_ceiling` bounds the output when the
// caller set no `max_output_bytes`. Throws Timeout (deadline or stop), ExecOutputLimitExceeded,
// NotSupported (stdin over TLS), BackendError.
ExecOutcome run_exec(EngineClient& client, const std::string& container_id, const Command& command,
                     const ExecOptions& options, std::uint64_t backend_ceiling,
                     const ForceStop& force_stop);

}  // namespace airlock::docker
