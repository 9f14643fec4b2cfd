// Pieces the two host-tool channels share.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "airlock/host_tool_transport.hpp"

namespace airlock {

struct StopOutcome {
  SignalOutcome signal = SignalOutcome::unknown;
  SignalReach reach = SignalReach::nothing;
};

inline const TransferLimits& run_response_limits(const HostToolRun& run) {
  return run.registry().options().response_limits;
}
inline std::uint64_t run_max_dispatches(const HostToolRun& run) {
  return run.registry().options().max_dispatches_per_run;
}

// The answer to one request as the guest sent it (already read under the per-request cap):
// the JSON text to write back, or nullopt for an abandoned claim (no answer, no dispatch).
std::optional<std::string> answer_request(HostToolRun& run, bool too_large,
                                          const std::string& request);

// Signal the program the launcher recorded (files channel).
StopOutcome stop_the_program(Sandbox& sandbox, const GuestRunLayout& layout, bool made_a_session);
// What a ProgramTimeout quotes of the program's output: decoded (lossy UTF-8), at most 2000
// characters.
std::string timeout_output_quote(std::string_view output);
// The clause a ProgramTimeout's message ends with: the quote, or that nothing was printed.
std::string output_so_far(const std::string& quote);
// " and its process group was sent SIGKILL", …
std::string signal_clause(const StopOutcome& stop);
// `rm -rf` of an absolute guest path at least two components deep; false on any failure.
bool remove_guest_tree(Sandbox& sandbox, const std::string& path, Milliseconds timeout);
// Remove the run's host_tools/ directory when the layout agrees with itself.
void remove_transport(Sandbox& sandbox, const GuestRunLayout& layout);

}  // namespace airlock
