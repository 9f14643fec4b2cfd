#include "airlock/host_tools.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <set>
#include <stdexcept>

#include "airlock/errors.hpp"

namespace airlock {
namespace {

std::string single_quoted(std::string_view name) { return "'" + bounded_tool_name(name) + "'"; }

std::string json_type_name(const json::Json& value) {
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

bool matches(ToolParameter::Type type, const json::Json& value) {
  switch (type) {
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

// Why `arguments` do not bind to `tool`, or "" when they do.
std::string binding_failure(const HostTool& tool, const json::Json& arguments) {
  for (const auto& [name, value] : arguments.items()) {
    // A named copy for the lambda: clang before 16 cannot capture a structured binding.
    const std::string& key = name;
    auto parameter = std::find_if(tool.parameters.begin(), tool.parameters.end(),
                                  [&](const ToolParameter& p) { return p.name == key; });
    if (parameter == tool.parameters.end()) {
      return "unexpected argument " + single_quoted(name);
    }
    if (!matches(parameter->type, value)) {
      return "argument " + single_quoted(name) + " must be " + std::string(type_word(parameter->type)) +
             ", not " + json_type_name(value);
    }
  }
  for (const auto& parameter : tool.parameters) {
    if (parameter.required && !arguments.contains(parameter.name)) {
      return "missing required argument " + single_quoted(parameter.name);
    }
  }
  return "";
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

std::atomic<bool> g_warned{false};

}  // namespace

std::string bounded_tool_name(std::string_view name) {
  constexpr std::size_t kBound = 120;
  if (name.size() <= kBound) return std::string(name);
  // Cut on a UTF-8 boundary so the refusal stays valid text.
  std::size_t cut = kBound;
  while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80) --cut;
  return std::string(name.substr(0, cut)) + " (truncated)";
}

// ---- the registry ----------------------------------------------------------------------------

HostToolRegistry::HostToolRegistry(HostToolRegistryOptions options) : options_(std::move(options)) {
  if (options_.max_dispatches_per_run == 0) {
    throw InvalidArgument("max_dispatches_per_run must be at least 1; a registry that wants "
                          "nothing dispatched should be empty instead",
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
    throw InvalidArgument("the host-tool registry is sealed: its aggregate was taken, and a tool "
                          "registered now would reach nothing the spec was built from",
                          "sealed");
  }
  if (tool.name.empty()) throw InvalidArgument("a host tool needs a name", "name");
  if (tools_.contains(tool.name)) {
    throw InvalidArgument("host tool " + single_quoted(tool.name) +
                              " is already registered; a name is never replaced",
                          "name");
  }
  if (!tool.body) {
    throw InvalidArgument("host tool " + single_quoted(tool.name) + " has no body", "body");
  }
  std::set<std::string> parameter_names;
  for (const auto& parameter : tool.parameters) {
    if (parameter.name.empty() || !parameter_names.insert(parameter.name).second) {
      throw InvalidArgument("host tool " + single_quoted(tool.name) +
                                " has an empty or repeated parameter name",
                            "parameters");
    }
  }
  if (options_.require_declared && !tool.declaration) {
    throw HostToolNotDeclared("host tool " + single_quoted(tool.name) +
                              " declares no source, sink and identity, and this registry "
                              "requires every tool to answer all three");
  }
  const std::optional<Identity> identity =
      tool.declaration ? tool.declaration->identity : std::optional(Identity::app);
  if (identity && !options_.allowed_identities.contains(*identity)) {
    throw HostToolIdentityNotAllowed("host tool " + single_quoted(tool.name) + " exercises identity '" +
                                     std::string(to_string(*identity)) +
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

std::optional<HostToolDeclaration> HostToolRegistry::declaration_for(std::string_view name) const {
  std::lock_guard lock(mutex_);
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

DispatchResult HostToolRun::refuse(std::string sentence) {
  DispatchResult result;
  result.refusal = std::move(sentence);
  return result;
}

DispatchResult HostToolRun::dispatch(const json::Json& name_value, const json::Json& arguments,
                                     std::uint64_t framing_bytes) {
  const HostToolRegistryOptions& options = registry_->options();
  const TransferLimits& limits = options.response_limits;

  std::function<void()> observed_exit;
  if (options.observer) {
    try {
      observed_exit =
          options.observer(name_value.is_string() ? name_value.get_ref<const std::string&>() : "");
    } catch (const std::exception& error) {
      spdlog::warn("a dispatch observer failed on entry: {}", error.what());
    }
  }
  struct ObserverExit {
    std::function<void()>& exit;
    ~ObserverExit() {
      if (!exit) return;
      try {
        exit();
      } catch (const std::exception& error) {
        spdlog::warn("a dispatch observer failed on exit: {}", error.what());
      } catch (...) {
        spdlog::warn("a dispatch observer failed on exit");
      }
    }
  } observer_exit{observed_exit};

  // Checks that need no response run first, and a refused dispatch still counts.
  {
    std::lock_guard lock(mutex_);
    ++dispatched_;
    if (dispatched_ > options.max_dispatches_per_run) {
      return refuse("Error: this run's host-tool dispatch cap (" +
                    std::to_string(options.max_dispatches_per_run) +
                    ") is exhausted — finish with the results already delivered and report what "
                    "remains undone");
    }
  }
  if (!name_value.is_string()) {
    return refuse("Error: a host tool name must be a string, not " + json_type_name(name_value));
  }
  const std::string& name = name_value.get_ref<const std::string&>();
  const HostTool* tool = registry_->resolve(name);
  if (!tool) return refuse("Error: " + single_quoted(name) + " is not a registered host tool");
  if (!tool->declaration && options.require_declared) {
    return refuse("Error: " + single_quoted(name) + " declares no information flow, and this host "
                                             "serves only declared tools");
  }
  if (tool->declaration && tool->declaration->identity == Identity::user) {
    return refuse("Error: " + single_quoted(name) +
                  " exercises the user's identity, which cannot be served yet — serving it needs "
                  "per-run token minting, an audience-within-egress check, and an ephemeral exec "
                  "env channel");
  }
  if (!arguments.is_null() && !arguments.is_object()) {
    return refuse("Error: arguments for " + single_quoted(name) +
                  " must be a JSON object of keyword arguments");
  }
  {
    std::lock_guard lock(mutex_);
    if (delivered_ + 1 > limits.max_files) {
      return refuse("Error: this run's host-tool response cap (" +
                    std::to_string(limits.max_files) +
                    ") is exhausted — finish with the results already delivered");
    }
    if (delivered_bytes_ + 1 + framing_bytes > limits.max_total_bytes) {
      return refuse("Error: this run's host-tool response budget (" +
                    std::to_string(limits.max_total_bytes) +
                    " bytes) is exhausted — finish with the results already delivered");
    }
    if (1 + framing_bytes > limits.max_bytes_per_file) {
      spdlog::warn("no response from host tool {} can fit the per-response cap of {} bytes",
                   bounded_tool_name(name), limits.max_bytes_per_file);
      return refuse("Error: no response from " + single_quoted(name) + " can fit the per-response cap (" +
                    std::to_string(limits.max_bytes_per_file) + " bytes)");
    }
    ++delivered_;  // the slot is held across the call
  }
  bool committed = false;
  struct SlotReturn {
    HostToolRun& run;
    bool& committed;
    ~SlotReturn() {
      if (committed) return;
      std::lock_guard lock(run.mutex_);
      --run.delivered_;
    }
  } slot_return{*this, committed};

  const json::Json bound = arguments.is_null() ? json::Json::object() : arguments;
  if (std::string why = binding_failure(*tool, bound); !why.empty()) {
    return refuse("Error: arguments do not bind to host tool " + single_quoted(name) + ": " +
                  bounded_tool_name(why));
  }
  json::Json value;
  try {
    value = tool->body(bound);
  } catch (const std::exception& error) {
    spdlog::error("host tool {} failed: {}", bounded_tool_name(name), error_detail(error));
    return refuse("Error: host tool " + single_quoted(name) + " failed — the reason is in the host's log");
  } catch (...) {
    spdlog::error("host tool {} failed with a non-standard exception", bounded_tool_name(name));
    return refuse("Error: host tool " + single_quoted(name) + " failed — the reason is in the host's log");
  }
  std::string value_json;
  try {
    if (has_non_finite(value)) throw std::invalid_argument("a non-finite number");
    value_json = value.dump(-1, ' ', /*ensure_ascii=*/false, json::Json::error_handler_t::strict);
  } catch (const std::exception& error) {
    spdlog::error("host tool {} returned a value that is not JSON: {}", bounded_tool_name(name),
                  error.what());
    return refuse("Error: host tool " + single_quoted(name) +
                  " returned a value that cannot be carried as JSON");
  }
  const std::uint64_t crossing = value_json.size() + framing_bytes;
  std::lock_guard lock(mutex_);
  if (crossing > limits.max_bytes_per_file) {
    return refuse("Error: the response of " + single_quoted(name) + " (" + std::to_string(crossing) +
                  " bytes) exceeds the per-response cap (" +
                  std::to_string(limits.max_bytes_per_file) + " bytes) — ask for less");
  }
  if (delivered_bytes_ + crossing > limits.max_total_bytes) {
    return refuse("Error: the response of " + single_quoted(name) + " (" + std::to_string(crossing) +
                  " bytes) would exceed this run's response budget (" +
                  std::to_string(limits.max_total_bytes - delivered_bytes_) + " bytes left)");
  }
  delivered_bytes_ += crossing;
  committed = true;
  DispatchResult result;
  result.value_json = std::move(value_json);
  return result;
}

}  // namespace airlock
