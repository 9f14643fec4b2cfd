#include "daemon/request_fields.hpp"

#include <charconv>

#include "airlock/errors.hpp"

namespace airlock::daemon {
namespace {

[[noreturn]] void refuse(const std::string& where, const std::string& why) {
  throw InvalidArgument(where + ": " + why, where);
}

std::string type_name(const json::Json& value) {
  switch (value.type()) {
    case json::Json::value_t::null:
      return "null";
    case json::Json::value_t::boolean:
      return "a boolean";
    case json::Json::value_t::string:
      return "a string";
    case json::Json::value_t::array:
      return "an array";
    case json::Json::value_t::object:
      return "an object";
    default:
      return value.is_number() ? "a number" : "something else";
  }
}

}  // namespace

json::Json parse_json_body(const HttpRequest& request) {
  if (request.body.empty()) refuse("body", "a JSON object is required");
  json::Json value;
  try {
    value = json::parse_text(request.body, "body");
  } catch (const json::Json::exception& error) {
    // parse_text names syntax errors; the JSON library reports a number too large for any
    // type (1e309) as a range error instead, which is bad input all the same.
    refuse("body", std::string("not acceptable JSON: ") + error.what());
  }
  if (!value.is_object()) refuse("body", "expected a JSON object, got " + type_name(value));
  return value;
}

Fields::Fields(const json::Json& value, std::string where)
    : value_(value), where_(std::move(where)) {
  if (!value_.is_object()) refuse(where_, "expected an object, got " + type_name(value_));
}

std::string Fields::path(std::string_view field) const {
  return where_ + "." + std::string(field);
}

const json::Json* Fields::optional(std::string_view field) {
  seen_.emplace(field);
  auto found = value_.find(std::string(field));
  if (found == value_.end() || found->is_null()) return nullptr;
  return &*found;
}

const json::Json& Fields::required(std::string_view field) {
  const json::Json* value = optional(field);
  if (!value) refuse(path(field), "is required");
  return *value;
}

std::string Fields::string(std::string_view field, const json::Json& value) const {
  if (!value.is_string()) refuse(path(field), "expected a string, got " + type_name(value));
  return value.get<std::string>();
}

std::uint64_t Fields::count(std::string_view field, const json::Json& value, std::uint64_t minimum,
                            std::uint64_t maximum) const {
  const bool whole =
      value.is_number_unsigned() || (value.is_number_integer() && value.get<std::int64_t>() >= 0);
  if (!whole) {
    refuse(path(field), "expected a non-negative integer, got " +
                            (value.is_number() ? value.dump() : type_name(value)));
  }
  const auto number = value.get<std::uint64_t>();
  if (number < minimum || number > maximum) {
    refuse(path(field), "must be between " + std::to_string(minimum) + " and " +
                            std::to_string(maximum) + ", got " + std::to_string(number));
  }
  return number;
}

bool Fields::boolean(std::string_view field, const json::Json& value) const {
  if (!value.is_boolean()) refuse(path(field), "expected true or false, got " + type_name(value));
  return value.get<bool>();
}

std::vector<std::string> Fields::strings(std::string_view field, const json::Json& value) const {
  if (!value.is_array()) refuse(path(field), "expected an array, got " + type_name(value));
  std::vector<std::string> out;
  for (std::size_t i = 0; i < value.size(); ++i) {
    if (!value[i].is_string()) {
      refuse(path(field) + "[" + std::to_string(i) + "]",
             "expected a string, got " + type_name(value[i]));
    }
    out.push_back(value[i].get<std::string>());
  }
  return out;
}

void Fields::refuse_unknown() const {
  for (const auto& [name, unused] : value_.items()) {
    if (seen_.contains(name)) continue;
    std::string known;
    for (const auto& field : seen_) known += (known.empty() ? "" : ", ") + field;
    refuse(path(name), "unknown field (known: " + known + ")");
  }
}

std::optional<std::string> optional_query(const HttpRequest& request, std::string_view name) {
  auto value = request.query_value(name);
  if (!value) return std::nullopt;
  return std::string(*value);
}

std::string required_query(const HttpRequest& request, std::string_view name) {
  auto value = request.query_value(name);
  if (!value || value->empty()) {
    refuse("query." + std::string(name), "is required");
  }
  return std::string(*value);
}

std::optional<std::uint64_t> query_count(const HttpRequest& request, std::string_view name,
                                         std::uint64_t minimum, std::uint64_t maximum) {
  auto value = request.query_value(name);
  if (!value) return std::nullopt;
  const std::string where = "query." + std::string(name);
  std::uint64_t number = 0;
  const auto* begin = value->data();
  const auto* end = value->data() + value->size();
  auto [stop, error] = std::from_chars(begin, end, number);
  if (value->empty() || error != std::errc() || stop != end) {
    refuse(where, "expected a non-negative integer, got \"" + std::string(*value) + "\"");
  }
  if (number < minimum || number > maximum) {
    refuse(where, "must be between " + std::to_string(minimum) + " and " + std::to_string(maximum) +
                      ", got " + std::to_string(number));
  }
  return number;
}

bool query_bool(const HttpRequest& request, std::string_view name, bool fallback) {
  auto value = request.query_value(name);
  if (!value) return fallback;
  if (*value == "true") return true;
  if (*value == "false") return false;
  refuse("query." + std::string(name),
         "expected true or false, got \"" + std::string(*value) + "\"");
}

void refuse_unknown_query(const HttpRequest& request,
                          std::initializer_list<std::string_view> known) {
  for (const auto& [name, unused] : request.query) {
    bool listed = false;
    for (auto allowed : known) listed = listed || allowed == name;
    if (listed) continue;
    std::string names;
    for (auto allowed : known) names += (names.empty() ? "" : ", ") + std::string(allowed);
    refuse("query." + name, "unknown parameter (known: " + (names.empty() ? "none" : names) + ")");
  }
}

}  // namespace airlock::daemon
