// Files across the boundary for `airlock run`: --put LOCAL=GUEST (a file or a directory tree)
// and --get GUEST (a file or a directory tree), under the spec's files_in / files_out caps.
//
// --put reads everything before any sandbox starts, so a typo or a cap costs nothing:
//   - the LOCAL named is opened as given; inside a directory, nothing is followed — a link is
//     refused by name (remove it, or --put its target under its own name), and so is anything
//     that is neither a file nor a directory (a FIFO would block, a device is no file);
//   - every file counts against files_in (per-file bytes, file count, total bytes) as it is
//     read, so an oversized tree stops at the cap it passes; empty directories are not carried
//     (the file API creates a file's parents, not bare directories).
// --get walks a guest directory with the sandbox's list_dir (links are listed as links and
// never followed; the library's reads refuse them too): each regular file under it becomes a
// declared output, so collect_outputs applies files_out and the file-system sink lands nothing
// outside --out. A link or special file in the tree is skipped with a note; the walk stops with
// TransferCapExceeded once it finds more files than files_out.max_files.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "airlock/records.hpp"
#include "airlock/sandbox.hpp"

namespace airlock::cli {

// A regular file read whole, refusing past `cap` bytes (TransferCapExceeded on
// files_in.max_bytes_per_file); InvalidArgument naming `flag` when it cannot be opened or is no
// regular file.
std::string read_local_file(const std::string& path, std::uint64_t cap, const std::string& flag);

struct GuestFile {
  std::string guest_path;  // as given to write_file, relative to the work dir or absolute in it
  std::string content;
};

// Every --put, read now under `caps` (files_in).
std::vector<GuestFile> read_puts(const std::vector<std::string>& puts, const TransferLimits& caps);

// The --get entries as declared outputs: a guest directory becomes every regular file under it.
// `notes` gets a line for each entry skipped.
std::vector<DeclaredOutput> expand_gets(Sandbox& sandbox, const std::vector<std::string>& gets,
                                        const std::string& work_dir, const TransferLimits& caps,
                                        std::vector<std::string>& notes);

}  // namespace airlock::cli
