// Guest-path rules, shared by every backend's file plane. Guest paths only — never apply these
// to host paths.
//
// The confinement walk is here so that no backend writes it again: a path whose *parent* is a
// link passes every lexical test and still reads outside, and two backends written
// independently against prose shipped exactly that escape.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "airlock/vocabulary.hpp"

namespace airlock {

// POSIX normpath: collapses `//`, `.` and `..` lexically ("/a/b/../c" → "/a/c", "" → ".").
// A leading `..` of a relative path is kept; `/..` is `/`.
std::string normalize_guest_path(std::string_view path);

// Whether `path` is an absolute Windows drive path: a letter, ':', then '/' or '\' ("C:/work",
// "d:\"). A drive-relative "C:work" is not. Only a spec for the windows family may carry one
// as its work dir; none of the functions below accepts it.
bool is_windows_absolute_path(std::string_view path) noexcept;

// Resolve `path` against `working_directory` and refuse anything that leaves it.
// - `working_directory` must be absolute and free of NUL and backslash (InvalidArgument).
// - `path` containing a backslash or a NUL is refused (ConfinementError): one grammar only.
// - The result is normpath(join(normpath(wd), path)); it must equal wd or lie under wd + "/".
//   `/work-outside` is not under `/work` (the sibling-prefix trap).
// Returns the absolute, normalised guest path. Does not touch the guest.
std::string confine_guest_path(std::string_view path, std::string_view working_directory);

// `path` relative to `base` after normalising both: "" when equal, the remainder when `path` is
// under `base + "/"`, nullopt otherwise (including the sibling-prefix case).
std::optional<std::string> guest_path_relative_to(std::string_view path, std::string_view base);

// Every directory the walk must stat: each prefix of normpath(wd) from its first component
// ("/a", "/a/b"; "/" itself is not included), then each further component of `guest_path` below
// wd. The walk starts *above* the working directory: its ancestors can be links too.
std::vector<std::string> guest_directory_chain(std::string_view guest_path,
                                               std::string_view working_directory);

// An unconfined, no-follow stat of an absolute guest path: the entry's kind, or nullopt when
// nothing is there. It must describe a link as `symlink` — a stat that follows links describes
// the target and hides the escape.
using GuestStat = std::function<std::optional<EntryKind>(const std::string& absolute_path)>;

// Walk guest_directory_chain(include_self ? guest_path : dirname(guest_path), wd) with `stat`,
// stopping at the first missing component. A link raises ConfinementError; any other
// non-directory raises NotADirectory.
void refuse_symlinked_parents(const GuestStat& stat, std::string_view guest_path,
                              std::string_view working_directory, bool include_self = false);

// The write rule: confine → refuse the working directory itself → walk the parents → stat the
// leaf and refuse a link. Returns the absolute guest path to write.
std::string confine_guest_write_path(const GuestStat& stat, std::string_view path,
                                     std::string_view working_directory);

// Single-quote `argument` for a POSIX shell ('\'' for each quote). Never returns an unquoted word.
std::string posix_quote(std::string_view argument);
// Join an argv into one POSIX shell line, each argument quoted.
std::string posix_join(const std::vector<std::string>& arguments);

}  // namespace airlock
