// Binding a sandboxed workload as a tool an agent framework can attach — framework-neutral.
//
// A host builds a `SandboxTool` with `sandboxed_tool(...)` and wraps it in its framework's own
// tool type (the Python bindings do this for Microsoft Agent Framework and Deep Agents). What the
// binding guarantees, whatever the framework:
//
//   - **The key is the host's.** Scope and thread are read from host callables on every
//     `key()`, never from the model and never defaulted: a call with no thread is refused, there
//     is no placeholder key.
//   - **The sandbox ladder reaches the model as fixed sentences.** `acquire` answers a failure
//     with one of four sentences; provider detail (endpoints, tenants, host paths) goes to the
//     log only. The body's own exceptions are the host's: they propagate out of `invoke`, after
//     the call has been cleaned up (a kind maps its own failures to its own sentences).
//   - **A call owns a guest path in every sandbox it acquired, and it is reclaimed however the
//     call ends** — after a result, a refusal or an exception. A removal that did not happen is
//     handed to `on_reclaim_failure` as a ReclaimFailure, one per sandbox: the next call in that
//     warm sandbox could read what was left, so that is where the host decides on disposal.
//   - **Calls are admitted through the router's call lifecycle**, one admission per key the call
//     acquires, and a call whose command's end is unknown condemns the instance it used (the
//     delete runs when the last call leaves).
//   - **Information flow is declared as data** (`declarations()`), for the host framework's own
//     policy engine.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "airlock/json.hpp"
#include "airlock/outputs.hpp"
#include "airlock/router.hpp"

namespace airlock {

// Where the key comes from: callables read per call, never values. `list_files` is the injection
// pin for kinds that share files from a host store: only names it lists may be used.
struct CallerContext {
  std::function<std::string()> current_scope;
  std::function<std::optional<std::string>()> current_thread_id;
  std::function<std::vector<std::string>(const std::string& store)> list_files;
};

enum class ApprovalMode : std::uint8_t { never_require, always_require };

// What the derived information-flow declarations are computed from.
struct DeclarationOptions {
  std::optional<std::string> source_integrity = std::string("trusted");
  std::optional<std::string> outbound_max_confidentiality;
  bool has_output_sink = false;   // a sink is wired (it carries out what the spec lands)
  bool also_carries_out = false;  // the workload carries data out by other means
};

// The information-flow labels of a tool over `spec`: {"source_integrity": …} when declared, and
// {"max_allowed_confidentiality": cap} only when a cap is given and the tool can carry something
// out — an egress allowlist payload, a sink with something to land, or `also_carries_out`. The
// test is on the allowlist's hosts, not the mode: an `unrestricted` spec gets no cap (a known
// gap, kept with the reference). The cap is an opaque host string, never ranked.
json::Json sandbox_tool_declarations(const SandboxSpec& spec, const DeclarationOptions& options);

struct ToolBindingOptions {
  SandboxRouter* router = nullptr;  // nullptr or a disabled router: nothing is attached
  CallerContext context;
  std::string agent_dir;
  std::string name;         // the tool's name as the model sees it
  std::string description;  // as the model sees it
  ApprovalMode approval_mode = ApprovalMode::never_require;
  // Explicit information-flow declarations: replace the derived ones entirely. Refused together
  // with `output_sink` (the derived declarations are what a sink changes).
  std::optional<json::Json> declarations;
  // The derived declarations (see `sandbox_tool_declarations`).
  std::optional<std::string> source_integrity = std::string("trusted");
  std::optional<std::string> outbound_max_confidentiality;
  bool also_carries_out = false;  // the kind carries data out by other means
  // Where the kind lands artifacts; the body reaches it as `call.sink()`. Required when the spec
  // lands anything.
  std::optional<OutputSink> output_sink;
  // Called with each call-owned path that could not be removed, on a thread of its own and
  // bounded by `reclaim_timeout`: past it the call logs and returns (the hook runs on). A hook
  // that throws a std::exception is logged and ignored; anything else it throws (a binding's
  // cancellation, e.g. Python's CancelledError or KeyboardInterrupt) is logged and propagates
  // out of `invoke`, abandoning the reclaims not yet made.
  std::function<void(const ReclaimFailure&)> on_reclaim_failure;
  // The bound on each reclaim's removal and on each `on_reclaim_failure` call; after a body that
  // was cancelled (threw something that is not a std::exception), at most 2 s.
  Milliseconds reclaim_timeout{30'000};
  Milliseconds admission_timeout{30'000};
};

// What a tool body gets for one call. Copies share the call: a handle kept past the call's end
// stays safe to hold, and every method but the accessors then throws std::logic_error.
// Thread-safe: a body may acquire from several threads at once.
class SandboxToolCall {
 public:
  // The host's key, read from the caller context now, or the fixed refusal sentence when there
  // is no thread. An exception from the host's callables propagates.
  std::variant<SandboxKey, std::string> key();
  // Admission + acquire through the router, once per key for the call: a second acquire with
  // the same key returns the same sandbox; another key gets its own admission and its own
  // sandbox, and the call path is reclaimed in each. On failure, the ladder's fixed sentence:
  // not installed, no backend, an InvalidArgument's own message, or "unavailable".
  std::variant<std::shared_ptr<Sandbox>, std::string> acquire(const SandboxKey& key);
  // `<work_dir>/<12 hex>`, fixed for the call; nothing is created in the guest. Reclaimed (with
  // everything under it) in every sandbox the call acquired, when the call ends.
  std::string guest_call_path();
  // The command's end is unknown (timeout, overflow, cancellation): the instance goes once the
  // last call in flight leaves. Without a key, every sandbox this call acquired.
  void condemn() noexcept;
  void condemn(const SandboxKey& key) noexcept;
  // The listing that pins names a kind may substitute, or the fixed refusal sentence.
  std::variant<std::vector<std::string>, std::string> list_files(const std::string& store);

  // The sink given to sandboxed_tool, or null.
  const OutputSink* sink() const noexcept;
  const SandboxSpec& spec() const noexcept;
  const std::string& tool_name() const noexcept;
  // True once the body has returned: nothing more is recorded.
  bool ended() const noexcept;

  struct State;  // the call's record: shared by every copy of the handle

 private:
  friend class SandboxTool;
  explicit SandboxToolCall(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

// The body: given the call and the model's arguments, the text the model sees.
using SandboxToolBody = std::function<std::string(SandboxToolCall& call, const json::Json& args)>;

class SandboxTool {
 public:
  const std::string& name() const noexcept;
  const std::string& description() const noexcept;
  ApprovalMode approval_mode() const noexcept;
  const SandboxSpec& spec() const noexcept;

  // The explicit declarations when given, else `sandbox_tool_declarations` over the spec.
  json::Json declarations() const;

  // One call: the body's text. The ladder's failures are text, but an exception the body
  // throws propagates — after the call path has been reclaimed in every sandbox the call
  // acquired and its admissions released. An `on_reclaim_failure` cancellation propagates too.
  std::string invoke(const json::Json& arguments) const;

  struct Binding;  // the host's configuration, fixed at attach and shared with every call

 private:
  friend std::optional<SandboxTool> sandboxed_tool(ToolBindingOptions options, SandboxSpec spec,
                                                   SandboxToolBody body);
  explicit SandboxTool(std::shared_ptr<const Binding> binding) : binding_(std::move(binding)) {}
  std::shared_ptr<const Binding> binding_;
};

// The attach gate, in this order:
//   1. no router or a disabled one → nullopt (attach nothing), before anything else is looked at;
//   2. explicit `declarations` together with `output_sink` → InvalidArgument;
//   3. the spec lands artifacts and there is no sink → OutputSinkRequired, naming what lands;
//   4. the spec declares outputs (either disposition) or names them at call time, without
//      `files_out` in requires → InvalidArgument;
//   5. a reclaim timeout that is not positive → InvalidArgument;
//   6. `router.ensure_can_serve(spec)`: any refusal;
//   7. the binding is built (a body is required: InvalidArgument);
//   8. a work_dir that is the guest root → InvalidArgument (a call path one component deep would
//      fail the reclaim's depth guard every time).
std::optional<SandboxTool> sandboxed_tool(ToolBindingOptions options, SandboxSpec spec,
                                          SandboxToolBody body);

// Remove a call-owned guest path and everything under it; nullopt when it is gone, else why not
// (the stack's own words, for the host's log and its ReclaimFailure). Refused without touching
// the guest: a path that does not confine to `working_directory`, the working directory itself,
// and a path fewer than two components deep. The removal is an argv `rm -rf -- <path>` run from
// "/" under `timeout`; its exception or non-zero exit is the reason. Never throws.
std::optional<std::string> reclaim_guest_path(Sandbox& sandbox, std::string_view path,
                                              std::string_view working_directory,
                                              Milliseconds timeout) noexcept;

// The fixed sentences the model may see.
namespace binding_sentences {
inline constexpr const char* kNotInstalled =
    "Error: the sandbox backend is not installed — degrading to T0";
inline constexpr const char* kNoBackend = "Error: no sandbox backend is configured — degrading to T0";
inline constexpr const char* kUnavailable =
    "Error: sandbox unavailable — degrading to T0 (LLM self-check only)";
inline constexpr const char* kBusy =
    "Error: the sandbox is busy with this conversation's other calls — try again";
std::string no_thread(std::string_view tool_name);
std::string list_failed(std::string_view reason);
}  // namespace binding_sentences

}  // namespace airlock
