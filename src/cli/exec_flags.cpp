#include "cli/exec_flags.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <map>

#include "airlock/errors.hpp"
#include "airlock/paths.hpp"
#include "cli/sizes.hpp"
#include "cli/tokens.hpp"
#include "cli/transfer.hpp"

namespace airlock::cli {
namespace {

constexpr std::uint64_t kMaxEnvFileBytes = std::uint64_t{1} << 20;

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

using Variables = std::vector<std::pair<std::string, std::string>>;

void set_variable(Variables& variables, std::map<std::string, std::size_t>& index, std::string name,
                  std::string value) {
  if (auto found = index.find(name); found != index.end()) {
    variables[found->second].second = std::move(value);
    return;
  }
  index.emplace(name, variables.size());
  variables.emplace_back(std::move(name), std::move(value));
}

}  // namespace

void ExecFlags::add_to(CLI::App& app) {
  // One value per flag (like --put): a vector option that may take several would swallow the
  // `--` before the command.
  app.add_option("-e,--env", env, "K=V, or K for this process's value of K (repeatable)")
      ->allow_extra_args(false);
  app.add_option("--env-file", env_files,
                 "a file of K=V lines (# comments, blank lines), read before -e (repeatable)")
      ->allow_extra_args(false);
  app.add_option("-w,--workdir", workdir,
                 "the command's working directory, relative to the work dir or absolute within "
                 "it (created when missing)");
  app.add_flag("-i,--interactive,--stdin", interactive,
               "pass this process's stdin to the command as it comes, until its end");
  app.add_flag("-t,--tty", tty,
               "give the command a pseudo-terminal the size of the local one (-it: a shell when "
               "no command is given)");
  app.add_option("--timeout", timeout_seconds, "seconds (default 60)");
  add_size_option(app, "--max-output", max_output,
                  "ceiling on stdout+stderr (default 64m; units b, k, m, g); past it the command "
                  "is killed, or with --truncate cut");
  app.add_flag("--truncate", truncate, "keep the head past --max-output");
  app.add_flag("--shell", shell, "run the command words as one sh -c line");
  app.add_flag("--quiet", quiet, "no airlock notes on stderr");
  app.add_option("command", command, "the command (after --)")->expected(-1);
}

void ExecFlags::check() const {
  if (timeout_seconds <= 0) throw InvalidArgument("--timeout must be positive", "timeout");
  if (tty && interactive && !::isatty(0)) {
    throw InvalidArgument(
        "-i -t: stdin is not a terminal; drop -t to pass piped input through, or run from a "
        "terminal",
        "tty");
  }
}

Command ExecFlags::to_command(const std::string& usage) const {
  if (command.empty()) {
    if (interactive && tty) return Command::argv({"sh"});
    throw InvalidArgument(usage, "command");
  }
  if (!shell) return Command::argv(command);
  std::string line;
  for (const auto& word : command) line += (line.empty() ? "" : " ") + word;
  return Command::shell(line);
}

std::vector<std::pair<std::string, std::string>> exec_environment(
    const std::vector<std::string>& env_files, const std::vector<std::string>& entries,
    std::vector<std::string>& notes) {
  Variables variables;
  std::map<std::string, std::size_t> index;
  for (const auto& file : env_files) {
    const std::string text = read_local_file(file, kMaxEnvFileBytes, "--env-file");
    std::size_t start = 0;
    for (std::size_t number = 1; start <= text.size(); ++number) {
      std::size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      std::string line = text.substr(start, end - start);
      start = end + 1;
      const std::size_t first = line.find_first_not_of(" \t\r\v\f");
      if (first == std::string::npos || line[first] == '#') {
        if (end == text.size()) break;
        continue;
      }
      line.erase(0, first);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      const std::string where = "--env-file " + file + ":" + std::to_string(number);
      if (line.find('\0') != std::string::npos) {
        throw InvalidArgument(where + ": the line holds a NUL byte", "env-file");
      }
      const std::size_t equals = line.find('=');
      const std::string name = line.substr(0, equals);
      if (name.empty()) {
        throw InvalidArgument(where + ": '" + line + "' has no variable name before '='",
                              "env-file");
      }
      for (char c : name) {
        if (is_space(c)) {
          throw InvalidArgument(
              where + ": '" + line + "' is not K=V (the name '" + name + "' holds whitespace)",
              "env-file");
        }
      }
      if (equals != std::string::npos) {
        set_variable(variables, index, name, line.substr(equals + 1));
      } else if (const char* value = std::getenv(name.c_str()); value != nullptr) {
        set_variable(variables, index, name, value);
      }
      if (end == text.size()) break;
    }
  }
  for (const auto& entry : entries) {
    const std::size_t equals = entry.find('=');
    const std::string name = entry.substr(0, equals);
    if (name.empty()) {
      throw InvalidArgument("--env: '" + entry + "' has no variable name; use K=V or K", "env");
    }
    for (char c : name) {
      if (is_space(c)) {
        throw InvalidArgument("--env: the name '" + name + "' holds whitespace", "env");
      }
    }
    if (equals != std::string::npos) {
      set_variable(variables, index, name, entry.substr(equals + 1));
    } else if (const char* value = std::getenv(name.c_str()); value != nullptr) {
      set_variable(variables, index, name, value);
    } else {
      notes.push_back("-e " + name + ": not set here, so not passed");
    }
  }
  return variables;
}

std::string resolve_workdir(Sandbox& sandbox, const std::string& work_dir,
                            const std::string& workdir) {
  if (workdir.empty()) return work_dir;
  const std::string directory = confine_guest_path(workdir, work_dir);
  auto entry = sandbox.stat_file(directory, work_dir);
  if (!entry) {
    ExecOptions make;
    make.working_directory = work_dir;
    make.timeout = Milliseconds(30'000);
    make.max_output_bytes = 64 * 1024;
    const ExecResult made = sandbox.exec(Command::argv({"mkdir", "-p", "--", directory}), make);
    if (made.exit_code != 0) {
      throw InvalidArgument(
          "--workdir: cannot create '" + workdir + "' in the sandbox: " + made.stderr_bytes,
          "workdir");
    }
    // Walked again: a link the guest planted on the way is refused here, never entered.
    entry = sandbox.stat_file(directory, work_dir);
  }
  if (!entry || entry->kind != EntryKind::directory) {
    throw InvalidArgument("--workdir: '" + workdir + "' is not a directory in the sandbox",
                          "workdir");
  }
  return directory;
}

ExecResult run_in_foreground(Sandbox& sandbox, const Command& command, const ExecFlags& flags,
                             const std::string& work_dir, bool collect, SignalRelay& relay) {
  ExecOptions exec;
  std::vector<std::string> notes;
  exec.environment = exec_environment(flags.env_files, flags.env, notes);
  if (!flags.quiet) {
    for (const auto& line : notes) write_fully(2, "airlock: " + line + "\n");
  }
  exec.working_directory = resolve_workdir(sandbox, work_dir, flags.workdir);
  exec.timeout = Milliseconds(static_cast<long long>(flags.timeout_seconds * 1000));
  exec.max_output_bytes = flags.max_output;
  exec.overflow = flags.truncate ? OutputOverflow::truncate : OutputOverflow::refuse;
  if (flags.interactive) exec.stdin_fd = 0;
  OutputRelay output;
  if (!collect) exec.on_output = output.callback();

  std::optional<RawTerminal> raw;
  if (flags.tty) {
    const int local = ::isatty(0) ? 0 : (::isatty(1) ? 1 : -1);
    exec.terminal = terminal_size(local).value_or(WindowSize{});
    if (local >= 0) relay.watch_window(local);
    if (flags.interactive) {
      raw.emplace(0);
      relay.set_before_forced_exit([&raw] { raw->restore(); });
    }
  }
  ExecResult result;
  try {
    result = exec_relayed(sandbox, command, exec, relay);
  } catch (const Error& error) {
    if (raw) raw->restore();
    relay.set_before_forced_exit({});
    if (!relay.received()) throw;
    // The operator ended the command: what the backend answered to that (a Timeout
    // "cancelled" after a forced stop, say) is the interruption itself.
    if (!flags.quiet && !dynamic_cast<const Timeout*>(&error)) {
      write_fully(2, "airlock: after " + signal_name(relay.received()) + ": " + error.type() +
                         ": " + error.message() + "\n");
    }
    result.exit_code = relay.exit_code();
    result.term_signal = relay.received();
  }
  if (raw) raw->restore();
  relay.set_before_forced_exit({});
  if (!collect) {
    // A backend that predates streaming collects even when asked to stream: what it kept is
    // written now rather than lost (a streaming backend leaves these empty).
    output.callback()(OutputStream::stdout_stream, result.stdout_bytes);
    output.callback()(OutputStream::stderr_stream, result.stderr_bytes);
    result.stdout_bytes.clear();
    result.stderr_bytes.clear();
  }
  return result;
}

}  // namespace airlock::cli
