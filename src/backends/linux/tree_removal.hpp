// Recursive removal that never follows a link, for guest trees (the file plane's `remove`) and
// for a sandbox's own state directory (dispose, purge).
#pragma once

#include <string>

namespace airlock::linux_backend {

struct TreeRemoval {
  int error_number = 0;  // 0 on success
  std::string where;     // the entry that could not be removed, relative to the start
};

// Removes the directory `name` under `parent_fd` and everything beneath it. Every entry is
// reached through a directory descriptor; a link (or anything that stops being a directory
// while we look) is unlinked, never followed. Depth is unbounded: at most a few dozen
// descriptors are held, deeper levels are re-opened by name. A directory whose mode forbids
// removal is made writable first (what a guest may do to its own files must not block a purge).
TreeRemoval remove_tree(int parent_fd, const std::string& name);

}  // namespace airlock::linux_backend
