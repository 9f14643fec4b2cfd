// The CLI's subcommand registry. A subcommand defines itself in cmd_<name>.cpp:
//
//   const bool kCheckCommand = airlock::cli::register_command(
//       "check", [](CLI::App& app, airlock::cli::Context& context) { … });
//
// The flag's name is unique across the CLI: the build may compile several cmd_*.cpp as one unit.
//
// Exit codes follow container-tool convention: the guest's own code; 124 when a command timed
// out; 125 when airlock could not run it (a refusal, a bad spec, a backend error), with the
// reason on stderr.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <map>
#include <string>

namespace airlock::cli {

inline constexpr int kExitTimeout = 124;
inline constexpr int kExitAirlockError = 125;

struct Context {
  int exit_code = 0;
  bool json = false;  // --json: machine-readable output on stdout
  std::string log_level = "warn";
};

using CommandSetup = std::function<void(CLI::App& app, Context& context)>;

// Adds a subcommand definer; returns true for a namespace-scope initialiser.
bool register_command(std::string name, CommandSetup setup);

// Every subcommand definer registered, by name (for main).
std::map<std::string, CommandSetup>& registered_commands();

}  // namespace airlock::cli
