// The guest helper's file plane. Each operation walks its path with open_directory (walk.hpp)
// and touches the final component only relative to the held parent descriptor, never by name
// from "/". Results go to stdout; a failure is returned (the caller prints it and exits with
// its code).
#pragma once

#include <cstdint>
#include <string>

#include "backends/kit/guest/walk.hpp"

namespace airlock::guest_kit {

// Prints "absent", "file <size>", "directory", "symlink" or "other" (lstat semantics). A missing
// parent is "absent"; a link or file standing as a parent is a failure.
Failure stat_path(const std::string& path);

// Streams the regular file at `path` to stdout. Refused: a link (never opened), a directory,
// anything not regular, and a file over `max_bytes` (checked before the first byte, and again
// while reading in case it grows — then the output is incomplete and the exit says so).
Failure read_path(const std::string& path, std::uint64_t max_bytes);

// Replaces the file at `path` with exactly `size` bytes from stdin, creating parents. Written
// to a fresh sibling and renamed into place: a reader sees the old file or the new one. A link
// or directory at `path` is refused; a link raced in after that check is replaced by the rename,
// never written through.
Failure write_path(const std::string& path, std::uint64_t size);

// Lists the directory at `path` (which must not be a link), one record per entry (see
// guest_protocol.hpp), sorted by name.
Failure list_path(const std::string& path);

// Removes `path`: a missing path is success; a link or file is unlinked (never followed); a
// directory needs `recursive`, and its tree is removed with every link unlinked, not followed.
Failure remove_path(const std::string& path, bool recursive);

}  // namespace airlock::guest_kit
