#include "egress/host_pattern.hpp"

#include <algorithm>

#include "airlock/errors.hpp"

namespace airlock::egress {
namespace {

bool pattern_character(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_' ||
         c == ':' || c == '*' || c == '?' || c == '[' || c == ']' || c == '!';
}

struct Step {
  bool matched;
  std::size_t next;  // the pattern position after this one-character token
};

// Matches the one-character token at `at` (anything but `*`) against `c`.
Step match_token(std::string_view pattern, std::size_t at, char c) noexcept {
  if (pattern[at] == '?') return {true, at + 1};
  if (pattern[at] != '[') return {pattern[at] == c, at + 1};

  std::size_t end = at + 1;
  if (end < pattern.size() && pattern[end] == '!') ++end;
  if (end < pattern.size() && pattern[end] == ']') ++end;
  while (end < pattern.size() && pattern[end] != ']') ++end;
  if (end >= pattern.size()) return {c == '[', at + 1};  // no closing bracket: a literal '['

  std::size_t k = at + 1;
  const bool negated = pattern[k] == '!';
  if (negated) ++k;
  bool in_set = false;
  while (k < end) {
    if (k + 2 < end && pattern[k + 1] == '-') {
      if (pattern[k] <= c && c <= pattern[k + 2]) in_set = true;
      k += 3;
    } else {
      if (pattern[k] == c) in_set = true;
      ++k;
    }
  }
  return {in_set != negated, end + 1};
}

}  // namespace

std::string normalise_host_pattern(std::string_view pattern, std::string_view what) {
  const auto refuse = [&](const std::string& why) {
    throw InvalidArgument(
        std::string(what) + ": host pattern \"" + std::string(pattern) + "\" " + why,
        std::string(what));
  };
  if (pattern.empty()) refuse("is empty");
  if (pattern.size() > kMaxPatternLength) {
    refuse("is longer than " + std::to_string(kMaxPatternLength) + " characters");
  }
  std::string canonical;
  canonical.reserve(pattern.size());
  for (const char raw : pattern) {
    const char c = (raw >= 'A' && raw <= 'Z') ? static_cast<char>(raw - 'A' + 'a') : raw;
    if (!pattern_character(c)) {
      refuse(
          "contains a character that cannot occur in a host name or a wildcard; allowed are "
          "letters, digits, '.', '-', '_', ':' and the wildcards '*', '?', '[', ']', '!'");
    }
    canonical.push_back(c);
  }
  // A single colon is a port ("x.com:443"), which would silently never match: ports are
  // `allowed_ports`. Two or more are an IPv6 literal.
  if (std::count(canonical.begin(), canonical.end(), ':') == 1) {
    refuse("names a port; a host pattern has none (ports are set by allowed_ports)");
  }
  if (canonical.size() > 1 && canonical.back() == '.') canonical.pop_back();
  if (canonical == ".") refuse("names no host");
  return canonical;
}

bool host_matches(std::string_view pattern, std::string_view host) noexcept {
  std::size_t p = 0;
  std::size_t h = 0;
  std::size_t star = std::string_view::npos;  // pattern position of the last `*` seen
  std::size_t resume = 0;                     // host position that `*` currently swallows up to
  while (h < host.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = h;
      continue;
    }
    if (p < pattern.size()) {
      const Step step = match_token(pattern, p, host[h]);
      if (step.matched) {
        p = step.next;
        ++h;
        continue;
      }
    }
    if (star == std::string_view::npos) return false;
    p = star + 1;
    h = ++resume;
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

}  // namespace airlock::egress
