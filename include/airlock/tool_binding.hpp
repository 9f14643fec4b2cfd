// Binding a sandboxed workload as a tool an agent framework can attach — framework-neutral.
//
// A host builds a `SandboxTool` with `sandboxed_tool(...)` and wraps it in its framework's own
// tool type (the Python bindings do this for Microsoft Agent Framework and Deep Agents). What the
// binding guarantees, whatever the framework:
//
//   - **The key is the host's.** Scope and thread are read from host callables on every call,
//     never from the model and never defaulted: a call with no thread is refused, there is no
//     placeholder key.
//   - **Failures reach the model as fixed sentences.** Provider detail (endpoints, tenants, host
//     paths) goes to the log only.
//   - **A call owns a guest path, and it is reclaimed however the call ends** — after a result,
//     a refusal or an exception. A removal that did not happen is handed to `on_reclaim_failure`
//     as a ReclaimFailure: the next call in the warm sandbox could read what was left, so that is
//     where the host decides on disposal.
//   - **Calls are admitted through the router's call lifecycle**, and a call whose command's end
//     is unknown condemns the instance it used (the delete runs when the last call leaves).
//   - **Information flow is declared as data** (`declarations()`), for the host framework's own
//     policy engine.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "airlock/json.hpp"
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

struct ToolBindingOptions {
  SandboxRouter* router = nullptr;  // nullptr or a disabled router: nothing is attached
  CallerContext context;
  std::string agent_dir;
  std::string name;         // the tool's name as the model sees it
  std::string description;  // as the model sees it
  ApprovalMode approval_mode = ApprovalMode::never_require;
  // Information-flow declarations (see `declarations()`).
  std::optional<std::string> source_integrity = std::string("trusted");
  std::optional<std::string> outbound_max_confidentiality;
  bool has_output_sink = false;    // the kind lands artifacts through a host sink
  bool also_carries_out = false;   // the kind carries data out by other means
  // Called with each call-owned path that could not be removed. Its failures are logged.
  std::function<void(const ReclaimFailure&)> on_reclaim_failure;
  Milliseconds reclaim_timeout{30'000};
  Milliseconds admission_timeout{30'000};
};

// What a tool body gets for one call.
class SandboxToolCall {
 public:
  // The host's key for this call, or the fixed refusal sentence when there is no thread.
  std::variant<SandboxKey, std::string> key();
  // Admission + acquire through the router; on failure, the fixed sentence of the ladder.
  std::variant<std::shared_ptr<Sandbox>, std::string> acquire(const SandboxKey& key);
  // `<work_dir>/<12 hex>`, fixed for the call; nothing is created in the guest. Reclaimed (with
  // everything under it) when the call returns.
  const std::string& guest_call_path();
  // The command's end is unknown (timeout, overflow, cancellation): the instance goes once the
  // last call in flight leaves.
  void condemn() noexcept;
  // The listing that pins names a kind may substitute, or the fixed refusal sentence.
  std::variant<std::vector<std::string>, std::string> list_files(const std::string& store);

  const SandboxSpec& spec() const noexcept { return *spec_; }
  const std::string& tool_name() const noexcept { return options_->name; }

 private:
  friend class SandboxTool;
  SandboxToolCall(const ToolBindingOptions* options, std::shared_ptr<const SandboxSpec> spec)
      : options_(options), spec_(std::move(spec)) {}

  const ToolBindingOptions* options_;
  std::shared_ptr<const SandboxSpec> spec_;
  std::optional<SandboxKey> key_;
  std::optional<CallAdmission> admission_;
  std::string call_path_;
};

// The body: given the call and the model's arguments, the text the model sees.
using SandboxToolBody = std::function<std::string(SandboxToolCall& call, const json::Json& args)>;

class SandboxTool {
 public:
  const std::string& name() const noexcept { return options_.name; }
  const std::string& description() const noexcept { return options_.description; }
  ApprovalMode approval_mode() const noexcept { return options_.approval_mode; }
  const SandboxSpec& spec() const noexcept { return *spec_; }

  // {"source_integrity": …} when declared; {"max_allowed_confidentiality": cap} only when a cap
  // is given and the tool can carry something out (an egress allowlist payload, a sink that
  // lands artifacts, or `also_carries_out`).
  json::Json declarations() const;

  // One call. Never throws for anything the body or the sandbox did: the result is text.
  std::string invoke(const json::Json& arguments) const;

 private:
  friend std::optional<SandboxTool> sandboxed_tool(ToolBindingOptions options, SandboxSpec spec,
                                                   SandboxToolBody body);
  SandboxTool(ToolBindingOptions options, SandboxSpec spec, SandboxToolBody body)
      : options_(std::move(options)),
        spec_(std::make_shared<const SandboxSpec>(std::move(spec))),
        body_(std::move(body)) {}

  ToolBindingOptions options_;
  std::shared_ptr<const SandboxSpec> spec_;  // shared with every call, never copied per call
  SandboxToolBody body_;
};

// The attach gate, in order: no router or a disabled one → nullopt (attach nothing); a spec that
// lands artifacts without a sink → OutputSinkRequired; a spec that declares outputs without
// `files_out` in requires → InvalidArgument; a non-positive reclaim timeout → InvalidArgument;
// `router.ensure_can_serve(spec)` (any refusal); a work_dir that is the guest root →
// InvalidArgument (a call path one component deep would fail the reclaim guard every time).
std::optional<SandboxTool> sandboxed_tool(ToolBindingOptions options, SandboxSpec spec,
                                          SandboxToolBody body);

// The fixed sentences the model may see.
namespace binding_sentences {
inline constexpr const char* kNoBackend = "Error: no sandbox backend is configured — degrading to T0";
inline constexpr const char* kUnavailable =
    "Error: sandbox unavailable — degrading to T0 (LLM self-check only)";
std::string no_thread(std::string_view tool_name);
}  // namespace binding_sentences

}  // namespace airlock
