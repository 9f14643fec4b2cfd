// The file plane as subcommands of a guest helper: `stat|list PATH`, `read PATH MAX_BYTES`,
// `write PATH SIZE` (content on stdin), `remove PATH 0|1`. Results on stdout, a refusal as one
// line on stderr and an exit code of file_protocol.hpp.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace airlock::guest_kit {

// The exit code of the file-plane subcommand `args` names (args[0] the verb), or nothing when
// `args` is not one (another verb, or a file verb with the wrong operands).
std::optional<int> run_file_command(const std::vector<std::string>& args);

}  // namespace airlock::guest_kit
