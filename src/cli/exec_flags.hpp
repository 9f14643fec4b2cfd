// The flags `airlock run` and `airlock exec` share, as docker's hands know them, and the
// foreground exec they drive:
//   -e/--env K=V | K     one variable (K alone: this process's value of K; unset here, not passed)
//   --env-file FILE      K=V lines, `#` comments and blank lines (docker's format); a line that is
//                        not a variable is named with its line number
//   -w/--workdir DIR     the command's working directory: relative to the spec's work dir, or
//                        absolute within it; created when missing
//   -i/--interactive     this process's stdin passed through live until its end (--stdin too)
//   -t/--tty             a pseudo-terminal for the command, sized as the local terminal and
//                        resized with it; with -i the local terminal is raw until the command ends
//   --timeout, --max-output, --truncate, --shell, --quiet
// Output streams to stdout/stderr as it arrives, unless --json (which collects it).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "airlock/sandbox.hpp"
#include "cli/exec_io.hpp"

namespace airlock::cli {

struct ExecFlags {
  std::vector<std::string> env;
  std::vector<std::string> env_files;
  std::string workdir;
  bool interactive = false;
  bool tty = false;
  double timeout_seconds = 60;
  std::uint64_t max_output = std::uint64_t{64} << 20;
  bool truncate = false;
  bool shell = false;
  bool quiet = false;
  std::vector<std::string> command;

  void add_to(CLI::App& app);
  // Refuses contradictions before anything starts (InvalidArgument): a non-positive timeout,
  // -i -t without a terminal on stdin.
  void check() const;
  // The command to run: the words after `--` (one `sh -c` line with --shell), or `sh` for -it
  // with none. InvalidArgument naming `usage` when there is none.
  Command to_command(const std::string& usage) const;
};

// The variables of --env-file FILEs then -e entries, in that order, a later one replacing an
// earlier one of the same name. `notes` gets a line for each `-e K` that is unset here.
std::vector<std::pair<std::string, std::string>> exec_environment(
    const std::vector<std::string>& env_files, const std::vector<std::string>& entries,
    std::vector<std::string>& notes);

// The guest directory `workdir` names (see -w), created when missing; `work_dir` itself when
// empty. ConfinementError for one outside the work dir or reached through a link.
std::string resolve_workdir(Sandbox& sandbox, const std::string& work_dir,
                            const std::string& workdir);

// Runs `command` in the foreground with the flags' options. Output streams to fds 1 and 2
// unless `collect`. A Timeout raised because the operator forced the command to stop (a second
// signal) becomes a result whose exit code is 128 + the first signal.
ExecResult run_in_foreground(Sandbox& sandbox, const Command& command, const ExecFlags& flags,
                             const std::string& work_dir, bool collect, SignalRelay& relay);

}  // namespace airlock::cli
