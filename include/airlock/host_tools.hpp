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
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "airlock/json.hpp"
#include "airlock/records.hpp"

namespace airlock {

inline constexpr std::uint64_t kDefaultMaxDispatchesPerRun = 16;
// `{"value": ` + `}` — what the over-exec transport wraps around each answer.
inline constexpr std::uint64_t kResponseFramingBytes = 11;

class HostToolRun;

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
  // `null` is accepted whatever `type` says (a Python parameter whose default is None).
  bool accepts_null = false;
};

// Thrown by a body whose value has no JSON form (a non-finite number, text that is not UTF-8, a
// host-language object JSON cannot spell). The guest gets "… returned a value that cannot be
// carried as JSON" instead of the "failed" refusal, and the reason goes to the log.
class HostToolValueNotJson : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct HostTool {
  std::string name;
  std::string description;
  std::vector<ToolParameter> parameters;  // an argument not listed here is refused…
  // Called with a JSON object holding exactly the validated arguments; returns the JSON value
  // handed back to the guest. Exceptions become a fixed refusal (the reason goes to the log).
  std::function<json::Json(const json::Json& arguments)> body;
  std::optional<HostToolDeclaration> declaration;  // nullopt: unstamped
  // Instead of `body`: returns the value already encoded as JSON text (what a host language's own
  // encoder wrote, key order and all), and learns the run it serves — `run.context()` carries
  // what the host captured as the run started. The door checks the text is one JSON value.
  std::function<std::string(const json::Json& arguments, const HostToolRun& run)> encoded_body;
  bool accepts_any_keyword = false;  // …unless the tool takes any keyword (Python's **kwargs)
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

// The outcome of one dispatch: exactly one of the two is set. A refusal is a fixed, bounded
// sentence safe to hand to model-written code; it never carries a tool's exception text.
struct DispatchResult {
  std::optional<std::string> value_json;
  std::optional<std::string> refusal;
  bool ok() const noexcept { return value_json.has_value(); }
};

// Observes each dispatch, for a host's audit log: called as the dispatch begins, with the run and
// the name as the guest sent it (any JSON); the callable it returns (if any) is called as the
// dispatch ends, with its outcome. Refused dispatches are observed too. Failures of either are
// logged and never reach the dispatch.
using DispatchObserver = std::function<std::function<void(const DispatchResult& outcome)>(
    const HostToolRun& run, const json::Json& name)>;

struct HostToolRegistryOptions {
  bool require_declared = false;
  IdentitySet allowed_identities{Identity::app};
  std::uint64_t max_dispatches_per_run = kDefaultMaxDispatchesPerRun;
  TransferLimits response_limits = kDefaultTransferLimits;
  DispatchObserver observer;
  // Called once as each run starts, on the thread that starts it; what it returns rides with the
  // run (`HostToolRun::context()`) to every body of that run, whichever thread serves it. A
  // binding captures the host's event loop here.
  std::function<std::shared_ptr<const void>()> run_context;
};

class HostToolRegistry {
 public:
  // Refuses (InvalidArgument) a dispatch cap of 0 ("wants nothing dispatched? use an empty
  // registry") and any response-limit leg of 0.
  explicit HostToolRegistry(HostToolRegistryOptions options = {});

  // In order: a sealed registry refuses (InvalidArgument); an empty or duplicate name refuses
  // (never replaced); a body-less tool (or one with both bodies) refuses; with
  // `require_declared`, an unstamped tool raises HostToolNotDeclared; the effective identity (app
  // when unstamped) must be allowed, else HostToolIdentityNotAllowed. The declaration is captured
  // here and never read again.
  void register_tool(HostTool tool);

  std::vector<std::string> names() const;
  std::size_t size() const;
  bool sealed() const;
  // The one door: the registered tool, or nullptr.
  const HostTool* resolve(std::string_view name) const;
  // The declaration captured at registration (nullopt: unstamped or unknown). Seals the registry,
  // as `aggregate()` does: a policy read off the declarations must not be outgrown afterwards.
  std::optional<HostToolDeclaration> declaration_for(std::string_view name);
  const HostToolRegistryOptions& options() const noexcept { return options_; }

  // Seals the registry and derives the aggregate. Idempotent.
  HostToolAggregate aggregate();

 private:
  HostToolRegistryOptions options_;
  mutable std::mutex mutex_;
  std::map<std::string, HostTool, std::less<>> tools_;
  bool sealed_ = false;
};

// One guest program's run: its dispatch count, and what it has been delivered. Thread-safe; the
// per-dispatch slot is reserved before the body runs and returned if the outcome is not ok.
// Held by a shared_ptr, a run can be handed to an observer that outlives the dispatch (the
// bindings do); on the stack it works the same, and an observer sees it only while it runs.
class HostToolRun : public std::enable_shared_from_this<HostToolRun> {
 public:
  // The context is the registry's `run_context()` (called here), or none.
  explicit HostToolRun(std::shared_ptr<const HostToolRegistry> registry);
  // The context is `context`; the registry's `run_context` is not called.
  HostToolRun(std::shared_ptr<const HostToolRegistry> registry,
              std::shared_ptr<const void> context);
  HostToolRun(const HostToolRun&) = delete;
  HostToolRun& operator=(const HostToolRun&) = delete;

  // `name` and `arguments` arrive as the guest sent them (any JSON). `framing_bytes` is what the
  // transport adds around the answer. Refusals are results; only a transport error — not a
  // guest's — raises. A dispatch in progress is never cut short by a transport's deadline.
  DispatchResult dispatch(const json::Json& name, const json::Json& arguments,
                          std::uint64_t framing_bytes = 0);

  std::uint64_t dispatched() const;
  std::uint64_t delivered() const;
  std::uint64_t delivered_bytes() const;
  const HostToolRegistry& registry() const noexcept { return *registry_; }
  const std::shared_ptr<const HostToolRegistry>& shared_registry() const noexcept {
    return registry_;
  }
  const std::shared_ptr<const void>& context() const noexcept { return context_; }

 private:
  DispatchResult dispatch_unobserved(const json::Json& name, const json::Json& arguments,
                                     std::uint64_t framing_bytes);
  DispatchResult call_body(const HostTool& tool, const std::string& name,
                           const json::Json& arguments, std::uint64_t framing_bytes);

  std::shared_ptr<const HostToolRegistry> registry_;
  std::shared_ptr<const void> context_;
  mutable std::mutex mutex_;
  std::uint64_t dispatched_ = 0;
  std::uint64_t delivered_ = 0;  // responses reserved or committed
  std::uint64_t delivered_bytes_ = 0;
};

// A name as it may appear in a refusal: at most 120 characters (code points), then
// " (truncated)".
std::string bounded_tool_name(std::string_view name);

// `text` as Python's repr() spells a str — the quoting the guest's own language uses, so a
// refusal names a tool exactly as the guest would write it (`'lookup'`, `"it's"`, `'\n'`).
std::string python_repr(std::string_view text);

}  // namespace airlock
