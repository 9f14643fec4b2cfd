// What an API caller sends airlockd: any bytes as the body of an exec request, and the same bytes
// as a query value. Each must end in a parsed request within the daemon's limits or in an
// airlock::InvalidArgument naming the field — never a crash, a hang or another exception type.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "airlock/errors.hpp"
#include "daemon/exec_request.hpp"
#include "daemon/request_fields.hpp"
#include "fuzz_check.hpp"

namespace {

using airlock::daemon::ApiLimits;
using airlock::daemon::HttpRequest;

void exec_body(const HttpRequest& request, const ApiLimits& limits) {
  try {
    const auto body = airlock::daemon::parse_json_body(request);
    FUZZ_CHECK(body.is_object());
    const auto parsed = airlock::daemon::parse_exec_request(body, limits);
    FUZZ_CHECK(parsed.timeout.count() >= 1 && parsed.timeout <= limits.max_exec_timeout);
    FUZZ_CHECK(parsed.options.max_output_bytes.has_value());
    FUZZ_CHECK(*parsed.options.max_output_bytes >= 1 &&
               *parsed.options.max_output_bytes <= limits.max_output_bytes);
  } catch (const airlock::InvalidArgument& refusal) {
    // The refusal the contract promises; it names where the body went wrong.
    FUZZ_CHECK(std::string_view(refusal.what()).find("body") != std::string_view::npos);
  }
}

void query(const HttpRequest& request) {
  try {
    const auto count = airlock::daemon::query_count(request, "max_bytes", 1, 1u << 20);
    FUZZ_CHECK(!count || (*count >= 1 && *count <= (1u << 20)));
    airlock::daemon::query_bool(request, "recursive", false);
  } catch (const airlock::InvalidArgument&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  HttpRequest request;
  request.method = "POST";
  request.path = "/v1/sandboxes/h/exec";
  request.body = bytes;
  exec_body(request, ApiLimits{});

  HttpRequest get;
  get.method = "GET";
  get.query["max_bytes"] = bytes;
  get.query["recursive"] = bytes;
  query(get);
  return 0;
}
