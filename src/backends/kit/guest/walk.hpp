// The guest helper's path walk: every directory from "/" down, opened one component at a time
// relative to the previous descriptor with O_NOFOLLOW | O_DIRECTORY. A link anywhere — already
// there, or swapped in while the walk runs — makes that very openat fail, so nothing is ever
// reached through a link and there is no gap between a check and its use.
#pragma once

#include <string>
#include <vector>

#include "base/unique_fd.hpp"

namespace airlock::guest_kit {

// Why an operation stopped: an exit code from guest_protocol.hpp and a line for stderr.
struct Failure {
  int code = 0;
  std::string message;
};

// "/a/b/c" → {"a","b","c"}; false (with a usage failure) for a relative path, an empty
// component, "." or "..": the host sends normalised absolute paths only.
bool split_absolute(const std::string& path, std::vector<std::string>& components,
                    Failure& failure);

// Opens the directory named by components[0..count) beneath "/". With `create`, missing
// directories are made (mode 0755) and then opened the same way — a link raced in after the
// mkdir is refused like any other. On failure returns an empty descriptor and fills `failure`:
//   a component that is a link       → kFileLink
//   a component that is not a dir    → kFileNotDirectory
//   a missing component (no create)  → kFileNotFound
//   anything else                    → kFileSystem with errno
base::UniqueFd open_directory(const std::vector<std::string>& components, std::size_t count,
                              bool create, Failure& failure);

// A failure for errno `error` while doing `what` on `path`.
Failure system_failure(int error, const std::string& what, const std::string& path);

}  // namespace airlock::guest_kit
