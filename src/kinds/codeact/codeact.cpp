#include "airlock/kinds/codeact.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "airlock/errors.hpp"
#include "airlock/host_tool_transport.hpp"
#include "airlock/paths.hpp"
#include "kinds/codeact/format.hpp"

namespace airlock::kinds::codeact {
namespace {

using json::Json;

constexpr const char* kProgram = "program.py";
constexpr std::uint64_t kMaxShownOutput = 1 << 20;

// What the model is told after a run that did not end by itself, about its sandbox. The
// sandbox is kept only when the backend proves every process of the run gone; otherwise it is
// condemned (replaced on the next call), and the model must not go on reading files that are
// gone.
constexpr const char* kSandboxReset =
    " The sandbox was reset: the program's end could not be confirmed (its processes may have "
    "outlived it), so the sandbox was replaced by a fresh one, and every file written earlier in "
    "this conversation is gone.";
constexpr const char* kSandboxKept =
    " The program was stopped and every process it started is gone; the sandbox is intact, with "
    "every file written earlier in this conversation.";

bool dispatching(const SpecOptions& options) {
  return options.host_tools && options.host_tools->size() > 0;
}

// Everything one call needs, fixed when the tool is made.
struct Kind {
  ToolOptions options;
  SandboxSpec spec;
  std::string shim;  // empty when not dispatching
  std::shared_ptr<const HostToolRegistry> registry;
};

// A refusal the model sees, raised inside the body and caught at its top.
struct Refusal {
  std::string text;
};

std::vector<std::string> string_list(const Json& arguments, const char* field) {
  std::vector<std::string> out;
  auto found = arguments.find(field);
  if (found == arguments.end() || found->is_null()) return out;
  if (!found->is_array()) throw Refusal{std::string("Error: '") + field + "' must be a list of names"};
  for (const auto& item : *found) {
    if (!item.is_string()) {
      throw Refusal{std::string("Error: every entry of '") + field + "' must be a string"};
    }
    out.push_back(item.get<std::string>());
  }
  return out;
}

void check_name(const std::string& name, const char* what) {
  try {
    validate_artifact_name(name);
  } catch (const ArtifactNameInvalid& invalid) {
    throw Refusal{std::string("Error: ") + what + " '" + name + "' is not a valid name: " +
                  invalid.message()};
  }
}

bool inside_reserved(const std::string& name, const std::set<std::string>& reserved) {
  for (const auto& r : reserved) {
    if (name == r || name.starts_with(r + "/")) return true;
  }
  return false;
}

std::string run_call(const Kind& kind, SandboxToolCall& call, const Json& arguments) {
  const ToolOptions& options = kind.options;
  const bool tools = !kind.shim.empty();
  const Outputs outputs_mode = options.spec.outputs;

  // 1. The key.
  auto key_or_refusal = call.key();
  if (auto* refusal = std::get_if<std::string>(&key_or_refusal)) return *refusal;
  const SandboxKey key = std::get<SandboxKey>(key_or_refusal);

  // 2. Arguments.
  if (!arguments.is_object()) throw Refusal{"Error: the arguments must be an object"};
  auto code = arguments.find("code");
  if (code == arguments.end() || !code->is_string()) {
    throw Refusal{"Error: 'code' must be a string of Python"};
  }
  for (const auto& [field, unused] : arguments.items()) {
    const bool known = field == "code" || (field == "files" && options.file_store) ||
                       (field == "outputs" && outputs_mode == Outputs::declared);
    if (!known) throw Refusal{"Error: unexpected argument '" + field + "'"};
  }
  const std::vector<std::string> files = string_list(arguments, "files");
  const std::vector<std::string> declared = string_list(arguments, "outputs");

  // 3. Names the kind itself writes in the program's directory.
  std::set<std::string> reserved;
  if (!tools) reserved.insert(kProgram);
  if (outputs_mode == Outputs::manifest) reserved.insert(kManifest);

  // 4. The call's own guest directory.
  const std::string call_dir = call.guest_call_path();
  const std::string run_id = call_dir.substr(call_dir.rfind('/') + 1);
  const std::optional<GuestRunLayout> layout =
      tools ? std::optional(guest_run_layout(call_dir)) : std::nullopt;
  const std::string cwd = layout ? layout->work : call_dir;
  const std::string prefix = layout ? run_id + "/" + kWorkDirectory : run_id;
  const std::string program_path = layout ? layout->program : call_dir + "/" + kProgram;

  // 5. Declared outputs, judged as names before anything runs.
  const TransferLimits& files_out = kind.spec.files_out();
  if (outputs_mode == Outputs::declared) {
    if (declared.size() > files_out.max_files) {
      throw Refusal{"Error: at most " + std::to_string(files_out.max_files) +
                    " outputs can be saved per call"};
    }
    std::set<std::string> keys;
    for (const auto& name : declared) {
      check_name(name, "output");
      check_name(nfc_compose(name), "output");
      check_name(prefix + "/" + name, "output");
      if (inside_reserved(name, reserved)) {
        throw Refusal{"Error: output '" + name + "' collides with a file the sandbox writes itself"};
      }
      if (!keys.insert(artifact_collision_key(name)).second) {
        throw Refusal{"Error: output '" + name +
                      "' is the same file as another output (names differing only by case or "
                      "Unicode form are one file)"};
      }
    }
  }

  // 6. Inbound caps, before anything is read.
  const TransferLimits& files_in = kind.spec.files_in();
  const std::uint64_t written_files = files.size() + 1 + (tools ? 1 : 0);
  if (written_files > files_in.max_files) {
    throw Refusal{"Error: too many files: at most " +
                  std::to_string(files_in.max_files - 1 - (tools ? 1 : 0)) +
                  " can be shared per call"};
  }
  TransferTally inbound(files_in, "files_in");
  try {
    inbound.add(kProgram, code->get_ref<const std::string&>().size());
    if (tools) inbound.add(kShimModule, kind.shim.size());
  } catch (const TransferCapExceeded& cap) {
    throw Refusal{"Error: the program is too large: " + cap.message()};
  }

  // 7. Shared files, pinned to the store's listing.
  std::vector<std::pair<std::string, std::string>> shared;
  if (!files.empty()) {
    std::vector<std::string> listing;
    try {
      listing = options.file_store->list();
    } catch (const std::exception& error) {
      spdlog::error("codeact: listing the file store failed: {}", error.what());
      throw Refusal{"Error: could not list the file store"};
    }
    const std::set<std::string> listed(listing.begin(), listing.end());
    std::set<std::string> seen;
    for (const auto& name : files) {
      check_name(name, "file");
      if (inside_reserved(name, reserved)) {
        throw Refusal{"Error: file '" + name + "' collides with a file the sandbox writes itself"};
      }
      if (!seen.insert(artifact_collision_key(name)).second) {
        throw Refusal{"Error: file '" + name + "' is named twice"};
      }
      if (!listed.contains(name)) throw Refusal{not_in_store(name, listing)};
      std::optional<std::string> content;
      try {
        content = options.file_store->read(name);
      } catch (const std::exception& error) {
        spdlog::error("codeact: reading '{}' from the file store failed: {}", name,
                      error_detail(error));
      }
      if (!content) throw Refusal{"Error: file '" + name + "' could not be read from the store"};
      try {
        inbound.add(name, content->size());
      } catch (const TransferCapExceeded& cap) {
        throw Refusal{"Error: the shared files are too large: " + cap.message()};
      }
      shared.emplace_back(name, std::move(*content));
    }
  }

  // 8. Acquire.
  auto sandbox_or_refusal = call.acquire(key);
  if (auto* refusal = std::get_if<std::string>(&sandbox_or_refusal)) return *refusal;
  Sandbox& sandbox = *std::get<std::shared_ptr<Sandbox>>(sandbox_or_refusal);
  const std::string& work_dir = kind.spec.work_dir();

  // 9–11. Write, then run.
  ExecResult result;
  std::string channel_note;
  bool running = false;  // the program's command was started: a lost result leaves its end unknown
  try {
    for (const auto& [name, content] : shared) sandbox.write_file(cwd + "/" + name, content, work_dir);
    sandbox.write_file(program_path, code->get_ref<const std::string&>(), work_dir);
    if (layout) {
      sandbox.write_file(layout->shim, kind.shim, work_dir);
      // Shared, so a host's dispatch observer may keep the run it is shown.
      const auto run = std::make_shared<HostToolRun>(kind.registry);
      HostToolRunOptions run_options;
      run_options.timeout = options.exec_timeout;
      running = true;
      const HostToolRunResult ran =
          run_program_with_host_tools(sandbox, *run, *layout, run_options);
      spdlog::debug("codeact run {} used the {} channel", run_id, to_string(ran.channel));
      result = ran.result;
    } else {
      ExecOptions exec;
      exec.working_directory = cwd;
      exec.timeout = options.exec_timeout;
      exec.max_output_bytes = kMaxShownOutput;
      exec.overflow = OutputOverflow::truncate;
      running = true;
      result = sandbox.exec(Command::argv({"python3", program_path}), exec);
    }
  } catch (const ProgramTimeout& timeout) {
    // Kept only when SIGKILL reached the run's whole process group (what the socket channel
    // reports when the backend confirms the group gone); a signal that reached the program
    // alone leaves what it spawned running.
    const bool kept =
        timeout.signal() == SignalOutcome::sent && timeout.reach() == SignalReach::group;
    if (!kept) call.condemn();
    return "Error: " + timeout.message() + "." + (kept ? kSandboxKept : kSandboxReset);
  } catch (const Timeout& timeout) {
    const bool kept = timeout.kill_confirmed().value_or(false);
    if (!kept) call.condemn();
    if (tools) {
      spdlog::error("codeact run {}: a backend call timed out: {}", run_id, error_detail(timeout));
      return std::string("Error: could not run the program in the sandbox.") +
             (kept ? kSandboxKept : kSandboxReset);
    }
    return "Error: the program timed out after " + seconds_text(options.exec_timeout) + "s." +
           (kept ? kSandboxKept : kSandboxReset);
  } catch (const std::exception& error) {
    spdlog::error("codeact run {} failed: {}", run_id, error_detail(error));
    if (running) {
      // The run's result did not come back: nothing establishes that the program stopped.
      call.condemn();
      return std::string("Error: could not run the program in the sandbox.") + kSandboxReset;
    }
    return "Error: could not run the program in the sandbox";
  }

  std::string text = format_result(result, kMaxShownOutput);

  // 14–16. Outputs, only after a clean exit.
  if (result.exit_code != 0 || outputs_mode == Outputs::none) return text;
  std::vector<std::string> names = declared;
  TransferLimits budget = files_out;
  if (outputs_mode == Outputs::manifest) {
    auto manifest = read_manifest(sandbox, prefix + "/" + kManifest, work_dir, files_out);
    if (!manifest.error.empty()) return text + "\n" + manifest.error;
    names = std::move(manifest.names);
    budget.max_files -= 1;
    budget.max_total_bytes -= std::min(budget.max_total_bytes, manifest.bytes);
    std::set<std::string> keys;
    for (const auto& name : names) {
      try {
        validate_artifact_name(name);
        validate_artifact_name(prefix + "/" + name);
      } catch (const ArtifactNameInvalid& invalid) {
        return text + "\nError: outputs.json names '" + name + "', which is not a valid name: " +
               invalid.message();
      }
      if (!keys.insert(artifact_collision_key(name)).second || name == kManifest) {
        return text + "\nError: outputs.json names '" + name + "' twice or names itself";
      }
    }
  }
  if (names.empty()) return text;
  std::vector<DeclaredOutput> call_outputs;
  for (const auto& name : names) {
    call_outputs.push_back(DeclaredOutput{.path = prefix + "/" + name,
                                          .disposition = OutputDisposition::land,
                                          .media_type = std::nullopt,
                                          .required = false,
                                          .name = name});
  }
  auto fields = kind.spec.fields();
  fields.files_out = budget;
  const SandboxSpec collecting(std::move(fields));
  try {
    const auto landed = collect_outputs(sandbox, collecting, call.sink(), call_outputs);
    return text + "\n" + saved_lines(landed, names);
  } catch (const std::exception& error) {
    spdlog::warn("codeact run {}: outputs could not be saved: {}", run_id, error_detail(error));
    // Our messages are written for the model; a host sink's own exception text is not ours to
    // show (it may carry a traceback or a host path).
    const auto* ours = dynamic_cast<const Error*>(&error);
    const std::string reason = ours ? ours->message() : std::string("the host's sink refused them");
    return text + "\nError: the outputs could not be saved — " + reason +
           ". Some of them may already have been saved; do not assume none were.";
  }
}

void check_factory(const ToolOptions& options, const SandboxSpec& spec, const std::string& shim) {
  const TransferLimits& in = spec.files_in();
  const TransferLimits& out = spec.files_out();
  if (!shim.empty()) {
    if (in.max_files < 2) {
      throw InvalidArgument("codeact with host tools needs files_in.max_files ≥ 2 (the program "
                            "and the shim)",
                            "files_in.max_files");
    }
    if (shim.size() > std::min(in.max_bytes_per_file, in.max_total_bytes)) {
      throw InvalidArgument("the host-tool shim (" + std::to_string(shim.size()) +
                                " bytes) does not fit files_in",
                            "files_in");
    }
  } else if (in.max_files < 1) {
    throw InvalidArgument("codeact needs files_in.max_files ≥ 1 (the program)",
                          "files_in.max_files");
  }
  switch (options.spec.outputs) {
    case Outputs::none:
      break;
    case Outputs::declared:
      if (out.max_files < 1) {
        throw InvalidArgument("declared outputs need files_out.max_files ≥ 1",
                              "files_out.max_files");
      }
      break;
    case Outputs::manifest:
      if (out.max_files < 2 ||
          std::min(out.max_bytes_per_file, out.max_total_bytes) < kSmallestManifest) {
        throw InvalidArgument("manifest outputs need files_out.max_files ≥ 2 and room for the "
                              "smallest manifest (26 bytes)",
                              "files_out");
      }
      break;
  }
  if (options.spec.outputs != Outputs::none) {
    if (!options.output_sink) {
      throw OutputSinkRequired("codeact saves outputs, and no output sink was given",
                               "output-sink");
    }
    if (options.output_sink->normalization == NameNormalization::none) {
      throw InvalidArgument("codeact's output sink must normalise names (nfc): the model names "
                            "outputs, and two spellings of one name must land as one",
                            "output_sink.normalization");
    }
  }
  if (options.exec_timeout.count() <= 0) {
    throw InvalidArgument("exec_timeout must be positive", "exec_timeout");
  }
}

}  // namespace

SandboxSpec codeact_sandbox_spec(const SpecOptions& options) {
  SandboxSpec::Fields fields;
  fields.kind = kKind;
  fields.image = options.image;
  fields.image_id = options.image_id;
  fields.work_dir = options.work_dir;
  fields.files_in = options.files_in;
  fields.files_out = options.files_out;
  fields.resources = options.resources;
  fields.required_capabilities = {Capability::exec, Capability::files_in};
  if (options.outputs != Outputs::none) {
    fields.required_capabilities.insert(Capability::files_out);
    fields.outputs_named_at_call_time = true;
  }
  if (dispatching(options)) {
    const HostToolAggregate aggregate = options.host_tools->aggregate();
    fields.required_capabilities.insert(Capability::host_tools);
    fields.required_capabilities.insert(Capability::files_out);  // requests are read back
    fields.identities = aggregate.identities;
  } else if (options.host_tools) {
    (void)options.host_tools->aggregate();  // an empty registry is sealed too
  }
  // The kind has no hosts of its own; the deployment's, deduplicated in order.
  for (const auto& host : options.egress_allow) {
    if (std::find(fields.egress_allow.begin(), fields.egress_allow.end(), host) ==
        fields.egress_allow.end()) {
      fields.egress_allow.push_back(host);
    }
  }
  fields.egress = fields.egress_allow.empty() ? Egress::closed : Egress::allowlist;
  return SandboxSpec(std::move(fields));
}

std::optional<SandboxTool> make_codeact_tool(ToolOptions options) {
  if (options.router == nullptr || !options.router->enabled()) return std::nullopt;
  SandboxSpec spec = codeact_sandbox_spec(options.spec);
  std::string shim;
  std::shared_ptr<const HostToolRegistry> registry;
  if (dispatching(options.spec)) {
    registry = options.spec.host_tools;
    shim = host_tool_shim(registry->names(), options.exec_timeout);
  }
  check_factory(options, spec, shim);

  ToolBindingOptions binding;
  binding.router = options.router;
  binding.context = options.context;
  binding.agent_dir = options.agent_dir;
  binding.name = kToolName;
  binding.description = tool_description(options, spec, registry);
  // Output from model-written code is untrusted: no source integrity is claimed.
  binding.source_integrity = std::nullopt;
  binding.outbound_max_confidentiality = options.outbound_max_confidentiality;
  binding.output_sink = options.output_sink;
  binding.on_reclaim_failure = options.on_reclaim_failure;
  if (registry && options.spec.host_tools->aggregate().requires_approval) {
    binding.approval_mode = ApprovalMode::always_require;
  }
  auto kind = std::make_shared<Kind>(Kind{options, spec, shim, registry});
  return sandboxed_tool(std::move(binding), std::move(spec),
                        [kind](SandboxToolCall& call, const Json& arguments) -> std::string {
                          try {
                            return run_call(*kind, call, arguments);
                          } catch (const Refusal& refusal) {
                            return refusal.text;
                          }
                        });
}

}  // namespace airlock::kinds::codeact
