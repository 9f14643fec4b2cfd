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
