// Strict reading of request bodies and query parameters: every refusal is an InvalidArgument
// whose message and `check` name the field by its full path ("body.timeout_ms",
// "query.max_bytes"), and a field nobody asked for is refused rather than ignored.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "airlock/json.hpp"
#include "daemon/http.hpp"

namespace airlock::daemon {

// The request body as a JSON object; an empty or non-object body is refused naming "body".
json::Json parse_json_body(const HttpRequest& request);

class Fields {
 public:
  Fields(const json::Json& value, std::string where);

  std::string path(std::string_view field) const;
  const json::Json* optional(std::string_view field);
  const json::Json& required(std::string_view field);

  std::string string(std::string_view field, const json::Json& value) const;
  // An integer in [minimum, maximum].
  std::uint64_t count(std::string_view field, const json::Json& value, std::uint64_t minimum,
                      std::uint64_t maximum) const;
  bool boolean(std::string_view field, const json::Json& value) const;
  std::vector<std::string> strings(std::string_view field, const json::Json& value) const;

  // Call last: a field not read above is unknown.
  void refuse_unknown() const;

 private:
  const json::Json& value_;
  std::string where_;
  std::set<std::string, std::less<>> seen_;
};

std::string required_query(const HttpRequest& request, std::string_view name);
std::optional<std::string> optional_query(const HttpRequest& request, std::string_view name);
// An integer in [minimum, maximum]; nullopt when absent.
std::optional<std::uint64_t> query_count(const HttpRequest& request, std::string_view name,
                                         std::uint64_t minimum, std::uint64_t maximum);
// "true" or "false" exactly; `fallback` when absent.
bool query_bool(const HttpRequest& request, std::string_view name, bool fallback);
// Refuses any query parameter not in `known`.
void refuse_unknown_query(const HttpRequest& request,
                          std::initializer_list<std::string_view> known);

}  // namespace airlock::daemon
