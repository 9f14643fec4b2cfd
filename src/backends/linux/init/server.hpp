// The init's event loop: PID 1 of the sandbox. Reaps every child, serves the control socket,
// starts commands in their own session (and, with delegated cgroup v2, their own leaf cgroup),
// enforces deadlines, queues past the command slots, and relays the egress bridge.
//
// Single-threaded by design: every state change happens on this one loop, so no request can
// observe a half-finished one.
#pragma once

#include "backends/linux/spawn_config.hpp"

namespace airlock::linux_backend::init {

struct ServerResources {
  int listener = -1;        // the control socket (listening)
  int root = -1;            // O_PATH of "/" (handed out on `root`)
  int host_tools = -1;      // O_PATH of the storage's host-tools directory (handed out on `root`)
  int storage = -1;         // O_PATH of the storage's root (handed out on `storage`)
  int egress = -1;          // O_PATH of the host's egress directory (allowlist), or -1
  int command_cgroup = -1;  // delegated cgroup v2 directory for per-command leaves, or -1
  int signals = -1;         // signalfd for SIGCHLD
  int leash = -1;           // kPooled: the warm pool's leash (spawn_config.hpp), until claimed
};

[[noreturn]] void serve(const SpawnConfig& config, const ServerResources& resources);

}  // namespace airlock::linux_backend::init
