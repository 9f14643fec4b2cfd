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

// Makes `directory` (absolute) safe to keep sandbox state in, or refuses it. Refused, with an
// InvalidArgument naming the path and what is wrong (check "state_dir"):
//   - `directory` itself, or any directory this call would create, if a symbolic link is there
//     (another user could plant one at a path airlock is about to create, and have root make
//     its sockets in a directory of theirs);
//   - any existing directory on the way that is owned by a user other than root and the
//     caller, or writable by others (without the sticky bit: /tmp is fine) — whoever controls
//     it could swap what lies beneath; a link on the way is followed only when it is root's or
//     the caller's own, in a directory no one else may change;
//   - `directory` itself if it is not a directory, not the caller's own, or writable by its
//     group or others.
// Missing directories are created, one at a time, mode 0711 (others may pass through, never
// list), each checked after creation (a race that plants something first is refused too).
void prepare_state_directory(const std::filesystem::path& directory);

}  // namespace airlock
