// Fuzzes the egress proxy's request-head reader and parser — the first code that touches bytes a
// sandboxed program chose. Properties checked beyond "no crash, no sanitizer report":
//   - feeding the input whole or in arbitrary chunks ends in the same state and result;
//   - a completed head always names a canonical host (lowercase, no brackets, ≤ 253 chars) and a
//     non-zero port, and the host matches itself as an allowlist pattern;
//   - a refusal always says why.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "egress/host_pattern.hpp"
#include "egress/request_head.hpp"

namespace {

using airlock::egress::RequestHeadReader;

void check(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  // The first byte picks the chunk size and the ceiling, so the fuzzer explores both.
  const std::size_t chunk = 1 + data[0] % 17;
  const std::size_t ceiling = 64 + static_cast<std::size_t>(data[0]) * 16;
  const std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);

  RequestHeadReader whole(ceiling);
  whole.feed(input);
  RequestHeadReader pieces(ceiling);
  for (std::size_t at = 0;
       at < input.size() && pieces.state() == RequestHeadReader::State::need_more; at += chunk) {
    pieces.feed(input.substr(at, chunk));
  }
  check(whole.state() == pieces.state());
  check(whole.result().problem == pieces.result().problem);
  check(whole.result().target.host == pieces.result().target.host);
  check(whole.result().target.port == pieces.result().target.port);

  if (whole.state() == RequestHeadReader::State::complete) {
    const auto& target = whole.result().target;
    check(!target.host.empty() && target.host.size() <= airlock::egress::kMaxHostLength);
    check(target.port != 0);
    for (const char c : target.host) check(!(c >= 'A' && c <= 'Z') && c != '[' && c != ']');
    check(airlock::egress::host_matches(target.host, target.host));
  } else if (whole.state() == RequestHeadReader::State::refused) {
    check(!whole.result().why.empty());
  }

  // The one-shot parser on the same bytes must never crash either.
  (void)airlock::egress::parse_request_head(input);
  return 0;
}
