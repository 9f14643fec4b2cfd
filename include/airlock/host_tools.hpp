// Host tools: functions a guest program may call back into the host, under caps.
//
// This is the one capability where trust crosses *outward*: a dispatched body runs in the host
// process, with the host's privileges, driven by model-written code. What bounds it:
//   - the registry starts empty: nothing is dispatchable until a developer registers it;
//   - every tool answers three information-flow questions with no defaults (source integrity,
//     outbound sink, identity) — an unanswered leg is a compile error, `nullopt` is an answer;
//   - `aggregate()` seals the registry as it derives policy from it, so the spec built from the
//     aggregate and the dispatch surface cannot diverge afterwards;
//   - each run is bounded by a dispatch cap (refusals included) and by response caps, all checked
//     before a tool's body runs — a body with side effects must not run for a response that
//     cannot be delivered;
//   - arguments are validated here, at the one door, never in a guest shim.
//
// `Identity::app` is not the safe option, only the declared one: it is the application's full
// authority. Least privilege comes from what a host registers, never from what it declares.
// `Identity::user` is declarable but refused at dispatch: serving it needs per-run token minting.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "airlock/json.hpp"
#include "airlock/records.hpp"

namespace airlock {

inline constexpr std::uint64_t kDefaultMaxDispatchesPerRun = 16;
// `{"value": ` + `}` — what the over-exec transport wraps around each answer.
inline constexpr std::uint64_t kResponseFramingBytes = 11;

// A tool's answers to the three information-flow questions. There are deliberately no default
// arguments: each leg must be answered, and `nullopt` means "not that role".
struct HostToolDeclaration {
  HostToolDeclaration(std::optional<SourceIntegrity> source_integrity,
                      std::optional<std::string> outbound_sink,
                      std::optional<Identity> exercised_identity)
      : source(source_integrity), sink(std::move(outbound_sink)), identity(exercised_identity) {}

  std::optional<SourceIntegrity> source;  // trust tier of what the tool brings in
  std::optional<std::string> sink;        // opaque confidentiality cap of where it sends data
  std::optional<Identity> identity;       // whose authority it exercises
};

// One parameter of a tool, bound by name. The argument's JSON type is checked at dispatch.
struct ToolParameter {
  enum class Type : std::uint8_t { string, integer, number, boolean, object, array, any };
  std::string name;
  Type type = Type::any;
  bool required = true;
  std::string description;
};

struct HostTool {
  std::string name;
  std::string description;
  std::vector<ToolParameter> parameters;  // an argument not listed here is refused
  // Called with a JSON object holding exactly the validated arguments; returns the JSON value
  // handed back to the guest. Exceptions become a fixed refusal (the reason goes to the log).
  std::function<json::Json(const json::Json& arguments)> body;
  std::optional<HostToolDeclaration> declaration;  // nullopt: unstamped
};

// What a host's policy reads off a sealed registry.
struct HostToolAggregate {
  // The weakest declared source (untrusted if any tool is unstamped); nullopt when none declared.
  std::optional<SourceIntegrity> result_integrity;
  std::vector<std::string> outbound_caps;  // declared sinks, verbatim, sorted, de-duplicated
  IdentitySet identities;                  // `app` for each unstamped tool, plus declared ones
  bool requires_approval = false;          // a `user` tool is registered
  bool has_undeclared = false;
};

// Observes each dispatch: called as it begins; the returned callable (if any) is called as it
// ends. Its failures are logged and never reach the dispatch.
using DispatchObserver = std::function<std::function<void()>(std::string_view tool_name)>;

struct HostToolRegistryOptions {
  bool require_declared = false;
  IdentitySet allowed_identities{Identity::app};
  std::uint64_t max_dispatches_per_run = kDefaultMaxDispatchesPerRun;
  TransferLimits response_limits = kDefaultTransferLimits;
  DispatchObserver observer;
};

class HostToolRegistry {
 public:
  // Refuses (InvalidArgument) a dispatch cap of 0 ("wants nothing dispatched? use an empty
  // registry") and any response-limit leg of 0.
  explicit HostToolRegistry(HostToolRegistryOptions options = {});

  // In order: a sealed registry refuses (InvalidArgument); an empty or duplicate name refuses
  // (never replaced); a body-less tool refuses; with `require_declared`, an unstamped tool raises
  // HostToolNotDeclared; the effective identity (app when unstamped) must be allowed, else
  // HostToolIdentityNotAllowed. The declaration is captured here and never read again.
  void register_tool(HostTool tool);

  std::vector<std::string> names() const;
  std::size_t size() const;
  bool sealed() const;
  // The one door: the registered tool, or nullptr.
  const HostTool* resolve(std::string_view name) const;
  std::optional<HostToolDeclaration> declaration_for(std::string_view name) const;
  const HostToolRegistryOptions& options() const noexcept { return options_; }

  // Seals the registry and derives the aggregate. Idempotent.
  HostToolAggregate aggregate();

 private:
  HostToolRegistryOptions options_;
  mutable std::mutex mutex_;
  std::map<std::string, HostTool, std::less<>> tools_;
  bool sealed_ = false;
};

// The outcome of one dispatch: exactly one of the two is set. A refusal is a fixed, bounded
// sentence safe to hand to model-written code; it never carries a tool's exception text.
struct DispatchResult {
  std::optional<std::string> value_json;
  std::optional<std::string> refusal;
  bool ok() const noexcept { return value_json.has_value(); }
};

// One guest program's run: its dispatch count, and what it has been delivered. Thread-safe; the
// per-dispatch slot is reserved before the body runs and returned if the outcome is not ok.
class HostToolRun {
 public:
  explicit HostToolRun(std::shared_ptr<const HostToolRegistry> registry);

  // `name` and `arguments` arrive as the guest sent them (any JSON). `framing_bytes` is what the
  // transport adds around the answer. Refusals are results; only a transport error — not a
  // guest's — raises.
  DispatchResult dispatch(const json::Json& name, const json::Json& arguments,
                          std::uint64_t framing_bytes = 0);

  std::uint64_t dispatched() const;
  std::uint64_t delivered() const;
  std::uint64_t delivered_bytes() const;
  const HostToolRegistry& registry() const noexcept { return *registry_; }

 private:
  DispatchResult refuse(std::string sentence);

  std::shared_ptr<const HostToolRegistry> registry_;
  mutable std::mutex mutex_;
  std::uint64_t dispatched_ = 0;
  std::uint64_t delivered_ = 0;  // responses reserved or committed
  std::uint64_t delivered_bytes_ = 0;
};

// A name as it may appear in a refusal: at most 120 characters, then " (truncated)".
std::string bounded_tool_name(std::string_view name);

}  // namespace airlock
