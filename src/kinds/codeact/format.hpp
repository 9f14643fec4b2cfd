// What the model reads: the tool's description, results, hints and saved-output lines.
#pragma once

#include <string>
#include <vector>

#include "airlock/kinds/codeact.hpp"

namespace airlock::kinds::codeact {

std::string seconds_text(Milliseconds duration);

// "stdout:\n…\nstderr:\n…\nexit code: N", empty sections omitted; a hint when nothing printed.
std::string format_result(const ExecResult& result, std::uint64_t shown_cap);

// The refusal for a name not in the store's listing, with up to 20 near misses.
std::string not_in_store(const std::string& name, const std::vector<std::string>& listing);

struct Manifest {
  std::vector<std::string> names;
  std::uint64_t bytes = 0;
  std::string error;  // a model-facing sentence when the manifest could not be used
};
// Stat, cap (min of 64 KiB and the outbound caps), read and parse outputs.json.
Manifest read_manifest(Sandbox& sandbox, const std::string& path, const std::string& work_dir,
                       const TransferLimits& files_out);

// "Saved:\n- <display>…" plus "Not written: …" for named outputs the program did not write.
std::string saved_lines(const std::vector<LandedArtifact>& landed,
                        const std::vector<std::string>& names);

std::string tool_description(const ToolOptions& options, const SandboxSpec& spec,
                             const std::shared_ptr<const HostToolRegistry>& registry);

}  // namespace airlock::kinds::codeact
