// The whole CLI as a function, for the programs built from it (airlock, airlock-testing).
#pragma once

namespace airlock::cli {

// Parses argv, runs the command, and returns the process's exit code.
int cli_main(int argc, char** argv);

}  // namespace airlock::cli
