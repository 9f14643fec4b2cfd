// What the host tells a microVM's agent once per sandbox (the kSetup frame, mux.hpp), after a
// boot or a snapshot's restore: every restored VM wakes with the clock and the random state its
// snapshot froze, so both are set afresh before any command runs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace airlock::microvm_backend {

inline constexpr std::size_t kSeedBytes = 64;

struct GuestSetup {
  std::int64_t realtime_seconds = 0;
  std::int64_t realtime_nanoseconds = 0;
  std::string seed;     // kSeedBytes random bytes, credited to the guest kernel's pool
  std::string workdir;  // made (with its parents) before the agent says kReady
  int egress_port = 0;  // nonzero: 127.0.0.1:<port> is bridged to the host's egress proxy
  std::vector<std::string> environment;  // NAME=VALUE: the image's, set in the agent for every
                                         // command (a request's own come on top)
};

// Fields separated by NUL; the seed travels as hex.
inline std::string encode_setup(const GuestSetup& setup) {
  static const char* digits = "0123456789abcdef";
  std::string hex;
  for (const unsigned char c : setup.seed) {
    hex.push_back(digits[c >> 4]);
    hex.push_back(digits[c & 15]);
  }
  std::string out;
  for (const std::string& field :
       {std::to_string(setup.realtime_seconds), std::to_string(setup.realtime_nanoseconds), hex,
        setup.workdir, std::to_string(setup.egress_port)}) {
    out += field;
    out.push_back('\0');
  }
  for (const auto& entry : setup.environment) {
    out += entry;
    out.push_back('\0');
  }
  return out;
}

inline bool decode_setup(std::string_view payload, GuestSetup& setup) {
  std::vector<std::string> fields;
  std::size_t start = 0;
  while (start < payload.size()) {
    const auto end = payload.find('\0', start);
    if (end == std::string_view::npos) return false;
    fields.emplace_back(payload.substr(start, end - start));
    start = end + 1;
  }
  if (fields.size() < 5) return false;
  const auto number = [](const std::string& text, std::int64_t& value) {
    if (text.empty() || text.size() > 18) return false;
    value = 0;
    for (const char c : text) {
      if (c < '0' || c > '9') return false;
      value = value * 10 + (c - '0');
    }
    return true;
  };
  std::int64_t port = 0;
  if (!number(fields[0], setup.realtime_seconds) ||
      !number(fields[1], setup.realtime_nanoseconds) || setup.realtime_nanoseconds >= 1000000000 ||
      !number(fields[4], port) || port > 65535) {
    return false;
  }
  setup.egress_port = static_cast<int>(port);
  const std::string& hex = fields[2];
  if (hex.size() != 2 * kSeedBytes) return false;
  setup.seed.clear();
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    const auto nibble = [](char c) {
      return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    };
    const int high = nibble(hex[i]);
    const int low = nibble(hex[i + 1]);
    if (high < 0 || low < 0) return false;
    setup.seed.push_back(static_cast<char>(high * 16 + low));
  }
  setup.workdir = fields[3];
  setup.environment.assign(fields.begin() + 5, fields.end());
  for (const auto& entry : setup.environment) {
    const auto equals = entry.find('=');
    if (equals == std::string::npos || equals == 0) return false;
  }
  return !setup.workdir.empty() && setup.workdir.front() == '/';
}

}  // namespace airlock::microvm_backend
