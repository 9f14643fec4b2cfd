// Host baselines the bench groups compare airlock against, measured in the same run:
// plain fork+exec, the hand-rolled namespace floor, and bubblewrap.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace airlock::bench::host_baseline {

// fork + execve("/bin/true") + waitpid. Throws on failure.
void fork_exec_true();

// The physical floor of a sandbox like ours: clone into new user, pid, mount, network, ipc and
// uts namespaces, map uid 0, bind the host root read-only (recursively) into `scratch`, mount a
// fresh /proc, pivot_root into it, detach the old root, execve /bin/true; the parent waits.
// `scratch` must be an empty directory. Throws on failure (e.g. not root).
void clone_pivot_true(const std::filesystem::path& scratch);

// The bwrap binary, when installed.
std::optional<std::string> find_bwrap();
// `bwrap --ro-bind / / --unshare-all --dev /dev --proc /proc true`, waited for.
void bwrap_true(const std::string& bwrap);

}  // namespace airlock::bench::host_baseline
