// How a guest program reaches the host's tools: two channels, one dispatch door.
//
// **Over exec** (any backend with exec + files_in + files_out; not files_list). A kind writes the
// program and the generated shim into a fresh run directory; `dispatch_over_exec` writes a
// launcher, starts it detached, polls for request files, answers each through
// `HostToolRun::dispatch`, and collects the program's output when its exit marker appears. The
// file protocol — claim `calls/NNNN.claim`, publish `NNNN.request.json`, poll for
// `NNNN.response.json` — is the reference's, so a guest written against its shim is served too.
//
// **Over a socket** (backends that expose `Sandbox::socket_channel`, e.g. `linux`). The same shim
// connects to a unix socket the host listens on for this run: one JSON line per call, answered
// as soon as the tool returns — no polling. Requests go through the same door, caps and
// refusals. The program runs as one bounded exec, so a timeout kills its whole process group.
//
// `run_program_with_host_tools` picks the socket channel when the sandbox offers one and the
// files channel otherwise, and reports which in the result.
//
// The shim is not a control: it runs where model-written code can read, edit or ignore it, and a
// program that writes request files (or socket lines) itself is served identically. Every gate
// is host-side.
//
// One run is two directories. `work` is the program's working directory and the only place a
// kind puts model-named files; the program, the shim, the launcher and the call files sit in a
// sibling (`host_tools/`) nothing a model names can reach, so a guest file can never be imported
// in place of the shim.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "airlock/host_tools.hpp"
#include "airlock/sandbox.hpp"

namespace airlock {

inline constexpr const char* kShimModule = "airlock_host_tools.py";
inline constexpr const char* kCallsDirectory = "host_tool_calls";
inline constexpr const char* kWorkDirectory = "work";

// Absolute guest paths of one run. `directory` is the run; `work` the program's cwd; the rest
// sit in `directory/host_tools/`.
struct GuestRunLayout {
  std::string directory;
  std::string work;
  std::string program;
  std::string shim;
  std::string launcher;
  std::string calls;
  std::string output;
  std::string exit_code;
  std::string pid;
  std::string session;
};

// Refuses (InvalidArgument): a relative run directory, one containing ':' (it travels through
// PYTHONPATH, which cannot quote one) or a backslash; a program name that is not a plain
// basename, is one of the transport's own file names, or whose module stem would shadow the
// shim, a module the shim imports, or a module CPython imports at start-up.
GuestRunLayout guest_run_layout(std::string_view run_directory,
                                std::string_view program = "program.py");

// The generated Python module. Exposes `call(name, /, **arguments)`, `HostToolError`, and one
// wrapper function per *spellable* tool name: a Python identifier that, after NFKC (how Python
// reads identifiers: `ｏｐｅｎ` is `open`), is no keyword, no dunder and none of the module's own
// names or the reference shim's globals (`call`, `HostToolError`, `open`, `json`, `os`, `time`,
// `Exception`, …). Two names with one spelling: the first in sorted order gets it. Every name
// stays reachable through `call`. No tool name can break the module: its machinery reads only
// locals of one closure, bound before any wrapper exists, so a wrapper named `print` or
// `isinstance` shadows nothing it uses. `call_timeout` bounds each call's wait for an answer.
std::string host_tool_shim(const std::vector<std::string>& tool_names,
                           Milliseconds call_timeout = std::chrono::seconds(300));

// The POSIX sh launcher for the files channel (see the .cpp for its steps).
std::string launcher_script(const GuestRunLayout& layout, std::string_view interpreter = "python3");

enum class HostToolChannel : std::uint8_t { files, socket };
std::string_view to_string(HostToolChannel channel) noexcept;

struct HostToolRunOptions {
  Milliseconds timeout{120'000};       // the program's bound, wall clock
  Milliseconds poll_interval{200};     // files channel only
  std::string interpreter = "python3";
  // Force a channel; nullopt chooses (socket when the sandbox offers one).
  std::optional<HostToolChannel> channel;
};

struct HostToolRunResult {
  ExecResult result;
  HostToolChannel channel = HostToolChannel::files;
};

// Runs the program already written at `layout.program` (with the shim at `layout.shim`), serving
// its calls through `run`. The run's own bound expiring raises ProgramTimeout carrying the
// program's output so far and what was done about it (`signal`, `reach`); a plain Timeout means a
// backend bounded one of its own calls. The transport's own files are removed on every path
// (best effort); `layout.work` is left for the caller to collect from and then `reclaim_run`.
HostToolRunResult run_program_with_host_tools(Sandbox& sandbox, HostToolRun& run,
                                              const GuestRunLayout& layout,
                                              const HostToolRunOptions& options);

// The files channel alone (what `run_program_with_host_tools` uses when there is no socket).
// Removes only the transport's directory (`host_tools/`), on every path; `layout.work` stays for
// the caller to collect from, then `reclaim_run`. The run's own bound expiring raises
// ProgramTimeout whose message ends with what the program printed (at most 2000 characters).
ExecResult dispatch_over_exec(Sandbox& sandbox, HostToolRun& run, const GuestRunLayout& layout,
                              const HostToolRunOptions& options);

// Remove the whole run directory (`rm -rf`, guarded: absolute, no `..`, ≥ 2 components). True
// only when the removal exited 0. False is a data-retention failure: the next program in this
// warm sandbox could read what was left; the remedy is disposal.
bool reclaim_run(Sandbox& sandbox, const GuestRunLayout& layout,
                 Milliseconds timeout = std::chrono::seconds(30));

}  // namespace airlock
