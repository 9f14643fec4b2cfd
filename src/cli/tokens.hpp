// Small words the run/exec/codeact commands share.
#pragma once

#include <string>

namespace airlock::cli {

// A fresh random token for a default thread id ("run-<token>").
std::string random_token();

// "SIGINT" for SIGINT, …
std::string signal_name(int number);

}  // namespace airlock::cli
