// Shell roads: moving a file in or out of a guest through `exec` alone, for paths a backend's
// file plane cannot reach (outside the work directory, e.g. deepagents' /conversation_history
// and /tmp) or for backends with no file plane at all.
//
// The roads run *as the guest*, with the guest's own authority: they widen nothing a command
// could not already do. What they add is a contract the caller can rely on:
//
//   - Caps first. A write larger than its limits, or a read whose probed size is over
//     `max_bytes`, is refused (TransferCapExceeded) before any byte moves.
//   - Probes classify refusals before anything is written. One command tests every directory
//     from `/` down to the target (`test -L/-e/-d/-f/-r/-w/-x`) and the host decides:
//       a link anywhere in the path, or a file standing as a parent   → invalid_path
//       a missing parent (read) or target (read)                       → not_found
//       an ancestor the guest cannot search, a target it cannot read or
//       write, a directory it cannot create in                         → permission_denied
//       the target is a directory                                      → is_directory
//       the target is not a regular file (a FIFO, a device)            → invalid_path
//     raised as FileRefused(refusal, path, detail). A path with a NUL byte, one of 4096 bytes
//     or more, or one with a name over 255 bytes is invalid_path without touching the guest.
//   - Whole or nothing. A write is sent in base64 chunks appended to a staging sibling named for
//     the call (`.airlock-stage-<call id>` beside the target), its size is checked, and only
//     then is it moved into place with `mv` — a reader or a second writer sees the old file or
//     the whole new one, never a part or two interleaved.
//   - Unknown ends are said so. A command whose end is unknown — a timeout, an output overflow,
//     a cancellation, a transport failure, the transfer's own deadline passing — raises
//     ShellTransferUnfinished: the caller must condemn the sandbox, because the command may
//     still be running and a staging file may remain. `over_cap()` is set when a read's own
//     budget ended it (the file grew past the cap while it was read). A command that ended and
//     said something unexpected (a missing utility, an I/O error, a short write) raises
//     ShellTransferFailed: nothing landed, the staging file was removed, the sandbox is whole.
//   - Every command goes through `exec_bounded` with a ceiling computed for what it can
//     legitimately print, so a hostile guest cannot flood the host through a road.
//
// Guest requirement: `sh`, `mkdir`, `mv`, `rm`, `base64` and `wc` (kShellUtilities); `test` and
// `printf` are the shell's own builtins in busybox, dash and bash. Commands run in "/" with
// absolute paths, so the working directory need not exist.
//
// Stated residual: the probe and the transfer are separate commands, so a guest racing its own
// files can change what the probe saw (e.g. swap a parent for a link). That moves a write only
// where the guest could already write — the roads cross no boundary — but the classification is
// then about the path as it was.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "airlock/errors.hpp"
#include "airlock/records.hpp"
#include "airlock/sandbox.hpp"

namespace airlock {

inline constexpr std::array<std::string_view, 6> kShellUtilities = {"sh", "mkdir",  "mv",
                                                                    "rm", "base64", "wc"};

struct ShellRoadOptions {
  // Raw bytes per write command; 48 KiB is 64 KiB of base64, well under Linux's 128 KiB limit
  // on one argument (the whole `sh -c` line is one).
  std::size_t chunk_bytes = 48 * 1024;
};

// Writes `content` to `path` (absolute, or relative to `working_directory`), creating missing
// parents, through exec only. `timeout` bounds the whole transfer. `limits` (files_in), when
// given, is checked for this one file: over max_bytes_per_file or max_total_bytes, or a
// max_files of 0, is refused before any command runs.
void write_file_over_exec(Sandbox& sandbox, std::string_view path, std::string_view content,
                          std::string_view working_directory, Milliseconds timeout,
                          std::optional<TransferLimits> limits = std::nullopt,
                          const ShellRoadOptions& options = {});

// Reads the regular file at `path` through exec only, refusing (TransferCapExceeded, cap
// "max_bytes") a file larger than `max_bytes` — never truncating. `timeout` bounds the whole
// transfer.
std::string read_file_over_exec(Sandbox& sandbox, std::string_view path,
                                std::string_view working_directory, Milliseconds timeout,
                                std::uint64_t max_bytes, const ShellRoadOptions& options = {});

// How a file-plane error reads as a FileRefusal, for callers answering per file (deepagents'
// codes): NotFound → not_found; IsADirectory → is_directory; ConfinementError (a link, an
// escape) and NotADirectory (a file as a parent) → invalid_path; a SystemError with EACCES or
// EPERM → permission_denied. Anything else is not a refusal (nullopt): the caller decides.
std::optional<FileRefusal> file_refusal(const std::exception& error);

// How a stat answer reads as a FileRefusal: nothing there → not_found; a directory →
// is_directory; a link or anything not regular → invalid_path; a regular file → nullopt.
std::optional<FileRefusal> entry_refusal(const std::optional<SandboxEntry>& entry);

}  // namespace airlock
