// A router whose sandboxes' commands carry the CLI's signal relay, for a command that runs its
// execs through a kind (codeact) rather than calling `Sandbox::exec` itself: every exec without
// a control or stop token of its own gets the relay's, so SIGINT reaches the program and a
// second one stops it. Everything else is the backends' own, unchanged.
#pragma once

#include <memory>

#include "airlock/router.hpp"
#include "cli/exec_io.hpp"

namespace airlock::cli {

// The same backends and options as `router`, each backend wrapped. `relay` outlives the result.
std::unique_ptr<SandboxRouter> relayed_router(const SandboxRouter& router, SignalRelay& relay);

}  // namespace airlock::cli
