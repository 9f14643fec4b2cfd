// What a guest agent and the host agree on beside the frames (channel_frames.hpp): the file
// plane's exit codes, a command's status lines, the list record format, and the name the agent
// takes once the work dir exists. Shared by every backend whose guest runs the kit's agent code.
#pragma once

namespace airlock::guest_kit {

// PID 1's name (/proc/1/comm) once it has made the work dir: a command that finds its working
// directory missing waits for it only until then (process_tree.hpp, enter_directory).
inline constexpr const char* kGuestReadyName = "airlock-ready";

// Exit codes of the file-plane subcommands; the reason is one line on stderr.
enum FileExit : int {
  kFileOk = 0,
  kFileLink = 10,          // a link where none may be (a parent, a listed dir, a write's target)
  kFileNotDirectory = 11,  // a non-directory parent that is not a link
  kFileNotFound = 12,
  kFileIsDirectory = 13,
  kFileNotRegular = 14,  // read of a link, FIFO, device, socket
  kFileTooLarge = 15,    // read: over max_bytes (nothing was sent)
  kFileSystem = 16,      // another errno: "errno <n> <what>" on stderr
  kFileUsage = 17,
  kFileNeedsRecursive = 18,  // remove of a directory without recursive
  kFileShortInput = 19,      // write: stdin ended before the announced size
};

// Status lines (the channel's kStatus frame) of a command, not of the file plane's subcommands:
//   "exit <code>\n"       the command exited
//   "signal <n>\n"        the command was ended by signal n
//   "killed <count>\n"    the host asked; every process of the tree is gone (count were killed)
//   "error <errno> <what>\n"  the command could not be started (chdir, exec, seccomp, fork)
// The kDone frame's code agrees: the command's, 128+n for a signal, 137 after killed, 127 on
// error.

// `list` writes one record per entry: "<kind> <size or -> <name>\0" with kind one of
// file, directory, symlink, other.

}  // namespace airlock::guest_kit
