// The files channel's supervisor: launch detached, poll, serve, collect, stop, clean up.
//
// Costs, per dispatch: a stat and a read of the request, a write of the answer; per poll: a stat
// of the exit marker and of each request in the window. A run's wall clock can exceed its
// timeout by the graces below: the answer to a dispatch that returned after the bound
// (kResponseWriteGrace), a last look at the marker and the output, the stop (3 ×
// kFinalReadGrace), and the removal of the transport directory (kReclaimGrace, an exec bound).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <thread>

#include "airlock/errors.hpp"
#include "airlock/host_tool_transport.hpp"
#include "airlock/paths.hpp"
#include "core/host_tools/host_tool_internal.hpp"

namespace airlock {
namespace {

using Clock = std::chrono::steady_clock;
constexpr Milliseconds kFinalReadGrace{2000};
constexpr Milliseconds kReclaimGrace{10'000};
constexpr std::uint64_t kMarkerCap = 32;
constexpr std::uint64_t kMaxWindow = 4;
constexpr std::size_t kTimeoutQuote = 2000;
constexpr const char* kSessionMarker = "airlock-host-tools: session";

Milliseconds remaining(Clock::time_point deadline) {
  return std::max(Milliseconds(1),
                  std::chrono::duration_cast<Milliseconds>(deadline - Clock::now()));
}

std::string seconds_text(Milliseconds duration) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", static_cast<double>(duration.count()) / 1000.0);
  return text;
}

std::optional<long long> parse_positive(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text.empty() || text.size() > 20) return std::nullopt;
  if (!std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  long long value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// The exit marker read as Python's int() reads text: surrounding whitespace, an optional sign,
// digits with single underscores between them. Anything else — or a value no exit code holds —
// is nullopt, which the caller reports as 1.
std::optional<int> parse_exit_code(std::string_view text) {
  auto space = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
  };
  while (!text.empty() && space(text.front())) text.remove_prefix(1);
  while (!text.empty() && space(text.back())) text.remove_suffix(1);
  bool negative = false;
  if (!text.empty() && (text.front() == '+' || text.front() == '-')) {
    negative = text.front() == '-';
    text.remove_prefix(1);
  }
  std::string digits;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c >= '0' && c <= '9') {
      digits += c;
    } else if (c != '_' || i == 0 || i + 1 == text.size() || text[i + 1] == '_') {
      return std::nullopt;
    }
  }
  if (digits.empty() || digits.size() > 10) return std::nullopt;
  long long value = 0;
  std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (negative) value = -value;
  if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max()) {
    return std::nullopt;
  }
  return static_cast<int>(value);
}

struct ReadOutcome {
  enum class State { not_yet, present, too_large } state = State::not_yet;
  std::string bytes;
};

// A file the guest writes by renaming into place: absent, empty, not a regular file — not yet.
ReadOutcome read_if_present(Sandbox& sandbox, const std::string& path, std::uint64_t cap) {
  ReadOutcome outcome;
  auto entry = sandbox.stat_file(path, "/");
  if (!entry || entry->kind != EntryKind::file) return outcome;
  if (!entry->size_bytes || *entry->size_bytes > cap) {
    outcome.state = ReadOutcome::State::too_large;
    return outcome;
  }
  if (*entry->size_bytes == 0) return outcome;
  try {
    outcome.bytes = sandbox.read_file(path, "/", cap);
  } catch (const TransferCapExceeded&) {
    outcome.state = ReadOutcome::State::too_large;
    return outcome;
  } catch (const NotFound&) {
    return outcome;
  }
  if (outcome.bytes.size() > cap) {
    outcome.state = ReadOutcome::State::too_large;
    return outcome;
  }
  outcome.state = ReadOutcome::State::present;
  return outcome;
}

std::string request_path(const GuestRunLayout& layout, std::uint64_t number, const char* suffix) {
  char name[32];
  std::snprintf(name, sizeof name, "%04llu", static_cast<unsigned long long>(number));
  return layout.calls + "/" + name + suffix;
}

}  // namespace

std::string timeout_output_quote(std::string_view output) {
  const std::string text = decode_utf8_lossy(output);
  std::size_t offset = 0;
  for (std::size_t counted = 0; counted < kTimeoutQuote && offset < text.size(); ++counted) {
    const auto lead = static_cast<unsigned char>(text[offset]);
    const std::size_t length = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
    offset += std::min(length, text.size() - offset);
  }
  return text.substr(0, offset);
}

std::string output_so_far(const std::string& quote) {
  if (quote.empty()) return "; it printed nothing";
  return "; what it printed (at most " + std::to_string(kTimeoutQuote) + " characters):\n" + quote;
}

// ---- stopping the program --------------------------------------------------------------------

StopOutcome stop_the_program(Sandbox& sandbox, const GuestRunLayout& layout, bool made_a_session) {
  std::optional<SandboxEntry> entry;
  try {
    entry = sandbox.stat_file(layout.pid, "/");
  } catch (const std::exception&) {
    return {SignalOutcome::unknown, SignalReach::nothing};
  }
  if (!entry) return {SignalOutcome::absent, SignalReach::nothing};
  std::string pid_text;
  try {
    pid_text = sandbox.read_file(layout.pid, "/", kMarkerCap);
  } catch (const std::exception&) {
    return {SignalOutcome::refused, SignalReach::nothing};
  }
  // The pid comes from a file the program can rewrite: digits only, and never 0 (`kill 0` would
  // reach the launcher's whole group).
  auto pid = parse_positive(pid_text);
  if (!pid || *pid <= 0) return {SignalOutcome::refused, SignalReach::nothing};
  std::string target = std::to_string(*pid);
  SignalReach reach = SignalReach::program;
  if (made_a_session) {
    // Only when the launcher itself said it made a session (never inferred from the session
    // file, which the guest can plant), and never the guest's pid 1.
    try {
      if (auto session = parse_positive(sandbox.read_file(layout.session, "/", kMarkerCap));
          session && *session > 1) {
        target = "-" + std::to_string(*session);
        reach = SignalReach::group;
      }
    } catch (const std::exception&) {
    }
  }
  try {
    ExecOptions options;
    options.working_directory = layout.directory;
    options.timeout = kFinalReadGrace;
    options.max_output_bytes = 4096;
    options.overflow = OutputOverflow::truncate;
    const auto result =
        sandbox.exec(Command::shell("kill -KILL " + target + " 2>/dev/null"), options);
    if (result.exit_code != 0) return {SignalOutcome::refused, SignalReach::nothing};
  } catch (const std::exception&) {
    return {SignalOutcome::refused, SignalReach::nothing};
  }
  return {SignalOutcome::sent, reach};
}

std::string signal_clause(const StopOutcome& stop) {
  if (stop.signal == SignalOutcome::sent && stop.reach == SignalReach::group) {
    return " and its process group was sent SIGKILL";
  }
  if (stop.signal == SignalOutcome::sent) {
    return " and was sent SIGKILL, which reaches it alone — anything it spawned is still running";
  }
  return " and could not be signalled, so it may still be running";
}

bool remove_guest_tree(Sandbox& sandbox, const std::string& path, Milliseconds timeout) {
  // Guards: an absolute, normalised path at least two components deep — never `/` or `/work`.
  const std::string normal = normalize_guest_path(path);
  const auto depth = std::count(normal.begin(), normal.end(), '/');
  if (normal != path || normal.front() != '/' || depth < 2 || normal.find("/..") != std::string::npos) {
    spdlog::warn("refusing to remove guest path {}: not an absolute path two components deep",
                 path);
    return false;
  }
  try {
    ExecOptions options;
    options.working_directory = normal.substr(0, normal.rfind('/'));
    if (options.working_directory.empty()) options.working_directory = "/";
    options.timeout = timeout;
    options.max_output_bytes = 64 * 1024;
    options.overflow = OutputOverflow::truncate;
    const auto result = sandbox.exec(Command::argv({"rm", "-rf", "--", normal}), options);
    if (result.exit_code != 0) {
      spdlog::warn("the guest refused to remove {}: rm exited {}: {}", normal, result.exit_code,
                   result.stderr_text());
      return false;
    }
    return true;
  } catch (const std::exception& error) {
    spdlog::warn("the removal of {} failed: {}", normal, error_detail(error));
    return false;
  }
}

std::string transport_directory(const GuestRunLayout& layout) {
  return layout.shim.substr(0, layout.shim.rfind('/'));
}

void remove_transport(Sandbox& sandbox, const GuestRunLayout& layout) {
  const std::string tools = transport_directory(layout);
  // The layout must agree: every transport file directly in `tools`, which is neither the run nor
  // the work directory, nor inside or around the work directory.
  for (const std::string* file : {&layout.program, &layout.launcher, &layout.calls, &layout.output,
                                  &layout.exit_code, &layout.pid, &layout.session}) {
    if (file->substr(0, file->rfind('/')) != tools) {
      spdlog::warn("not removing the transport of a run whose layout disagrees with itself");
      return;
    }
  }
  if (tools == layout.directory || guest_path_relative_to(tools, layout.work) ||
      guest_path_relative_to(layout.work, tools)) {
    spdlog::warn("not removing a transport directory that overlaps the work directory");
    return;
  }
  remove_guest_tree(sandbox, tools, kReclaimGrace);
}

// ---- the files channel -----------------------------------------------------------------------

ExecResult dispatch_over_exec(Sandbox& sandbox, HostToolRun& run, const GuestRunLayout& layout,
                              const HostToolRunOptions& options) {
  if (options.timeout.count() <= 0) throw InvalidArgument("timeout must be positive", "timeout");
  if (options.poll_interval.count() <= 0) {
    throw InvalidArgument("poll_interval must be positive", "poll_interval");
  }
  const auto deadline = Clock::now() + options.timeout;
  const std::string seconds = seconds_text(options.timeout);
  const TransferLimits& limits = [&]() -> const TransferLimits& {
    return run_response_limits(run);
  }();

  bool made_a_session = false;
  bool overran = false;
  struct Cleanup {
    Sandbox& sandbox;
    const GuestRunLayout& layout;
    bool& overran;
    bool& made_a_session;
    ~Cleanup() {
      try {
        if (!overran) {
          // A failure of ours, not the run's bound: stop a program still running before the
          // directory it runs from goes.
          if (read_if_present(sandbox, layout.exit_code, kMarkerCap).state !=
              ReadOutcome::State::present) {
            stop_the_program(sandbox, layout, made_a_session);
          }
        }
      } catch (const std::exception& error) {
        spdlog::warn("could not stop the program on the way out: {}", error_detail(error));
      }
      remove_transport(sandbox, layout);
    }
  } cleanup{sandbox, layout, overran, made_a_session};

  // 1. The launcher.
  sandbox.write_file(layout.launcher, launcher_script(layout, options.interpreter), "/");
  if (Clock::now() >= deadline) {
    overran = true;
    throw ProgramTimeout("the run's " + seconds +
                             "s were gone before the program was started — nothing ran",
                         "", SignalOutcome::absent, SignalReach::nothing);
  }

  // 2. Start it detached.
  auto complete = [&]() -> ExecResult {
    ExecResult result;
    const ReadOutcome marker = read_if_present(sandbox, layout.exit_code, kMarkerCap);
    result.exit_code = 1;
    if (marker.state == ReadOutcome::State::present) {
      result.exit_code = parse_exit_code(marker.bytes).value_or(1);
    }
    try {
      const ReadOutcome output = read_if_present(sandbox, layout.output, limits.max_total_bytes);
      if (output.state == ReadOutcome::State::too_large) {
        result.stderr_bytes =
            "the program's output was larger than the host will read and was not returned; have "
            "the program write what it needs to a file the run collects instead";
      } else {
        result.stdout_bytes = decode_utf8_lossy(output.bytes);
      }
    } catch (const std::exception& error) {
      result.stderr_bytes = "the program finished, but its output could not be read";
      spdlog::warn("reading a run's output failed: {}", error_detail(error));
    }
    return result;
  };

  ExecOptions launch;
  launch.working_directory = layout.directory;
  launch.timeout = remaining(deadline);
  launch.max_output_bytes = 64 * 1024;
  launch.overflow = OutputOverflow::truncate;
  ExecResult launched;
  try {
    launched = sandbox.exec(Command::shell("sh " + posix_quote(layout.launcher)), launch);
  } catch (const Timeout&) {
    if (read_if_present(sandbox, layout.exit_code, kMarkerCap).state ==
        ReadOutcome::State::present) {
      return complete();
    }
    overran = true;
    StopOutcome stop = stop_the_program(sandbox, layout, made_a_session);
    if (stop.signal == SignalOutcome::absent) stop.signal = SignalOutcome::unknown;
    throw ProgramTimeout("the run's " + seconds +
                             "s ran out while the program was being started; whether it started "
                             "could not be established" +
                             signal_clause(stop),
                         "", stop.signal, stop.reach);
  }
  if (launched.exit_code != 0) {
    ExecResult failed = launched;
    if (failed.stderr_bytes.empty()) failed.stderr_bytes = "the launcher did not start the program";
    return failed;
  }
  made_a_session = launched.stdout_bytes.find(kSessionMarker) != std::string::npos;

  // 3. Serve requests until the exit marker appears or the bound expires.
  const std::uint64_t allowance = run_max_dispatches(run) + 1;
  std::uint64_t served = 0;
  std::uint64_t window = 1;
  bool exhausted_logged = false;
  for (;;) {
    if (Clock::now() >= deadline) {
      if (read_if_present(sandbox, layout.exit_code, kMarkerCap).state ==
          ReadOutcome::State::present) {
        return complete();
      }
      std::string printed;
      try {
        printed = read_if_present(sandbox, layout.output, limits.max_total_bytes).bytes;
      } catch (const std::exception&) {
      }
      overran = true;
      StopOutcome stop = stop_the_program(sandbox, layout, made_a_session);
      if (stop.signal == SignalOutcome::absent) stop.signal = SignalOutcome::unrecorded;
      printed = timeout_output_quote(printed);
      throw ProgramTimeout("the program ran past the run's " + seconds + "s" + signal_clause(stop) +
                               output_so_far(printed),
                           printed, stop.signal, stop.reach);
    }

    // The exit marker wins over any request still waiting.
    if (read_if_present(sandbox, layout.exit_code, kMarkerCap).state ==
        ReadOutcome::State::present) {
      return complete();
    }

    const std::uint64_t room = allowance > served ? allowance - served : 0;
    const std::uint64_t count = std::min(window, room);
    if (count == 0 && !exhausted_logged) {
      spdlog::info("a run used its whole dispatch allowance; waiting only for its exit");
      exhausted_logged = true;
    }
    std::uint64_t found = 0;
    for (std::uint64_t i = 1; i <= count; ++i) {
      if (Clock::now() >= deadline) break;  // a request found after the bound is not started
      const std::uint64_t number = served + 1;
      const ReadOutcome request =
          read_if_present(sandbox, request_path(layout, number, ".request.json"),
                          limits.max_bytes_per_file);
      if (request.state == ReadOutcome::State::not_yet) break;  // serve the contiguous prefix
      ++found;
      std::optional<std::string> answer = answer_request(run, request.state ==
                                                                  ReadOutcome::State::too_large,
                                                         request.bytes);
      if (answer) {
        sandbox.write_file(request_path(layout, number, ".response.json"), *answer, "/");
      }
      ++served;
    }
    if (count > 0) {
      window = found < count ? 1 : std::min(window * 2, kMaxWindow);
    }
    if (found == 0) std::this_thread::sleep_for(std::min(options.poll_interval, remaining(deadline)));
  }
}

bool reclaim_run(Sandbox& sandbox, const GuestRunLayout& layout, Milliseconds timeout) {
  if (timeout.count() <= 0) throw InvalidArgument("timeout must be positive", "timeout");
  for (const std::string* path : {&layout.work, &layout.program, &layout.shim, &layout.launcher,
                                  &layout.calls, &layout.output, &layout.exit_code, &layout.pid,
                                  &layout.session}) {
    if (!guest_path_relative_to(*path, layout.directory)) {
      spdlog::warn("not reclaiming a run whose layout leaves its own directory");
      return false;
    }
  }
  return remove_guest_tree(sandbox, layout.directory, timeout);
}

}  // namespace airlock
