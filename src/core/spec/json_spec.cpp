// Strict JSON for the records a host sends: specs, keys, limits, declared outputs.
#include <set>
#include <string>

#include "airlock/json.hpp"

namespace airlock::json {
namespace {

[[noreturn]] void refuse(std::string_view where, const std::string& why) {
  throw InvalidArgument(std::string(where) + ": " + why, std::string(where));
}

std::string type_name(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    case Json::value_t::binary: return "binary";
    case Json::value_t::discarded: return "nothing";
    default: return "a number";
  }
}

// Reads one JSON object field by field, and refuses any field it was not asked for.
class ObjectReader {
 public:
  ObjectReader(const Json& value, std::string_view where) : value_(value), where_(where) {
    if (!value.is_object()) refuse(where, "expected an object, got " + type_name(value));
  }
  ~ObjectReader() = default;

  std::string path(std::string_view field) const { return where_ + "." + std::string(field); }

  const Json* optional(std::string_view field) {
    seen_.insert(std::string(field));
    auto found = value_.find(std::string(field));
    if (found == value_.end() || found->is_null()) return nullptr;
    return &*found;
  }
  const Json& required(std::string_view field) {
    const Json* value = optional(field);
    if (!value) refuse(path(field), "is required");
    return *value;
  }

  std::string string(std::string_view field, const Json& value) const {
    if (!value.is_string()) refuse(path(field), "expected a string, got " + type_name(value));
    return value.get<std::string>();
  }
  std::uint64_t count(std::string_view field, const Json& value) const {
    if (!value.is_number_unsigned() && !(value.is_number_integer() && value.get<std::int64_t>() >= 0)) {
      refuse(path(field), "expected a non-negative integer, got " +
                              (value.is_number() ? value.dump() : type_name(value)));
    }
    return value.get<std::uint64_t>();
  }
  bool boolean(std::string_view field, const Json& value) const {
    if (!value.is_boolean()) refuse(path(field), "expected true or false, got " + type_name(value));
    return value.get<bool>();
  }
  std::vector<std::string> strings(std::string_view field, const Json& value) const {
    if (!value.is_array()) refuse(path(field), "expected an array, got " + type_name(value));
    std::vector<std::string> out;
    for (std::size_t i = 0; i < value.size(); ++i) {
      const Json& item = value[i];
      if (!item.is_string()) {
        refuse(path(field) + "[" + std::to_string(i) + "]",
               "expected a string, got " + type_name(item));
      }
      out.push_back(item.get<std::string>());
    }
    return out;
  }

  // Call last: any field not read above is unknown.
  void refuse_unknown() const {
    for (const auto& [name, unused] : value_.items()) {
      if (!seen_.contains(name)) {
        std::string known;
        for (const auto& field : seen_) known += (known.empty() ? "" : ", ") + field;
        refuse(path(name), "unknown field (known: " + known + ")");
      }
    }
  }

 private:
  const Json& value_;
  std::string where_;
  std::set<std::string> seen_;
};

template <typename E, typename Parse>
EnumSet<E> parse_set(const ObjectReader& reader, std::string_view field, const Json& value,
                     Parse parse) {
  EnumSet<E> set;
  const auto items = reader.strings(field, value);
  for (std::size_t i = 0; i < items.size(); ++i) {
    set.insert(parse(items[i], reader.path(field) + "[" + std::to_string(i) + "]"));
  }
  return set;
}

template <typename E>
Json set_to_json(EnumSet<E> set) {
  Json out = Json::array();
  set.for_each([&](E member) { out.push_back(std::string(to_string(member))); });
  return out;
}

template <typename T>
Json optional_string(const std::optional<T>& value) {
  if (!value) return nullptr;
  if constexpr (std::is_same_v<T, std::string>) {
    return *value;
  } else {
    return std::string(to_string(*value));
  }
}

}  // namespace

Json parse_text(std::string_view text, std::string_view what) {
  // Depth is bounded before nlohmann's recursive parser ever sees the text.
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > 64) {
        throw InvalidArgument(std::string(what) + ": nesting deeper than 64 levels is refused",
                              std::string(what));
      }
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& error) {
    throw InvalidArgument(std::string(what) + ": not valid JSON at byte " +
                              std::to_string(error.byte) + ": " + error.what(),
                          std::string(what));
  } catch (const Json::out_of_range& error) {
    // A number no double holds (1e999) is nlohmann's out_of_range, not a parse_error; let it
    // escape and a guest's host-tool request takes down the thread serving it, and the host.
    throw InvalidArgument(std::string(what) + ": a number is too large to represent: " +
                              error.what(),
                          std::string(what));
  }
}

TransferLimits parse_transfer_limits(const Json& value, std::string_view where) {
  ObjectReader reader(value, where);
  TransferLimits limits;
  limits.max_bytes_per_file =
      reader.count("max_bytes_per_file", reader.required("max_bytes_per_file"));
  limits.max_total_bytes = reader.count("max_total_bytes", reader.required("max_total_bytes"));
  limits.max_files = reader.count("max_files", reader.required("max_files"));
  reader.refuse_unknown();
  return limits;
}

Json to_json(const TransferLimits& limits) {
  return Json{{"max_bytes_per_file", limits.max_bytes_per_file},
              {"max_total_bytes", limits.max_total_bytes},
              {"max_files", limits.max_files}};
}

Json to_json(const SandboxLimits& limits) {
  return Json{{"files_in", to_json(limits.files_in)}, {"files_out", to_json(limits.files_out)}};
}

DeclaredOutput parse_declared_output(const Json& value, std::string_view where) {
  ObjectReader reader(value, where);
  DeclaredOutput output;
  output.path = reader.string("path", reader.required("path"));
  if (const Json* field = reader.optional("disposition")) {
    output.disposition =
        parse_output_disposition(reader.string("disposition", *field), reader.path("disposition"));
  }
  if (const Json* field = reader.optional("media_type")) {
    output.media_type = reader.string("media_type", *field);
  }
  if (const Json* field = reader.optional("required")) {
    output.required = reader.boolean("required", *field);
  }
  if (const Json* field = reader.optional("name")) output.name = reader.string("name", *field);
  reader.refuse_unknown();
  return output;
}

Json to_json(const DeclaredOutput& output) {
  return Json{{"path", output.path},
              {"disposition", std::string(to_string(output.disposition))},
              {"media_type", optional_string(output.media_type)},
              {"required", output.required},
              {"name", optional_string(output.name)}};
}

SandboxKey parse_key(const Json& value, std::string_view where) {
  ObjectReader reader(value, where);
  SandboxKey key;
  key.scope = reader.string("scope", reader.required("scope"));
  key.thread_id = reader.string("thread_id", reader.required("thread_id"));
  key.agent_dir = reader.string("agent_dir", reader.required("agent_dir"));
  reader.refuse_unknown();
  return key;
}

Json to_json(const SandboxKey& key) {
  return Json{{"scope", key.scope}, {"thread_id", key.thread_id}, {"agent_dir", key.agent_dir}};
}

SandboxSpec parse_spec(const Json& value, std::string_view where) {
  ObjectReader reader(value, where);
  SandboxSpec::Fields fields;
  fields.kind = reader.string("kind", reader.required("kind"));
  if (const Json* field = reader.optional("image")) fields.image = reader.string("image", *field);
  if (const Json* field = reader.optional("image_id")) {
    fields.image_id = reader.string("image_id", *field);
  }
  if (const Json* field = reader.optional("egress_allow")) {
    fields.egress_allow = reader.strings("egress_allow", *field);
  }
  if (const Json* field = reader.optional("work_dir")) {
    fields.work_dir = reader.string("work_dir", *field);
  }
  if (const Json* field = reader.optional("labels")) {
    if (!field->is_object()) {
      refuse(reader.path("labels"), "expected an object of strings, got " + type_name(*field));
    }
    for (const auto& [name, label] : field->items()) {
      fields.labels[name] = reader.string("labels." + name, label);
    }
  }
  if (const Json* field = reader.optional("requires")) {
    fields.required_capabilities = parse_set<Capability>(
        reader, "requires", *field,
        [](std::string_view text, const std::string& at) { return parse_capability(text, at); });
  }
  if (const Json* field = reader.optional("min_isolation")) {
    fields.min_isolation =
        parse_isolation(reader.string("min_isolation", *field), reader.path("min_isolation"));
  }
  if (const Json* field = reader.optional("declared_outputs")) {
    if (!field->is_array()) {
      refuse(reader.path("declared_outputs"), "expected an array, got " + type_name(*field));
    }
    for (std::size_t i = 0; i < field->size(); ++i) {
      fields.declared_outputs.push_back(parse_declared_output(
          (*field)[i], reader.path("declared_outputs") + "[" + std::to_string(i) + "]"));
    }
  }
  if (const Json* field = reader.optional("files_in")) {
    fields.files_in = parse_transfer_limits(*field, reader.path("files_in"));
  }
  if (const Json* field = reader.optional("files_out")) {
    fields.files_out = parse_transfer_limits(*field, reader.path("files_out"));
  }
  if (const Json* field = reader.optional("outputs_named_at_call_time")) {
    fields.outputs_named_at_call_time = reader.boolean("outputs_named_at_call_time", *field);
  }
  if (const Json* field = reader.optional("identities")) {
    fields.identities = parse_set<Identity>(
        reader, "identities", *field,
        [](std::string_view text, const std::string& at) { return parse_identity(text, at); });
  }
  if (const Json* field = reader.optional("egress")) {
    fields.egress = parse_egress(reader.string("egress", *field), reader.path("egress"));
  }
  if (const Json* field = reader.optional("requires_os_family")) {
    fields.requires_os_family = parse_os_family(reader.string("requires_os_family", *field),
                                                reader.path("requires_os_family"));
  }
  if (const Json* field = reader.optional("resources")) {
    ObjectReader resources(*field, reader.path("resources"));
    if (const Json* leg = resources.optional("memory_bytes")) {
      fields.resources.memory_bytes = resources.count("memory_bytes", *leg);
    }
    if (const Json* leg = resources.optional("pids")) {
      fields.resources.pids = resources.count("pids", *leg);
    }
    if (const Json* leg = resources.optional("cpu_millis")) {
      fields.resources.cpu_millis = resources.count("cpu_millis", *leg);
    }
    if (const Json* leg = resources.optional("disk_bytes")) {
      fields.resources.disk_bytes = resources.count("disk_bytes", *leg);
    }
    resources.refuse_unknown();
  }
  reader.refuse_unknown();
  return SandboxSpec(std::move(fields));
}

Json to_json(const SandboxSpec& spec) {
  Json outputs = Json::array();
  for (const auto& output : spec.declared_outputs()) outputs.push_back(to_json(output));
  Json resources = Json::object();
  if (spec.resources().memory_bytes) resources["memory_bytes"] = *spec.resources().memory_bytes;
  if (spec.resources().pids) resources["pids"] = *spec.resources().pids;
  if (spec.resources().cpu_millis) resources["cpu_millis"] = *spec.resources().cpu_millis;
  if (spec.resources().disk_bytes) resources["disk_bytes"] = *spec.resources().disk_bytes;
  return Json{{"kind", spec.kind()},
              {"image", optional_string(spec.image())},
              {"image_id", optional_string(spec.image_id())},
              {"egress_allow", spec.egress_allow()},
              {"work_dir", spec.work_dir()},
              {"labels", spec.labels()},
              {"requires", set_to_json(spec.required_capabilities())},
              {"min_isolation", optional_string(spec.min_isolation())},
              {"declared_outputs", outputs},
              {"files_in", to_json(spec.files_in())},
              {"files_out", to_json(spec.files_out())},
              {"outputs_named_at_call_time", spec.outputs_named_at_call_time()},
              {"identities", set_to_json(spec.identities())},
              {"egress", std::string(to_string(spec.egress()))},
              {"requires_os_family", optional_string(spec.requires_os_family())},
              {"resources", resources}};
}

}  // namespace airlock::json
