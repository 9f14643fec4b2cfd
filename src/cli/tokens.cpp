#include "cli/tokens.hpp"

#include <string.h>

#include <random>
#include <sstream>

namespace airlock::cli {

std::string random_token() {
  std::random_device device;
  std::ostringstream text;
  text << std::hex << device() << device();
  return text.str();
}

std::string signal_name(int number) {
  const char* abbreviation = ::sigabbrev_np(number);
  return abbreviation ? std::string("SIG") + abbreviation : "signal " + std::to_string(number);
}

}  // namespace airlock::cli
