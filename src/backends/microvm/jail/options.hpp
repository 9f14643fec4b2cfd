// The command line of airlock-microvm-jail, parsed whole before anything is done: a jail either
// starts with everything it was asked for, or not at all (exit 2, naming the bad argument).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace airlock::microvm_jail {

// The device nodes a jail may hand its program, each bound from the host's /dev/NAME. Anything
// else (a disk, a tty, /dev/mem) is refused by name.
inline constexpr const char* kAllowedDevices[] = {"null", "zero", "urandom", "random", "kvm"};
inline constexpr std::size_t kMaxCgroups = 8;  // --cgroup at most this many times

struct Options {
  int leash_fd = -1;   // EOF or an error on it: the owner is gone, the jail ends
  int status_fd = -1;  // "ready", "exit N", "signal N" or "error ERRNO STEP", one per line
  // The cgroup directories the jail joins first, one per hierarchy: the v2 directory, or on a
  // host with v1 controllers one each for memory, pids and cpu.
  std::vector<std::string> cgroups;
  uid_t uid = 0;                        // the program's, never 0
  gid_t gid = 0;                        // the program's, never 0
  std::vector<std::string> read_only;   // bound read-only (nosuid, nodev) at the same path
  std::vector<std::string> read_write;  // bound read-write (nosuid, nodev, noexec)
  std::vector<std::string> devices;     // names out of kAllowedDevices
  std::vector<int> keep_fds;            // inherited by the program besides 0, 1 and 2
  std::vector<std::string> program;     // absolute path inside the jail, then its arguments
};

struct Parsed {
  std::optional<Options> options;
  std::string error;  // set when options is not: what was wrong, naming the argument
};

Parsed parse_options(int argc, char** argv);

// The usage text, for the message of a refused command line.
const char* usage() noexcept;

}  // namespace airlock::microvm_jail
