// The jailed program: forked by the warden inside the new root, stripped of every privilege,
// then exec'd. Before execv it holds:
//   descriptors   0, 1, 2 and the --keep-fd ones, nothing else (not the leash, not the status)
//   identity      uid and gid as given (real, effective, saved), no supplementary group
//   capabilities  none: effective, permitted, inheritable, ambient and the bounding set are
//                 empty, checked after the drop; no_new_privs is set, so no exec regains any
//   signals       an empty mask, default dispositions; SIGKILL when the warden dies
//   directory     "/"
// The environment is passed on as the jail received it.
#pragma once

#include <sys/types.h>

#include "backends/microvm/jail/options.hpp"

namespace airlock::microvm_jail {

struct StartedProgram {
  pid_t pid = -1;
  // The read end of a close-on-exec pipe: end of file once execv succeeded; "ERRNO STEP" from
  // the child when a step before it failed.
  int exec_report = -1;
};

// Forks and execs the program; a failed fork ends the jail through fail().
StartedProgram start_program(const Options& options, int last_capability);

}  // namespace airlock::microvm_jail
