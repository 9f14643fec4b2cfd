#include "airlock/tool_binding.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "airlock/errors.hpp"
#include "airlock/paths.hpp"

namespace airlock {
namespace binding_sentences {
std::string no_thread(std::string_view tool_name) {
  return "Error: no active thread context — " + std::string(tool_name) +
         " must be called from within a thread";
}
std::string list_failed(std::string_view reason) {
  return "Error: could not list the file store: " + std::string(reason);
}
}  // namespace binding_sentences

struct SandboxTool::Binding {
  ToolBindingOptions options;
  std::shared_ptr<const SandboxSpec> spec;  // shared with every admission, never copied per call
  SandboxToolBody body;
};

namespace {
// A handle used after its call ended (a logic error of the body's, never a sandbox failure).
class ToolCallEnded : public std::logic_error {
 public:
  explicit ToolCallEnded(const char* what)
      : std::logic_error(std::string(what) + ": this tool call has ended") {}
};
}  // namespace

// One key's admission and the sandbox it acquired.
struct AcquiredSandbox {
  SandboxKey key;
  CallAdmission admission;
  std::shared_ptr<Sandbox> sandbox;
};

struct SandboxToolCall::State {
  explicit State(std::shared_ptr<const SandboxTool::Binding> of) : binding(std::move(of)) {}

  std::shared_ptr<const SandboxTool::Binding> binding;
  std::mutex mutex;
  bool ended = false;
  std::string call_path;                  // assigned on first ask
  std::vector<AcquiredSandbox> acquired;  // in the order the keys were first acquired

  const ToolBindingOptions& options() const { return binding->options; }
  AcquiredSandbox* find(const SandboxKey& key) {
    for (auto& entry : acquired) {
      if (entry.key == key) return &entry;
    }
    return nullptr;
  }
  // The caller holds `mutex`.
  void refuse_if_ended(const char* what) const {
    if (ended) throw ToolCallEnded(what);
  }
};

namespace {

std::string random_hex12() {
  unsigned char bytes[6];
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  const bool ok = fd >= 0 && ::read(fd, bytes, sizeof bytes) == static_cast<ssize_t>(sizeof bytes);
  if (fd >= 0) ::close(fd);
  if (!ok) throw SystemError("could not read /dev/urandom", errno);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char byte : bytes) {
    out.push_back(kHex[byte >> 4]);
    out.push_back(kHex[byte & 0x0f]);
  }
  return out;
}

// The text of an exception as the reference's `str(exc)`: our message, or what().
std::string reason_of(const std::exception& error) {
  if (const auto* ours = dynamic_cast<const Error*>(&error)) return ours->message();
  return error.what();
}

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.pop_back();
  }
  return text;
}

// How one `on_reclaim_failure` call ended.
enum class HookEnd : std::uint8_t { returned, failed, cancelled, timed_out };
struct HookOutcome {
  HookEnd end = HookEnd::returned;
  std::exception_ptr error;
};

HookOutcome classify(std::exception_ptr error) {
  if (!error) return {};
  try {
    std::rethrow_exception(error);
  } catch (const std::exception&) {
    return {HookEnd::failed, error};
  } catch (...) {
    return {HookEnd::cancelled, error};
  }
}

// Runs the host's hook on a thread of its own, so a hook that never returns cannot hold the
// call past `bound`: the call goes on and the thread finishes whenever the hook does.
HookOutcome call_hook_bounded(const std::function<void(const ReclaimFailure&)>& hook,
                              const ReclaimFailure& failure, Milliseconds bound) {
  struct Run {
    std::mutex mutex;
    std::condition_variable finished;
    bool done = false;
    std::exception_ptr error;
  };
  auto run = std::make_shared<Run>();
  try {
    std::thread([run, hook, failure] {
      std::exception_ptr error;
      try {
        hook(failure);
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard lock(run->mutex);
        run->error = error;
        run->done = true;
      }
      run->finished.notify_all();
    }).detach();
  } catch (const std::system_error& error) {
    // No thread could be started: call the hook here, unbounded, rather than not at all.
    spdlog::warn("on_reclaim_failure runs unbounded: no thread for it ({})", error.what());
    try {
      hook(failure);
      return {};
    } catch (...) {
      return classify(std::current_exception());
    }
  }
  std::unique_lock lock(run->mutex);
  if (!run->finished.wait_for(lock, bound, [&] { return run->done; })) {
    return {HookEnd::timed_out, nullptr};
  }
  return classify(run->error);
}

// Reclaim the call path in every sandbox the call acquired, in acquisition order. Returns the
// cancellation a hook raised (the remaining sandboxes are then abandoned), or null.
std::exception_ptr reclaim_the_call(const ToolBindingOptions& options, const SandboxSpec& spec,
                                    const std::vector<AcquiredSandbox>& acquired,
                                    const std::string& call_path, Milliseconds bound) {
  for (const auto& entry : acquired) {
    auto reason = reclaim_guest_path(*entry.sandbox, call_path, spec.work_dir(), bound);
    if (!reason) continue;
    spdlog::warn("{}: the call path {} was not reclaimed in sandbox {}: {}", options.name,
                 call_path, entry.sandbox->instance_id(), *reason);
    if (!options.on_reclaim_failure) continue;
    const HookOutcome outcome =
        call_hook_bounded(options.on_reclaim_failure,
                          ReclaimFailure{options.name, entry.key, call_path, *reason}, bound);
    switch (outcome.end) {
      case HookEnd::returned:
        break;
      case HookEnd::timed_out:
        spdlog::warn(
            "{}: on_reclaim_failure did not return within {} ms; the call goes on "
            "without it",
            options.name, bound.count());
        break;
      case HookEnd::failed:
        try {
          std::rethrow_exception(outcome.error);
        } catch (const std::exception& error) {
          spdlog::error("{}: on_reclaim_failure failed: {}", options.name, error_detail(error));
        }
        break;
      case HookEnd::cancelled:
        spdlog::warn(
            "{}: on_reclaim_failure was cancelled; the reclaims not yet made are "
            "abandoned",
            options.name);
        return outcome.error;
    }
  }
  return nullptr;
}

}  // namespace

std::optional<std::string> reclaim_guest_path(Sandbox& sandbox, std::string_view path,
                                              std::string_view working_directory,
                                              Milliseconds timeout) noexcept {
  try {
    std::string absolute;
    try {
      absolute = confine_guest_path(path, working_directory);
    } catch (const Error& error) {
      return "the call path does not confine to the work directory: " + error.message();
    }
    if (absolute == normalize_guest_path(working_directory)) {
      return std::string("the call path is the work directory");
    }
    if (std::count(absolute.begin(), absolute.end(), '/') < 2) {
      return std::string("the call path is too close to the guest root");
    }
    ExecResult result;
    try {
      ExecOptions options;
      options.working_directory = "/";
      options.timeout = timeout;
      options.max_output_bytes = 64 * 1024;
      options.overflow = OutputOverflow::truncate;
      result = sandbox.exec(Command::argv({"rm", "-rf", "--", absolute}), options);
    } catch (const std::exception& error) {
      return "the removal call failed: " + error_detail(error);
    }
    if (result.exit_code != 0) {
      return "the guest refused it: rm exited " + std::to_string(result.exit_code) + " — " +
             trimmed(result.stderr_text());
    }
    return std::nullopt;
  } catch (...) {
    return std::string("the removal could not be attempted");
  }
}

json::Json sandbox_tool_declarations(const SandboxSpec& spec, const DeclarationOptions& options) {
  json::Json out = json::Json::object();
  if (options.source_integrity) out["source_integrity"] = *options.source_integrity;
  const bool carries_out = !spec.egress_allow().empty() ||
                           (options.has_output_sink && spec_lands_artifacts(spec)) ||
                           options.also_carries_out;
  if (options.outbound_max_confidentiality && carries_out) {
    out["max_allowed_confidentiality"] = *options.outbound_max_confidentiality;
  }
  return out;
}

// ---- SandboxToolCall -------------------------------------------------------------------------

std::variant<SandboxKey, std::string> SandboxToolCall::key() {
  const ToolBindingOptions& options = state_->options();
  {
    std::lock_guard lock(state_->mutex);
    state_->refuse_if_ended("key");
  }
  std::optional<std::string> thread =
      options.context.current_thread_id ? options.context.current_thread_id() : std::nullopt;
  if (!thread) return binding_sentences::no_thread(options.name);
  std::string scope = options.context.current_scope();
  return SandboxKey{std::move(scope), std::move(*thread), options.agent_dir};
}

std::variant<std::shared_ptr<Sandbox>, std::string> SandboxToolCall::acquire(const SandboxKey& key) {
  State& state = *state_;
  const ToolBindingOptions& options = state.options();
  {
    std::lock_guard lock(state.mutex);
    state.refuse_if_ended("acquire");
    if (const AcquiredSandbox* found = state.find(key)) return found->sandbox;
  }
  try {
    CallAdmission admission = options.router->enter_call(
        key, state.binding->spec, CallOptions{.timeout = options.admission_timeout});
    std::shared_ptr<Sandbox> sandbox = admission.acquire();
    std::lock_guard lock(state.mutex);
    // A parallel acquire of the same key in this call got there first: keep its admission (this
    // one is released on the way out).
    if (const AcquiredSandbox* found = state.find(key)) return found->sandbox;
    // The body returned while this acquire waited: nothing is recorded any more, and a sandbox
    // without its admission and its reclaim is not handed out.
    state.refuse_if_ended("acquire");
    state.acquired.push_back(AcquiredSandbox{key, std::move(admission), sandbox});
    return sandbox;
  } catch (const ToolCallEnded&) {
    throw;
  } catch (const QueuedTimeout& error) {
    spdlog::warn("{}: the call was not admitted: {}", options.name, error.message());
    return std::string(binding_sentences::kBusy);
  } catch (const BackendNotInstalled& error) {
    spdlog::warn("{}: the sandbox backend is not installed: {}", options.name, error_detail(error));
    return std::string(binding_sentences::kNotInstalled);
  } catch (const NoSandboxBackend&) {
    return std::string(binding_sentences::kNoBackend);
  } catch (const InvalidArgument& error) {
    // Messages airlock authors for bad configuration (a missing image, …) are model-safe.
    return "Error: " + error.message();
  } catch (const std::exception& error) {
    spdlog::error("{}: the sandbox could not be acquired: {}", options.name, error_detail(error));
    return std::string(binding_sentences::kUnavailable);
  }
}

std::string SandboxToolCall::guest_call_path() {
  std::lock_guard lock(state_->mutex);
  state_->refuse_if_ended("guest_call_path");
  if (state_->call_path.empty()) {
    state_->call_path = state_->binding->spec->work_dir() + "/" + random_hex12();
  }
  return state_->call_path;
}

void SandboxToolCall::condemn() noexcept {
  std::lock_guard lock(state_->mutex);
  for (auto& entry : state_->acquired) entry.admission.condemn();
}

void SandboxToolCall::condemn(const SandboxKey& key) noexcept {
  std::lock_guard lock(state_->mutex);
  if (AcquiredSandbox* found = state_->find(key)) found->admission.condemn();
}

std::variant<std::vector<std::string>, std::string> SandboxToolCall::list_files(
    const std::string& store) {
  const ToolBindingOptions& options = state_->options();
  {
    std::lock_guard lock(state_->mutex);
    state_->refuse_if_ended("list_files");
  }
  if (!options.context.list_files) return std::string("Error: no file store is configured");
  try {
    return options.context.list_files(store);
  } catch (const std::exception& error) {
    spdlog::error("{}: listing the file store failed: {}", options.name, error_detail(error));
    return binding_sentences::list_failed(reason_of(error));
  }
}

const OutputSink* SandboxToolCall::sink() const noexcept {
  const auto& sink = state_->options().output_sink;
  return sink ? &*sink : nullptr;
}

const SandboxSpec& SandboxToolCall::spec() const noexcept {
  return *state_->binding->spec;
}

const std::string& SandboxToolCall::tool_name() const noexcept {
  return state_->options().name;
}

bool SandboxToolCall::ended() const noexcept {
  std::lock_guard lock(state_->mutex);
  return state_->ended;
}

// ---- SandboxTool -----------------------------------------------------------------------------

const std::string& SandboxTool::name() const noexcept {
  return binding_->options.name;
}
const std::string& SandboxTool::description() const noexcept {
  return binding_->options.description;
}
ApprovalMode SandboxTool::approval_mode() const noexcept {
  return binding_->options.approval_mode;
}
const SandboxSpec& SandboxTool::spec() const noexcept {
  return *binding_->spec;
}

json::Json SandboxTool::declarations() const {
  const ToolBindingOptions& options = binding_->options;
  if (options.declarations) return *options.declarations;
  return sandbox_tool_declarations(
      *binding_->spec,
      DeclarationOptions{options.source_integrity, options.outbound_max_confidentiality,
                         options.output_sink.has_value(), options.also_carries_out});
}

std::string SandboxTool::invoke(const json::Json& arguments) const {
  const ToolBindingOptions& options = binding_->options;
  auto state = std::make_shared<SandboxToolCall::State>(binding_);
  SandboxToolCall call(state);
  std::string text;
  std::exception_ptr body_failure;
  bool cancelled = false;
  try {
    text = binding_->body(call, arguments);
  } catch (const std::exception&) {
    body_failure = std::current_exception();
  } catch (...) {
    // Not a std::exception: a binding's cancellation (Python's CancelledError, …).
    body_failure = std::current_exception();
    cancelled = true;
  }

  // The call ends before anything is removed: nothing more is recorded from here on.
  std::vector<AcquiredSandbox> acquired;
  std::string call_path;
  {
    std::lock_guard lock(state->mutex);
    state->ended = true;
    acquired = std::move(state->acquired);
    state->acquired.clear();
    call_path = state->call_path;
  }
  const Milliseconds bound =
      cancelled ? std::min(options.reclaim_timeout, Milliseconds(2'000)) : options.reclaim_timeout;
  std::exception_ptr hook_cancelled;
  if (!call_path.empty()) {
    hook_cancelled = reclaim_the_call(options, *binding_->spec, acquired, call_path, bound);
  }
  for (auto& entry : acquired) {
    entry.admission.release(/*in_background=*/entry.admission.condemned());
  }
  if (hook_cancelled) std::rethrow_exception(hook_cancelled);
  if (body_failure) std::rethrow_exception(body_failure);
  return text;
}

std::optional<SandboxTool> sandboxed_tool(ToolBindingOptions options, SandboxSpec spec,
                                          SandboxToolBody body) {
  // 1. Absence is silent: with no router, nothing is attached and nothing else is judged.
  if (options.router == nullptr || !options.router->enabled()) return std::nullopt;
  // 2. A sink changes the derived declarations; explicit ones cannot account for it.
  const bool has_sink = options.output_sink && static_cast<bool>(options.output_sink->deliver);
  if (options.declarations && options.output_sink) {
    throw InvalidArgument("sandboxed_tool '" + options.name +
                              "': explicit declarations and an output_sink cannot be combined "
                              "(a sink changes what the derived declarations say)",
                          "declarations");
  }
  // 3. Something lands and nothing could receive it.
  if (spec_lands_artifacts(spec) && !has_sink) {
    throw missing_sink_refusal(spec, landing_outputs(spec),
                               "sandboxed_tool '" + options.name + "'");
  }
  // 4. Outputs are read back through files_out.
  if ((!spec.declared_outputs().empty() || spec.outputs_named_at_call_time()) &&
      !spec.required_capabilities().contains(Capability::files_out)) {
    throw InvalidArgument("the '" + spec.kind() +
                              "' spec declares outputs but does not require files_out",
                          "spec.requires");
  }
  // 5. Bounds.
  if (options.reclaim_timeout.count() <= 0) {
    throw InvalidArgument("reclaim_timeout must be a finite positive number of seconds",
                          "reclaim_timeout");
  }
  if (options.admission_timeout.count() <= 0) {
    throw InvalidArgument("admission_timeout must be a finite positive number of seconds",
                          "admission_timeout");
  }
  // 6. Dishonesty is loud: the router's refusals, at attach time.
  options.router->ensure_can_serve(spec);
  // 7. The binding.
  if (!body) throw InvalidArgument("a sandboxed tool needs a body", "body");
  if (options.declarations && !options.declarations->is_object()) {
    throw InvalidArgument(
        "sandboxed_tool '" + options.name + "': explicit declarations must be an object of labels",
        "declarations");
  }
  if (!options.context.current_thread_id || !options.context.current_scope) {
    throw InvalidArgument(
        "a sandboxed tool needs context.current_scope and "
        "context.current_thread_id",
        "context");
  }
  // 8. A call path must be at least two components deep for the reclaim to accept it.
  if (normalize_guest_path(spec.work_dir()) == "/") {
    throw InvalidArgument("the '" + spec.kind() +
                              "' spec's work_dir is the guest root; a per-call path one "
                              "component deep could never be reclaimed safely",
                          "spec.work_dir");
  }
  auto binding = std::make_shared<SandboxTool::Binding>(SandboxTool::Binding{
      std::move(options), std::make_shared<const SandboxSpec>(std::move(spec)), std::move(body)});
  return SandboxTool(std::move(binding));
}

}  // namespace airlock
