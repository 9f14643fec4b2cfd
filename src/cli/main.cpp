// airlock — the operator's CLI (src/cli/cli_main.cpp).
#include "cli/cli_main.hpp"

int main(int argc, char** argv) {
  return airlock::cli::cli_main(argc, argv);
}
