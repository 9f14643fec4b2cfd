#include "airlock/errors.hpp"
#include "airlock/paths.hpp"
#include "airlock/sandbox.hpp"

namespace airlock {

Command Command::argv(std::vector<std::string> arguments) {
  if (arguments.empty()) throw InvalidArgument("command: an argv needs at least one element");
  for (const auto& argument : arguments) {
    if (argument.find('\0') != std::string::npos) {
      throw InvalidArgument("command: an argv element contains a NUL byte");
    }
  }
  Command command;
  command.arguments_ = std::move(arguments);
  return command;
}

Command Command::shell(std::string line) {
  if (line.find('\0') != std::string::npos) {
    throw InvalidArgument("command: a shell line contains a NUL byte");
  }
  Command command;
  command.shell_ = true;
  command.arguments_ = {"sh", "-c", line};
  command.line_ = std::move(line);
  return command;
}

std::string Command::display() const { return shell_ ? line_ : posix_join(arguments_); }

void check_exec_options(const ExecOptions& options) {
  if (options.stdin_fd >= 0 && !options.stdin_bytes.empty()) {
    throw InvalidArgument("exec: stdin_fd and stdin_bytes are exclusive: give one", "stdin");
  }
  if (options.timeout < Milliseconds(0)) {
    throw InvalidArgument("exec: the timeout is negative", "timeout");
  }
}

void deliver_collected_output(ExecResult& result, const ExecOptions& options) {
  if (!options.on_output) return;
  if (!result.stdout_bytes.empty()) {
    options.on_output(OutputStream::stdout_stream, result.stdout_bytes);
  }
  if (!result.stderr_bytes.empty()) {
    options.on_output(OutputStream::stderr_stream, result.stderr_bytes);
  }
  result.stdout_bytes.clear();
  result.stderr_bytes.clear();
}

ExecResult Sandbox::exec_bounded(const Command& command, std::string_view working_directory,
                                 Milliseconds timeout, std::uint64_t max_output_bytes) {
  ExecOptions options;
  options.working_directory = std::string(working_directory);
  options.timeout = timeout;
  options.max_output_bytes = max_output_bytes;
  options.overflow = OutputOverflow::refuse;
  return exec(command, options);
}

}  // namespace airlock
