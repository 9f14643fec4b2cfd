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

#include "airlock/errors.hpp"

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

// The options every command takes, wherever they are written (`airlock --json ls` and
// `airlock ls --json`): --json and --log-level. main adds them to the root; prepare_app adds them
// to every subcommand that does not take its own.
void add_global_options(CLI::App& app, Context& context);

// After every command is registered: the global options on each subcommand, and an unknown
// option or a stray argument collected (not CLI11's "arguments were not expected") so that
// check_unknown names it before any command runs.
void prepare_app(CLI::App& app, Context& context);

// Throws InvalidArgument naming the first unknown option (with the nearest known one when it is
// close), unknown command or unexpected argument the parse collected; returns when there is none.
void check_unknown(const CLI::App& app);

// A CLI11 parse error as airlock's InvalidArgument: what check_unknown finds first, else
// CLI11's message (check: "usage").
InvalidArgument usage_error(const CLI::App& app, const CLI::ParseError& error);

// The words a command path is spelled with, "airlock image ls".
std::string command_path(const CLI::App& app);

}  // namespace airlock::cli
