// What the host side and airlock-gvisor-guest agree on: subcommands, exit codes, record formats.
//
// airlock-gvisor-guest is one small static binary with several jobs. Inside every sandbox it is
// bind-mounted read-only at kGuestHelperPath and serves as:
//   keeper    PID 1 of the container: reaps orphans, creates the work dir, and (allowlist) runs
//             the egress bridge from 127.0.0.1:3128 to the proxy's unix socket;
//   run       the wrapper of every exec: its own session, a child subreaper, the command's exit
//             status on a status descriptor, and a control descriptor on which the host asks it
//             to kill the command's whole tree (reported as `killed` only once none is left);
//   stat, read, write, list, remove
//             the file plane: every path is walked from "/" one component at a time with
//             O_NOFOLLOW | O_DIRECTORY on descriptors, so a link anywhere on the path — also one
//             raced in while the operation runs — is refused by the (guest) kernel in the very
//             lookup that does the work; there is no check-then-use window;
//   probe     exits 0: proves a platform can run a container at all.
// On the host it serves as:
//   shepherd  the subreaper that starts `runsc run --detach`, reports its outcome, holds the
//             image pin for as long as the sandbox's processes live, and reaps them the moment
//             they die (so a delete never waits for a slow host init to reap a zombie).
#pragma once

namespace airlock::gvisor_guest {

// Where the helper directory is mounted inside every container, and the helper's name in it.
inline constexpr const char* kGuestHelperDirectory = "/.airlock";
inline constexpr const char* kGuestHelperName = "airlock-gvisor-guest";
inline constexpr const char* kGuestHelperPath = "/.airlock/airlock-gvisor-guest";

// The keeper's name (/proc/1/comm) once it has made the work dir: `run` started in the moment
// between the container's start and that mkdir waits for it rather than fail its chdir.
inline constexpr const char* kKeeperReadyName = "airlock-ready";

// The descriptors `run` finds (passed with runsc exec --pass-fd).
inline constexpr int kStatusFd = 3;   // guest → host: one status line
// host → guest: kSignalRequest then one byte, a signal number, = signal the command's process
// group (forwardable signals only); any other byte, or EOF, = kill the command's tree.
inline constexpr int kControlFd = 4;
inline constexpr char kSignalRequest = 's';

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

// `run` status lines (on kStatusFd):
//   "exit <code>\n"       the command exited
//   "signal <n>\n"        the command was ended by signal n
//   "killed <count>\n"    the host asked; every process of the tree is gone (count were killed)
//   "error <errno> <what>\n"  the command could not be started (chdir, exec)
// `run` exits with the command's code (128+n for a signal, 137 after killed, 127 on error) so
// that runsc's own answer agrees with the status line.

// `list` writes one record per entry: "<kind> <size or -> <name>\0" with kind one of
// file, directory, symlink, other.

}  // namespace airlock::gvisor_guest
