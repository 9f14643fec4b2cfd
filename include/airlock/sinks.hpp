// Output sinks that land artifacts on the host.
//
// `make_file_system_sink(root)` is a *guarantee*, not a check: no byte of an artifact is ever
// written outside `root`, whatever links sit in the landing tree or are raced into it while
// artifacts land. How:
//
//   - `root` is opened once, when the sink is made (O_PATH | O_DIRECTORY). The host names the
//     root, so links in the root's own path are followed then — and never again: the sink
//     holds the directory it opened, and a later rename or swap of `root` itself does not move
//     where artifacts land.
//   - Per artifact, every parent directory is created with mkdirat() under a held directory fd
//     and then opened with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//     RESOLVE_NO_MAGICLINKS): a link in the way — planted before, or swapped in between the
//     mkdir and the open — is refused by the kernel, not by a check that can be raced.
//   - The bytes go to a temporary file in the final directory, opened O_CREAT | O_EXCL |
//     O_NOFOLLOW (a link or anything else already at that name is refused), and the temporary
//     file is renamed over the final name — rename replaces a link that appeared there rather
//     than following it, and readers see the old file or the whole new one, never a part.
//   - A link found in the way is refused with LandingNotConfined, whose message names the
//     artifact but never a host path (a model may see it). A final name that is already a link
//     is refused the same way (the seeds' rule), although the rename would only replace it.
//
// Residual, stated: a process that can rename directories of the landing tree to somewhere
// outside `root` can move a directory after the sink has opened it; the file then lands in that
// directory, wherever it has been moved. Nothing follows a link, and nothing lands anywhere the
// sink did not open beneath `root`. Keep the landing root out of reach of untrusted writers.
//
// Errors: LandingNotConfined (a link in the way, or a name that resolves outside the root — an
// absolute one, or `..` climbing above it: the sink may be handed artifacts a host built
// itself, so it judges the escape first and reports it as one), ArtifactNameInvalid (any other
// name breaking the artifact-name rules, e.g. "a/../b" — the sink checks again, it does not
// trust its caller), SystemError with
// errno and the artifact name (e.g. ENOTDIR when a file stands where a parent must be, ENOSPC,
// ENOSYS when the kernel has no openat2 — the sink then refuses rather than fall back to a
// weaker resolution).
#pragma once

#include <filesystem>
#include <functional>
#include <string>

#include "airlock/outputs.hpp"

namespace airlock {

struct FileSystemSinkOptions {
  // What a model sees for a landed artifact; `destination` is the host path (never show it to a
  // model unless the host decides so). Default: "<name> (<n> bytes)".
  std::function<std::string(const Artifact& artifact, const std::filesystem::path& destination)>
      display;
  // fsync the file before the rename and the directory after it: the artifact survives a host
  // crash once deliver returns. Off by default (it costs a disk flush per artifact).
  bool fsync = false;
  // Create `root` (and its missing parents) when it does not exist. Off by default: a typo in a
  // host's configuration should fail loudly, not land artifacts somewhere new.
  bool create_root = false;
  // Mode bits for created directories and files (before the umask).
  unsigned directory_mode = 0755;
  unsigned file_mode = 0644;
  // How names are spelled on delivery (see OutputSink::normalization).
  NameNormalization normalization = NameNormalization::nfc;
};

// Opens `root` now (SystemError when it cannot: missing without create_root, not a directory,
// no permission). The returned sink owns the directory fd; copies of it share it.
// `LandedArtifact::handle` is the destination's host path.
OutputSink make_file_system_sink(const std::filesystem::path& root,
                                 FileSystemSinkOptions options = {});

}  // namespace airlock
