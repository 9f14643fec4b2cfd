#include "airlock/host_tools.hpp"

#include <cxxabi.h>
#include <spdlog/spdlog.h>
#include <utf8proc.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <stdexcept>
#include <typeinfo>

#include "airlock/errors.hpp"

namespace airlock {
namespace {

// One step through UTF-8 text: the code point at `offset` and its length, or length 1 and -1
// for a byte that does not start a valid sequence (reported as itself, never dropped).
struct CodePointStep {
  utf8proc_int32_t code_point = -1;
  std::size_t length = 1;
};

CodePointStep step_at(std::string_view text, std::size_t offset) {
  CodePointStep step;
  const auto length =
      utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data()) + offset,
                       static_cast<utf8proc_ssize_t>(text.size() - offset), &step.code_point);
  if (length <= 0) return CodePointStep{};
  step.length = static_cast<std::size_t>(length);
  return step;
}

// Python's str.isprintable() for one code point: everything but the "Other" and "Separator"
// categories, except the plain space.
bool printable_in_python(utf8proc_int32_t code_point) {
  if (code_point == ' ') return true;
  switch (utf8proc_category(code_point)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

std::string hex_escape(const char* prefix, unsigned value, int digits) {
  char text[16];
  std::snprintf(text, sizeof text, "%s%0*x", prefix, digits, value);
  return text;
}

// A tool name inside a refusal, quoted as the guest's Python would quote it.
std::string quoted_tool_name(std::string_view name) {
  return python_repr(bounded_tool_name(name));
}

// The JSON type of a value, in the guest's words (Python's type names).
std::string python_type_name(const json::Json& value) {
  switch (value.type()) {
    case json::Json::value_t::null:
      return "NoneType";
    case json::Json::value_t::boolean:
      return "bool";
    case json::Json::value_t::string:
      return "str";
    case json::Json::value_t::array:
      return "list";
    case json::Json::value_t::object:
      return "dict";
    case json::Json::value_t::number_float:
      return "float";
    case json::Json::value_t::number_integer:
    case json::Json::value_t::number_unsigned:
      return "int";
    default:
      return "an unknown value";
  }
}

std::string json_value_word(const json::Json& value) {
  switch (value.type()) {
    case json::Json::value_t::null: return "null";
    case json::Json::value_t::boolean: return "a boolean";
    case json::Json::value_t::string: return "a string";
    case json::Json::value_t::array: return "an array";
    case json::Json::value_t::object: return "an object";
    case json::Json::value_t::number_float: return "a number";
    case json::Json::value_t::number_integer:
    case json::Json::value_t::number_unsigned: return "an integer";
    default: return "an unknown value";
  }
}

bool matches(const ToolParameter& parameter, const json::Json& value) {
  if (value.is_null() && parameter.accepts_null) return true;
  switch (parameter.type) {
    case ToolParameter::Type::string: return value.is_string();
    case ToolParameter::Type::integer: return value.is_number_integer();
    case ToolParameter::Type::number: return value.is_number();
    case ToolParameter::Type::boolean: return value.is_boolean();
    case ToolParameter::Type::object: return value.is_object();
    case ToolParameter::Type::array: return value.is_array();
    case ToolParameter::Type::any: return true;
  }
  return false;
}

std::string_view type_word(ToolParameter::Type type) {
  switch (type) {
    case ToolParameter::Type::string: return "a string";
    case ToolParameter::Type::integer: return "an integer";
    case ToolParameter::Type::number: return "a number";
    case ToolParameter::Type::boolean: return "a boolean";
    case ToolParameter::Type::object: return "an object";
    case ToolParameter::Type::array: return "an array";
    case ToolParameter::Type::any: return "any value";
  }
  return "any value";
}

// At most this many names per clause of a binding refusal; the rest are counted.
constexpr std::size_t kNamesPerClause = 3;

// "missing required argument 'a'" / "missing required arguments 'a', 'b' and 2 more".
std::string name_clause(std::string_view singular, std::string_view plural,
                        const std::vector<std::string>& names) {
  std::string out(names.size() == 1 ? singular : plural);
  for (std::size_t i = 0; i < names.size() && i < kNamesPerClause; ++i) {
    out += (i == 0 ? " " : ", ") + quoted_tool_name(names[i]);
  }
  if (names.size() > kNamesPerClause) {
    out += " and " + std::to_string(names.size() - kNamesPerClause) + " more";
  }
  return out;
}

// Why `arguments` do not bind to `tool`, or "" when they do: every missing required argument,
// every unexpected one and every wrongly typed one, each list bounded.
std::string binding_failure(const HostTool& tool, const json::Json& arguments) {
  std::vector<std::string> missing;
  std::vector<std::string> unexpected;
  std::vector<std::string> mistyped;
  for (const auto& parameter : tool.parameters) {
    if (parameter.required && !arguments.contains(parameter.name))
      missing.push_back(parameter.name);
  }
  for (const auto& [name, value] : arguments.items()) {
    // A named copy for the lambda: clang before 16 cannot capture a structured binding.
    const std::string& key = name;
    auto parameter = std::find_if(tool.parameters.begin(), tool.parameters.end(),
                                  [&](const ToolParameter& p) { return p.name == key; });
    if (parameter == tool.parameters.end()) {
      if (!tool.accepts_any_keyword) unexpected.push_back(name);
    } else if (!matches(*parameter, value)) {
      mistyped.push_back("argument " + quoted_tool_name(name) + " must be " +
                         std::string(type_word(parameter->type)) + ", not " +
                         json_value_word(value));
    }
  }
  std::vector<std::string> clauses;
  if (!missing.empty()) {
    clauses.push_back(
        name_clause("missing required argument", "missing required arguments", missing));
  }
  if (!unexpected.empty()) {
    clauses.push_back(name_clause("unexpected argument", "unexpected arguments", unexpected));
  }
  for (std::size_t i = 0; i < mistyped.size() && i < kNamesPerClause; ++i) {
    clauses.push_back(mistyped[i]);
  }
  if (mistyped.size() > kNamesPerClause) {
    clauses.push_back("and " + std::to_string(mistyped.size() - kNamesPerClause) +
                      " more mistyped");
  }
  std::string out;
  for (const auto& clause : clauses) out += (out.empty() ? "" : "; ") + clause;
  return out;
}

// Any non-finite number, anywhere in the value, cannot be carried as JSON.
bool has_non_finite(const json::Json& value) {
  if (value.is_number_float()) return !std::isfinite(value.get<double>());
  if (value.is_structured()) {
    for (const auto& item : value) {
      if (has_non_finite(item)) return true;
    }
  }
  return false;
}

// For the host's log: the exception's type and its text. Ours name their type; anything else is
// named by its demangled C++ type.
std::string failure_detail(const std::exception& error) {
  if (dynamic_cast<const Error*>(&error) != nullptr) return error_detail(error);
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(
      abi::__cxa_demangle(typeid(error).name(), nullptr, nullptr, &status), std::free);
  const std::string type = status == 0 && demangled ? demangled.get() : typeid(error).name();
  return type + ": " + error.what();
}

std::atomic<bool> g_warned{false};

DispatchResult refusal_result(std::string sentence) {
  DispatchResult result;
  result.refusal = std::move(sentence);
  return result;
}

}  // namespace

std::string bounded_tool_name(std::string_view name) {
  constexpr std::size_t kBound = 120;
  std::size_t offset = 0;
  for (std::size_t counted = 0; counted < kBound && offset < name.size(); ++counted) {
    offset += step_at(name, offset).length;
  }
  if (offset >= name.size()) return std::string(name);
  return std::string(name.substr(0, offset)) + " (truncated)";
}

std::string python_repr(std::string_view text) {
  const bool has_single = text.find('\'') != std::string_view::npos;
  const bool has_double = text.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (std::size_t offset = 0; offset < text.size();) {
    const CodePointStep step = step_at(text, offset);
    const utf8proc_int32_t c = step.code_point;
    if (c < 0) {
      out += hex_escape("\\x", static_cast<unsigned char>(text[offset]), 2);
    } else if (c == quote || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      out += hex_escape("\\x", static_cast<unsigned>(c), 2);
    } else if (c < 0x7F || printable_in_python(c)) {
      out.append(text.substr(offset, step.length));
    } else if (c <= 0xFF) {
      out += hex_escape("\\x", static_cast<unsigned>(c), 2);
    } else if (c <= 0xFFFF) {
      out += hex_escape("\\u", static_cast<unsigned>(c), 4);
    } else {
      out += hex_escape("\\U", static_cast<unsigned>(c), 8);
    }
    offset += step.length;
  }
  out += quote;
  return out;
}

// ---- the registry ----------------------------------------------------------------------------

HostToolRegistry::HostToolRegistry(HostToolRegistryOptions options) : options_(std::move(options)) {
  if (options_.max_dispatches_per_run == 0) {
    throw InvalidArgument(
        "max_dispatches_per_run must be at least 1: a registry that wants "
        "nothing dispatched should be an empty registry instead",
        "max_dispatches_per_run");
  }
  const auto& limits = options_.response_limits;
  if (limits.max_bytes_per_file == 0 || limits.max_total_bytes == 0 || limits.max_files == 0) {
    throw InvalidArgument("response_limits: every leg must be at least 1", "response_limits");
  }
}

void HostToolRegistry::register_tool(HostTool tool) {
  std::lock_guard lock(mutex_);
  if (sealed_) {
    throw InvalidArgument(
        "the host-tool registry is sealed: its aggregate or a declaration was "
        "read, and a tool registered now would reach nothing the spec was "
        "built from",
        "sealed");
  }
  if (tool.name.empty()) throw InvalidArgument("a host tool needs a name", "name");
  if (tools_.contains(tool.name)) {
    throw InvalidArgument("host tool " + quoted_tool_name(tool.name) +
                              " is already registered; a name is never replaced",
                          "name");
  }
  if (!tool.body == !tool.encoded_body) {
    throw InvalidArgument("host tool " + quoted_tool_name(tool.name) +
                              (tool.body ? " has two bodies; give it one" : " has no body"),
                          "body");
  }
  std::set<std::string> parameter_names;
  for (const auto& parameter : tool.parameters) {
    if (parameter.name.empty() || !parameter_names.insert(parameter.name).second) {
      throw InvalidArgument(
          "host tool " + quoted_tool_name(tool.name) + " has an empty or repeated parameter name",
          "parameters");
    }
  }
  if (options_.require_declared && !tool.declaration) {
    throw HostToolNotDeclared("host tool " + quoted_tool_name(tool.name) +
                              " declares no source, sink and identity, and this registry "
                              "requires every tool to answer all three: give it a "
                              "HostToolDeclaration");
  }
  const std::optional<Identity> identity =
      tool.declaration ? tool.declaration->identity : std::optional(Identity::app);
  if (identity && !options_.allowed_identities.contains(*identity)) {
    throw HostToolIdentityNotAllowed("host tool " + quoted_tool_name(tool.name) +
                                     " exercises identity '" + std::string(to_string(*identity)) +
                                     "', which this registry does not allow (allowed: " +
                                     to_string(options_.allowed_identities) + ")");
  }
  if (!g_warned.exchange(true)) {
    spdlog::warn("a host tool was registered: its body runs in this process with this "
                 "process's authority, driven by model-written code");
  }
  std::string name = tool.name;
  tools_.emplace(std::move(name), std::move(tool));
}

std::vector<std::string> HostToolRegistry::names() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out;
  for (const auto& [name, unused] : tools_) out.push_back(name);
  return out;
}

std::size_t HostToolRegistry::size() const {
  std::lock_guard lock(mutex_);
  return tools_.size();
}

bool HostToolRegistry::sealed() const {
  std::lock_guard lock(mutex_);
  return sealed_;
}

const HostTool* HostToolRegistry::resolve(std::string_view name) const {
  std::lock_guard lock(mutex_);
  auto found = tools_.find(name);
  return found == tools_.end() ? nullptr : &found->second;
}

std::optional<HostToolDeclaration> HostToolRegistry::declaration_for(std::string_view name) {
  std::lock_guard lock(mutex_);
  sealed_ = true;
  auto found = tools_.find(name);
  if (found == tools_.end()) return std::nullopt;
  return found->second.declaration;
}

HostToolAggregate HostToolRegistry::aggregate() {
  std::lock_guard lock(mutex_);
  sealed_ = true;
  HostToolAggregate out;
  std::set<std::string> sinks;
  for (const auto& [name, tool] : tools_) {
    if (!tool.declaration) {
      out.has_undeclared = true;
      out.identities.insert(Identity::app);
      out.result_integrity = SourceIntegrity::untrusted;
      continue;
    }
    const auto& declared = *tool.declaration;
    if (declared.source && (!out.result_integrity ||
                            integrity_rank(*declared.source) < integrity_rank(*out.result_integrity))) {
      out.result_integrity = declared.source;
    }
    if (declared.sink) sinks.insert(*declared.sink);
    if (declared.identity) out.identities.insert(*declared.identity);
  }
  out.outbound_caps.assign(sinks.begin(), sinks.end());
  out.requires_approval = out.identities.contains(Identity::user);
  return out;
}

// ---- a run -----------------------------------------------------------------------------------

HostToolRun::HostToolRun(std::shared_ptr<const HostToolRegistry> registry)
    : registry_(std::move(registry)) {
  if (!registry_) throw InvalidArgument("a host-tool run needs a registry", "registry");
  if (registry_->options().run_context) context_ = registry_->options().run_context();
}

HostToolRun::HostToolRun(std::shared_ptr<const HostToolRegistry> registry,
                         std::shared_ptr<const void> context)
    : registry_(std::move(registry)), context_(std::move(context)) {
  if (!registry_) throw InvalidArgument("a host-tool run needs a registry", "registry");
}

std::uint64_t HostToolRun::dispatched() const {
  std::lock_guard lock(mutex_);
  return dispatched_;
}
std::uint64_t HostToolRun::delivered() const {
  std::lock_guard lock(mutex_);
  return delivered_;
}
std::uint64_t HostToolRun::delivered_bytes() const {
  std::lock_guard lock(mutex_);
  return delivered_bytes_;
}

DispatchResult HostToolRun::dispatch(const json::Json& name, const json::Json& arguments,
                                     std::uint64_t framing_bytes) {
  const DispatchObserver& observer = registry_->options().observer;
  std::function<void(const DispatchResult&)> observed_end;
  if (observer) {
    try {
      observed_end = observer(*this, name);
    } catch (const std::exception& error) {
      spdlog::warn("a dispatch observer failed as the dispatch began: {}", failure_detail(error));
    } catch (...) {
      spdlog::warn("a dispatch observer failed as the dispatch began");
    }
  }
  auto end_observation = [&observed_end](const DispatchResult& outcome) {
    if (!observed_end) return;
    try {
      observed_end(outcome);
    } catch (const std::exception& error) {
      spdlog::warn("a dispatch observer failed as the dispatch ended: {}", failure_detail(error));
    } catch (...) {
      spdlog::warn("a dispatch observer failed as the dispatch ended");
    }
  };
  DispatchResult result;
  try {
    result = dispatch_unobserved(name, arguments, framing_bytes);
  } catch (...) {
    end_observation(refusal_result("Error: the host failed while dispatching this call"));
    throw;
  }
  end_observation(result);
  return result;
}

DispatchResult HostToolRun::dispatch_unobserved(const json::Json& name_value,
                                                const json::Json& arguments,
                                                std::uint64_t framing_bytes) {
  const HostToolRegistryOptions& options = registry_->options();
  const TransferLimits& limits = options.response_limits;

  // Checks that need no response run first, and a refused dispatch still counts.
  {
    std::lock_guard lock(mutex_);
    ++dispatched_;
    if (dispatched_ > options.max_dispatches_per_run) {
      return refusal_result("Error: this run's host-tool dispatch cap (" +
                            std::to_string(options.max_dispatches_per_run) +
                            ") is exhausted — finish with the results already delivered and "
                            "report what remains undone");
    }
  }
  if (!name_value.is_string()) {
    return refusal_result("Error: a host tool name must be a string, not " +
                          python_type_name(name_value));
  }
  const std::string& name = name_value.get_ref<const std::string&>();
  const HostTool* tool = registry_->resolve(name);
  if (!tool)
    return refusal_result("Error: " + quoted_tool_name(name) + " is not a registered host tool");
  if (!tool->declaration && options.require_declared) {
    return refusal_result("Error: " + quoted_tool_name(name) +
                          " declares no information flow, and this host serves only declared "
                          "tools");
  }
  if (tool->declaration && tool->declaration->identity == Identity::user) {
    return refusal_result("Error: " + quoted_tool_name(name) +
                          " exercises the user's identity, which cannot be served yet — serving "
                          "it needs per-run token minting, an audience-within-egress check, and "
                          "an ephemeral exec env channel");
  }
  if (!arguments.is_null() && !arguments.is_object()) {
    return refusal_result("Error: arguments for " + quoted_tool_name(name) +
                          " must be a JSON object of keyword arguments");
  }
  {
    std::lock_guard lock(mutex_);
    if (delivered_ + 1 > limits.max_files) {
      return refusal_result("Error: this run's host-tool response cap (" +
                            std::to_string(limits.max_files) +
                            ") is exhausted — finish with the results already delivered");
    }
    // delivered_bytes_ + 1 + framing > total, and 1 + framing > per-response, written so a
    // framing near the integer's top cannot wrap around.
    if (framing_bytes >= limits.max_total_bytes - delivered_bytes_) {
      return refusal_result("Error: this run's host-tool response budget (" +
                            std::to_string(limits.max_total_bytes) +
                            " bytes) is exhausted — finish with the results already delivered");
    }
    if (framing_bytes >= limits.max_bytes_per_file) {
      spdlog::warn("no response from host tool {} can fit the per-response cap of {} bytes",
                   quoted_tool_name(name), limits.max_bytes_per_file);
      return refusal_result("Error: no response from " + quoted_tool_name(name) +
                            " can fit the per-response cap (" +
                            std::to_string(limits.max_bytes_per_file) + " bytes)");
    }
    ++delivered_;  // the slot is held across the call
  }
  DispatchResult result;
  try {
    result = call_body(*tool, name, arguments.is_null() ? json::Json::object() : arguments,
                       framing_bytes);
  } catch (...) {
    std::lock_guard lock(mutex_);
    --delivered_;
    throw;
  }
  if (!result.ok()) {
    std::lock_guard lock(mutex_);
    --delivered_;  // refusals cost no response and no bytes
  }
  return result;
}

// Runs with the slot reserved; commits the bytes when the answer fits.
DispatchResult HostToolRun::call_body(const HostTool& tool, const std::string& name,
                                      const json::Json& arguments, std::uint64_t framing_bytes) {
  const TransferLimits& limits = registry_->options().response_limits;
  if (std::string why = binding_failure(tool, arguments); !why.empty()) {
    return refusal_result("Error: arguments do not bind to host tool " + quoted_tool_name(name) +
                          ": " + why);
  }
  auto cannot_carry = [&](const char* why) {
    spdlog::error("host tool {} returned a value that cannot be carried as JSON: {}",
                  quoted_tool_name(name), why);
    return refusal_result("Error: host tool " + quoted_tool_name(name) +
                          " returned a value that cannot be carried as JSON");
  };
  std::string value_json;
  std::optional<json::Json> value;
  try {
    if (tool.encoded_body) {
      value_json = tool.encoded_body(arguments, *this);
    } else {
      value = tool.body(arguments);
    }
  } catch (const HostToolValueNotJson& error) {
    return cannot_carry(error.what());
  } catch (const std::exception& error) {
    spdlog::error("host tool {} failed: {}", quoted_tool_name(name), failure_detail(error));
    return refusal_result("Error: host tool " + quoted_tool_name(name) +
                          " failed — the reason is in the host's log");
  } catch (...) {
    spdlog::error("host tool {} failed with an exception that is not a std::exception",
                  quoted_tool_name(name));
    return refusal_result("Error: host tool " + quoted_tool_name(name) +
                          " failed — the reason is in the host's log");
  }
  if (value) {
    if (has_non_finite(*value)) return cannot_carry("a non-finite number");
    try {
      value_json =
          value->dump(-1, ' ', /*ensure_ascii=*/false, json::Json::error_handler_t::strict);
    } catch (const json::Json::exception& error) {  // text that is not UTF-8
      return cannot_carry(error.what());
    }
  } else if (!json::Json::accept(value_json)) {
    return cannot_carry("the encoded answer is not one JSON value");
  }
  const std::uint64_t crossing = value_json.size() + framing_bytes;
  std::lock_guard lock(mutex_);
  if (crossing > limits.max_bytes_per_file) {
    return refusal_result("Error: the response of " + quoted_tool_name(name) + " (" +
                          std::to_string(crossing) + " bytes) exceeds the per-response cap (" +
                          std::to_string(limits.max_bytes_per_file) + " bytes) — ask for less");
  }
  if (delivered_bytes_ + crossing > limits.max_total_bytes) {
    return refusal_result(
        "Error: the response of " + quoted_tool_name(name) + " (" + std::to_string(crossing) +
        " bytes) would exceed this run's response budget (" +
        std::to_string(limits.max_total_bytes - delivered_bytes_) + " bytes left)");
  }
  delivered_bytes_ += crossing;
  DispatchResult result;
  result.value_json = std::move(value_json);
  return result;
}

}  // namespace airlock
