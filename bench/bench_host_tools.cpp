// `airlock bench` group "host-tools": one host-tool call's round trip on each channel, against a
// linux sandbox, side by side in one run (SPEC §7):
//   socket channel (p50)   ≤ 1 ms
//   files channel  (p50)   ≤ 1 poll interval + 2 warm exec round trips
// The round trip is timed inside the guest, around the shim's `call` — what a program waits for
// a tool — so the interpreter's own start-up is not counted. The tool itself returns at once.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <sstream>

#include "airlock/backends/linux.hpp"
#include "airlock/host_tool_transport.hpp"
#include "airlock/host_tools.hpp"
#include "bench.hpp"

namespace airlock::bench {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

std::shared_ptr<HostToolRegistry> echo_registry(std::uint64_t calls) {
  HostToolRegistryOptions options;
  options.max_dispatches_per_run = calls + 1;
  options.response_limits = {1 << 20, 64 << 20, calls + 1};
  auto registry = std::make_shared<HostToolRegistry>(std::move(options));
  registry->register_tool(
      HostTool{"ping",
               "answers at once",
               {{"n", ToolParameter::Type::integer}},
               [](const json::Json& arguments) { return arguments["n"]; },
               HostToolDeclaration(SourceIntegrity::trusted, std::nullopt, Identity::app)});
  return registry;
}

// Runs `calls` calls (after 3 untimed ones) on `channel`; returns each round trip in ms.
std::vector<double> round_trips(Sandbox& sandbox, HostToolChannel channel, int calls,
                                Milliseconds poll_interval) {
  const GuestRunLayout layout =
      guest_run_layout(std::string(kDefaultWorkDir) + "-runs/" + std::string(to_string(channel)));
  sandbox.write_file(layout.shim, host_tool_shim({"ping"}, 30s), "/");
  std::ostringstream program;
  program << "import time, airlock_host_tools as tools\n"
             "for n in range(3): tools.ping(n=n)\n"
             "for n in range("
          << calls
          << "):\n"
             "    start = time.perf_counter()\n"
             "    assert tools.ping(n=n) == n\n"
             "    print((time.perf_counter() - start) * 1000)\n";
  sandbox.write_file(layout.program, program.str(), "/");
  HostToolRun run(echo_registry(static_cast<std::uint64_t>(calls) + 3));
  HostToolRunOptions options;
  options.channel = channel;
  options.poll_interval = poll_interval;
  options.timeout = std::chrono::minutes(10);
  const HostToolRunResult outcome = run_program_with_host_tools(sandbox, run, layout, options);
  (void)reclaim_run(sandbox, layout);
  if (outcome.result.exit_code != 0 || outcome.channel != channel) {
    throw std::runtime_error("the host-tool bench program failed on the " +
                             std::string(to_string(channel)) +
                             " channel: " + outcome.result.stdout_bytes);
  }
  std::vector<double> samples;
  std::istringstream lines(outcome.result.stdout_bytes);
  for (double value = 0; lines >> value;) samples.push_back(value);
  if (samples.size() != static_cast<std::size_t>(calls)) {
    throw std::runtime_error("the host-tool bench program printed " +
                             std::to_string(samples.size()) + " timings, expected " +
                             std::to_string(calls));
  }
  return samples;
}

void run_host_tools_group(BenchRun& run) {
  if (::geteuid() != 0) {
    run.skipped("host-tools", "needs root (measured against the linux backend)");
    return;
  }
  ScratchDirectory state("airlock-bench-tools");
  LinuxBackendConfig config;
  config.state_dir = state.path;
  auto backend = make_linux_backend(config);
  SandboxSpec::Fields fields;
  fields.kind = "bench-tools";
  const SandboxSpec spec(fields);
  const SandboxKey key{"bench-tools-" + std::to_string(std::random_device{}()), "t", "a"};
  auto sandbox = backend->acquire(key, spec);

  // The files channel's bound is made of the poll interval and warm exec round trips, measured
  // here on the same sandbox.
  const Milliseconds poll{200};
  ExecOptions exec;
  exec.working_directory = "/";
  exec.timeout = 30s;
  const Stats warm = run.time("linux warm exec true (host-tools sandbox)", run.iterations(100),
                              [&] { sandbox->exec(Command::argv({"true"}), exec); });

  Stats socket;
  socket.subject = "host-tool round trip, socket channel";
  socket.samples = round_trips(*sandbox, HostToolChannel::socket, run.iterations(500), poll);
  const Stats socket_stats = run.record(socket);
  Stats files;
  files.subject = "host-tool round trip, files channel (poll 200 ms)";
  files.samples = round_trips(*sandbox, HostToolChannel::files, run.iterations(30), poll);
  const Stats files_stats = run.record(files);

  Stats one_ms;
  one_ms.subject = "1 ms (target)";
  one_ms.samples = {1.0};
  run.ratio("host-tool socket round trip / 1 ms", socket_stats, run.record(one_ms), 1.0);
  Stats bound;
  bound.subject = "1 poll interval + 2 warm exec (target)";
  bound.samples = {static_cast<double>(poll.count()) + 2 * warm.p50()};
  run.ratio("host-tool files round trip / (poll + 2 exec)", files_stats, run.record(bound), 1.0);
  run.ratio("host-tool files round trip / socket round trip", files_stats, socket_stats,
            std::nullopt);
  sandbox.reset();
  backend->purge_all();
}

const bool kHostToolsBenchGroup = register_bench_group(
    "host-tools",
    "host-tool call round trip on a linux sandbox: the socket channel vs the files channel",
    run_host_tools_group);

}  // namespace
}  // namespace airlock::bench
