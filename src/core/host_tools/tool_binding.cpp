#include "airlock/tool_binding.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "airlock/errors.hpp"
#include "airlock/paths.hpp"

namespace airlock {
namespace binding_sentences {
std::string no_thread(std::string_view tool_name) {
  return "Error: no active thread context — " + std::string(tool_name) +
         " must be called from within a thread";
}
}  // namespace binding_sentences

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

// Why `path` could not be reclaimed, or nullopt when it was.
std::optional<std::string> reclaim_guest_path(Sandbox& sandbox, const std::string& path,
                                              const std::string& work_dir, Milliseconds timeout) {
  std::string absolute;
  try {
    absolute = confine_guest_path(path, work_dir);
  } catch (const Error& error) {
    return "the call path does not confine to the work directory: " + error.message();
  }
  if (absolute == normalize_guest_path(work_dir)) return "the call path is the work directory";
  if (std::count(absolute.begin(), absolute.end(), '/') < 2) {
    return "the call path is too close to the guest root";
  }
  try {
    ExecOptions options;
    options.working_directory = "/";
    options.timeout = timeout;
    options.max_output_bytes = 64 * 1024;
    options.overflow = OutputOverflow::truncate;
    const ExecResult result = sandbox.exec(Command::argv({"rm", "-rf", "--", absolute}), options);
    if (result.exit_code != 0) {
      return "the guest refused it: rm exited " + std::to_string(result.exit_code) + " — " +
             result.stderr_text();
    }
  } catch (const std::exception& error) {
    return "the removal call failed: " + error_detail(error);
  }
  return std::nullopt;
}

}  // namespace

std::variant<SandboxKey, std::string> SandboxToolCall::key() {
  if (key_) return *key_;
  std::optional<std::string> thread;
  std::string scope;
  try {
    thread = options_->context.current_thread_id ? options_->context.current_thread_id()
                                                 : std::nullopt;
    if (thread) scope = options_->context.current_scope ? options_->context.current_scope() : "";
  } catch (const std::exception& error) {
    spdlog::error("{}: reading the caller's context failed: {}", options_->name, error.what());
    return binding_sentences::no_thread(options_->name);
  }
  if (!thread) return binding_sentences::no_thread(options_->name);
  key_ = SandboxKey{std::move(scope), std::move(*thread), options_->agent_dir};
  return *key_;
}

std::variant<std::shared_ptr<Sandbox>, std::string> SandboxToolCall::acquire(const SandboxKey& key) {
  try {
    if (!admission_) {
      admission_.emplace(options_->router->enter_call(
          key, spec_, CallOptions{.timeout = options_->admission_timeout}));
    }
    if (admission_->sandbox()) return admission_->sandbox();
    return admission_->acquire();
  } catch (const QueuedTimeout& error) {
    spdlog::warn("{}: the call was not admitted: {}", options_->name, error.message());
    return std::string("Error: the sandbox is busy with this conversation's other calls — try "
                       "again");
  } catch (const NoSandboxBackend&) {
    return std::string(binding_sentences::kNoBackend);
  } catch (const RouterRefusal& refusal) {
    spdlog::error("{}: the router refused the call: {}", options_->name, error_detail(refusal));
    return std::string(binding_sentences::kUnavailable);
  } catch (const InvalidArgument& error) {
    // Messages airlock authors for bad configuration are written to be model-safe.
    return "Error: " + error.message();
  } catch (const std::exception& error) {
    spdlog::error("{}: the sandbox could not be acquired: {}", options_->name,
                  error_detail(error));
    return std::string(binding_sentences::kUnavailable);
  }
}

const std::string& SandboxToolCall::guest_call_path() {
  if (call_path_.empty()) {
    call_path_ = spec_->work_dir() + "/" + random_hex12();
  }
  return call_path_;
}

void SandboxToolCall::condemn() noexcept {
  if (admission_) admission_->condemn();
}

std::variant<std::vector<std::string>, std::string> SandboxToolCall::list_files(
    const std::string& store) {
  if (!options_->context.list_files) return std::string("Error: no file store is configured");
  try {
    return options_->context.list_files(store);
  } catch (const std::exception& error) {
    spdlog::error("{}: listing the file store failed: {}", options_->name, error.what());
    return std::string("Error: could not list the file store");
  }
}

json::Json SandboxTool::declarations() const {
  json::Json out = json::Json::object();
  if (options_.source_integrity) out["source_integrity"] = *options_.source_integrity;
  const bool lands = std::any_of(spec_->declared_outputs().begin(), spec_->declared_outputs().end(),
                                 [](const DeclaredOutput& o) {
                                   return o.disposition == OutputDisposition::land;
                                 }) ||
                     spec_->outputs_named_at_call_time();
  const bool carries_out = !spec_->egress_allow().empty() ||
                           (options_.has_output_sink && lands) || options_.also_carries_out;
  if (options_.outbound_max_confidentiality && carries_out) {
    out["max_allowed_confidentiality"] = *options_.outbound_max_confidentiality;
  }
  out["approval_mode"] =
      options_.approval_mode == ApprovalMode::always_require ? "always_require" : "never_require";
  return out;
}

std::string SandboxTool::invoke(const json::Json& arguments) const {
  SandboxToolCall call(&options_, spec_);
  std::string text;
  try {
    text = body_(call, arguments);
  } catch (const std::exception& error) {
    spdlog::error("{}: the tool body failed: {}", options_.name, error_detail(error));
    text = "Error: the tool failed — the reason is in the host's log";
  }
  // Reclaim the call's own path in the sandbox it acquired, however the body ended.
  if (!call.call_path_.empty() && call.admission_ && call.admission_->sandbox() && call.key_) {
    if (auto reason = reclaim_guest_path(*call.admission_->sandbox(), call.call_path_,
                                         spec_->work_dir(), options_.reclaim_timeout)) {
      spdlog::warn("{}: the call path {} was not reclaimed: {}", options_.name, call.call_path_,
                   *reason);
      if (options_.on_reclaim_failure) {
        try {
          options_.on_reclaim_failure(
              ReclaimFailure{options_.name, *call.key_, call.call_path_, *reason});
        } catch (const std::exception& error) {
          spdlog::error("{}: on_reclaim_failure failed: {}", options_.name, error.what());
        }
      }
    }
  }
  if (call.admission_) call.admission_->release(/*in_background=*/call.admission_->condemned());
  return text;
}

std::optional<SandboxTool> sandboxed_tool(ToolBindingOptions options, SandboxSpec spec,
                                          SandboxToolBody body) {
  if (options.router == nullptr || !options.router->enabled()) return std::nullopt;
  const bool lands = std::any_of(spec.declared_outputs().begin(), spec.declared_outputs().end(),
                                 [](const DeclaredOutput& o) {
                                   return o.disposition == OutputDisposition::land;
                                 }) ||
                     spec.outputs_named_at_call_time();
  if (lands && !options.has_output_sink) {
    throw OutputSinkRequired("the '" + spec.kind() +
                                 "' workload lands artifacts, and no output sink was given: "
                                 "nothing could receive them",
                             "output-sink");
  }
  if ((!spec.declared_outputs().empty() || spec.outputs_named_at_call_time()) &&
      !spec.required_capabilities().contains(Capability::files_out)) {
    throw InvalidArgument("the '" + spec.kind() +
                              "' spec declares outputs but does not require files_out",
                          "spec.requires");
  }
  if (options.reclaim_timeout.count() <= 0) {
    throw InvalidArgument("reclaim_timeout must be positive", "reclaim_timeout");
  }
  if (!body) throw InvalidArgument("a sandboxed tool needs a body", "body");
  options.router->ensure_can_serve(spec);
  if (normalize_guest_path(spec.work_dir()) == "/") {
    throw InvalidArgument("the '" + spec.kind() +
                              "' spec's work_dir is the guest root; a per-call path one "
                              "component deep could never be reclaimed safely",
                          "spec.work_dir");
  }
  return SandboxTool(std::move(options), std::move(spec), std::move(body));
}

}  // namespace airlock
