// The `codeact` kind: `execute_code` — run model-written Python in a sandbox.
//
// A kind is written against the protocol only: it imports no backend. It produces a spec, and a
// tool whose body gets the caller's key, pins shared file names to the host store's listing,
// takes a per-call guest directory, acquires, writes files, runs a fixed command template (an
// argv, never a shell line), formats the result for the model, and collects outputs.
//
// Optional parts, each wired by the host:
//   - shared files from a host file store: the model names them; only names in the store's
//     listing are used (a near-miss gets a hint), and they are copied into the program's working
//     directory under the inbound caps, counted before anything is read;
//   - host tools: the program imports `airlock_host_tools`; calls go through the registry's one
//     door over the socket channel where the sandbox offers one, else over exec and files;
//   - outputs: `declared` (the model names the files it will write, checked as artifact names
//     before the program runs) or `manifest` (the program writes `outputs.json` =
//     {"outputs": [{"path": "…"}]}); collected only when the program exits 0, through the host's
//     sink, under the outbound caps.
//
// A run that does not end by itself (its timeout, a lost result) ends the answer with what became
// of the sandbox: kept, with every file the conversation wrote, when the backend proved every
// process of the run gone (a Timeout's kill_confirmed, a host-tool run's SIGKILL that reached its
// whole process group); otherwise the call condemns it and the answer says that the sandbox was
// reset and those files are gone.
//
// The network posture is derived: the deployment's hosts (if any) run `allowlist`, none runs
// `closed`. `unrestricted` cannot be expressed: the model writes the code.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "airlock/host_tools.hpp"
#include "airlock/outputs.hpp"
#include "airlock/tool_binding.hpp"

namespace airlock::kinds::codeact {

inline constexpr const char* kKind = "codeact";
inline constexpr const char* kToolName = "execute_code";
inline constexpr const char* kManifest = "outputs.json";
inline constexpr std::uint64_t kManifestCap = 64 * 1024;
// The smallest manifest that names one output: {"outputs":[{"path":"x"}]}
inline constexpr std::uint64_t kSmallestManifest = 26;

enum class Outputs : std::uint8_t { none, declared, manifest };

// A host file store the model may name files from.
class FileStore {
 public:
  virtual ~FileStore() = default;
  virtual std::vector<std::string> list() = 0;
  // nullopt when the name is not there.
  virtual std::optional<std::string> read(const std::string& name) = 0;
};

struct SpecOptions {
  std::optional<std::string> image;
  std::optional<std::string> image_id;
  Outputs outputs = Outputs::none;
  TransferLimits files_in = kDefaultTransferLimits;
  TransferLimits files_out = {kDefaultTransferLimits.max_bytes_per_file,
                              kDefaultTransferLimits.max_total_bytes, 8};
  // Non-empty: the program may call these tools. Taking the aggregate seals the registry.
  std::shared_ptr<HostToolRegistry> host_tools;
  // The deployment's hosts: one pattern per entry (no blanks, whitespace or commas).
  std::vector<std::string> egress_allow;
  std::string work_dir = kDefaultWorkDir;
  ResourceLimits resources;
};

// requires = {exec, files_in} (+ files_out with any output mode, which also sets
// outputs_named_at_call_time; + host_tools and files_out with a non-empty registry);
// identities = the registry's aggregate identities.
SandboxSpec codeact_sandbox_spec(const SpecOptions& options);

struct ToolOptions {
  SandboxRouter* router = nullptr;
  CallerContext context;
  std::string agent_dir = "codeact";
  SpecOptions spec;
  std::shared_ptr<FileStore> file_store;  // the model may share files from it
  std::optional<OutputSink> output_sink;  // required when outputs != none
  std::optional<std::string> outbound_max_confidentiality;
  Milliseconds exec_timeout{120'000};
  std::function<void(const ReclaimFailure&)> on_reclaim_failure;
};

// The `execute_code` tool, or nullopt when the router is disabled. Factory checks (only with a
// router): a host-tool registry needs files_in.max_files ≥ 2 and the shim within the per-file and
// total caps; otherwise max_files ≥ 1; `declared` needs files_out.max_files ≥ 1; `manifest` needs
// ≥ 2 files and min(per-file, total) ≥ 26 bytes; an output mode without a sink, or a sink that
// does not normalise (`none`), is refused. Arguments: {"code": str, "files"?: [str],
// "outputs"?: [str] (declared mode)}.
std::optional<SandboxTool> make_codeact_tool(ToolOptions options);

}  // namespace airlock::kinds::codeact
