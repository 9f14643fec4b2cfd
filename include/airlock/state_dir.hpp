// Where airlock keeps durable state on this host, decided in one place.
//
// Every component that persists something (the linux backend's sandbox records, the image store,
// …) asks this function, so a host that overrides the location once moves all of it together.
#pragma once

#include <filesystem>

namespace airlock {

// The state directory, in this order:
//   1. $AIRLOCK_STATE_DIR when set and non-empty (must be absolute, else InvalidArgument);
//   2. /var/lib/airlock when the effective uid is 0;
//   3. $XDG_STATE_HOME/airlock when XDG_STATE_HOME is set to an absolute path;
//   4. $HOME/.local/state/airlock (InvalidArgument when HOME is unset or relative).
// Pure: reads the environment and the effective uid, creates nothing.
std::filesystem::path default_state_dir();

}  // namespace airlock
