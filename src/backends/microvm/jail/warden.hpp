// The warden: PID 1 of the jail's pid namespace. It builds the root, starts the program and
// then only watches:
//   the leash      end of file or an error on it (the owner is gone), or
//   SIGTERM, SIGINT, SIGHUP, SIGQUIT
//                  -> SIGKILL to the program, "signal 9" on the status channel, exit;
//   SIGCHLD        reaps every child (orphans of the program are re-parented to it); when the
//                  program itself ends: "exit N" or "signal N", and the warden exits with the
//                  same status (N, or 128 + N).
// Its own exit ends the jail: the kernel kills every process left in a pid namespace whose
// init has died, before the warden's parent can reap it.
#pragma once

#include "backends/microvm/jail/options.hpp"

namespace airlock::microvm_jail {

[[noreturn]] void run_warden(const Options& options, int last_capability);

}  // namespace airlock::microvm_jail
