#include "cli/command.hpp"

namespace airlock::cli {

std::map<std::string, CommandSetup>& registered_commands() {
  static std::map<std::string, CommandSetup> registered;
  return registered;
}

bool register_command(std::string name, CommandSetup setup) {
  registered_commands()[std::move(name)] = std::move(setup);
  return true;
}

}  // namespace airlock::cli
