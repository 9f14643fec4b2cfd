// The JSON wire format as an API caller (or a spec file) hands it in: any text must end either
// in a record or in an airlock::InvalidArgument — never a crash, a hang or another exception
// type. A spec that parses must survive its own round trip unchanged.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "airlock/errors.hpp"
#include "airlock/json.hpp"
#include "fuzz_check.hpp"

namespace {

using airlock::json::Json;

template <typename Parse>
void parse_and_round_trip(const Json& value, Parse parse) {
  try {
    auto record = parse(value);
    const Json once = airlock::json::to_json(record);
    const Json twice = airlock::json::to_json(parse(once));
    FUZZ_CHECK(once == twice);
  } catch (const airlock::InvalidArgument&) {
    // The refusal the contract promises.
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Json value;
  try {
    value = airlock::json::parse_text(text, "fuzz input");
  } catch (const airlock::InvalidArgument&) {
    return 0;
  }
  parse_and_round_trip(value, [](const Json& v) { return airlock::json::parse_spec(v); });
  parse_and_round_trip(value, [](const Json& v) { return airlock::json::parse_key(v); });
  parse_and_round_trip(value, [](const Json& v) {
    return airlock::json::parse_transfer_limits(v, "limits");
  });
  parse_and_round_trip(value, [](const Json& v) {
    return airlock::json::parse_declared_output(v, "output");
  });
  return 0;
}
