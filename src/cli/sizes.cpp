#include "cli/sizes.hpp"

#include <limits>

#include "airlock/errors.hpp"

namespace airlock::cli {
namespace {

// Wide enough that a value past 2^64 - 1 is seen before it wraps.
__extension__ using Wide = unsigned __int128;

char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

[[noreturn]] void refuse(std::string_view text, std::string_view flag, std::string_view why) {
  const std::string name(flag.substr(flag.find_first_not_of('-')));
  throw InvalidArgument(std::string(flag) + ": '" + std::string(text) + "' is not a size" +
                            std::string(why) + "; use e.g. 512m or 2g",
                        name);
}

}  // namespace

std::uint64_t parse_size(std::string_view text, std::string_view flag) {
  std::size_t at = 0;
  Wide whole = 0;
  const Wide kMax = std::numeric_limits<std::uint64_t>::max();
  while (at < text.size() && text[at] >= '0' && text[at] <= '9') {
    whole = whole * 10 + static_cast<unsigned>(text[at] - '0');
    if (whole > kMax) refuse(text, flag, " (past 2^64 - 1 bytes)");
    ++at;
  }
  if (at == 0) refuse(text, flag, "");
  // The fraction as a decimal numerator over 10^digits (at most 18 digits are kept).
  std::uint64_t numerator = 0;
  std::uint64_t denominator = 1;
  bool fraction = false;
  if (at < text.size() && text[at] == '.') {
    fraction = true;
    ++at;
    const std::size_t first = at;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9') {
      if (denominator < 1'000'000'000'000'000'000ULL) {
        numerator = numerator * 10 + static_cast<unsigned>(text[at] - '0');
        denominator *= 10;
      }
      ++at;
    }
    if (at == first) refuse(text, flag, "");
  }
  std::string unit;
  for (; at < text.size(); ++at) unit += lower(text[at]);
  unsigned shift = 0;
  std::string_view rest = unit;
  if (!rest.empty() && rest != "b") {
    switch (rest.front()) {
      case 'k':
        shift = 10;
        break;
      case 'm':
        shift = 20;
        break;
      case 'g':
        shift = 30;
        break;
      case 't':
        shift = 40;
        break;
      default:
        refuse(text, flag, " (the units are b, k, m, g and t)");
    }
    rest.remove_prefix(1);
    if (rest != "" && rest != "b" && rest != "ib") {
      refuse(text, flag, " (the units are b, k, m, g and t)");
    }
  }
  if (fraction && shift == 0) refuse(text, flag, " (a fraction needs a unit: 1.5g)");
  const Wide bytes = (whole << shift) + (static_cast<Wide>(numerator) << shift) / denominator;
  if (bytes > kMax) refuse(text, flag, " (past 2^64 - 1 bytes)");
  return static_cast<std::uint64_t>(bytes);
}

CLI::Option* add_size_option(CLI::App& app, const std::string& name,
                             std::optional<std::uint64_t>& target, const std::string& description) {
  return app.add_option_function<std::string>(
      name, [&target, name](const std::string& text) { target = parse_size(text, name); },
      description);
}

CLI::Option* add_size_option(CLI::App& app, const std::string& name, std::uint64_t& target,
                             const std::string& description) {
  return app.add_option_function<std::string>(
      name, [&target, name](const std::string& text) { target = parse_size(text, name); },
      description);
}

}  // namespace airlock::cli
