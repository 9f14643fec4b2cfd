// `airlock bench` group "density": how many idle warm `linux` sandboxes one machine holds, and
// what each costs the host (SPEC §7: ≥ 1,000 on a 2-core, 24 GiB machine, ≤ 2 MiB each).
//
// What each costs, divided over the fleet:
//   - the proportional set size (Pss) of the fleet's own processes: what the init processes
//     themselves hold;
//   - the growth of the kernel's own memory for it (Slab, KernelStack, PageTables, Percpu, and
//   Shmem for
//     the tmpfs mounts): namespaces, cgroups, mounts, stacks;
//   - their sum, the figure held to the target;
//   - and the drop in MemAvailable, the machine-wide view, printed for comparison only: every
//     other process on the machine moves it too (a compiler's gigabyte comes and goes).
#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "airlock/backends/linux.hpp"
#include "bench.hpp"

namespace airlock::bench {
namespace {

// A field of /proc/meminfo or smaps_rollup, in KiB ("MemAvailable:", "Pss:"); -1 when absent.
long kib_field(const std::filesystem::path& file, std::string_view field) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) != 0) continue;
    std::istringstream values(line.substr(field.size()));
    long kib = -1;
    values >> kib;
    return kib;
  }
  return -1;
}

// The kernel's memory that sandboxes grow: objects, stacks, page tables, tmpfs pages, per-cpu
// counters (cgroups keep theirs there).
long kernel_kib() {
  long total = 0;
  for (const char* field : {"Slab:", "KernelStack:", "PageTables:", "Shmem:", "Percpu:"}) {
    total += std::max(0L, kib_field("/proc/meminfo", field));
  }
  return total;
}

// Pids of the processes running our init binary (monitors and sandboxes' PID 1 alike).
std::set<pid_t> init_processes() {
  std::set<pid_t> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code error;
    const auto exe = std::filesystem::read_symlink(entry.path() / "exe", error);
    if (error) continue;
    if (exe.filename() == "airlock-init") found.insert(static_cast<pid_t>(std::stol(name)));
  }
  return found;
}

void run_density_group(BenchRun& run) {
  if (::geteuid() != 0) {
    run.skipped("density", "needs root (the linux backend's user namespaces, cgroups and mounts)");
    return;
  }
  const int fleet = run.quick() ? 50 : 1000;
  ScratchDirectory state("airlock-bench-density");
  LinuxBackendConfig config;
  config.state_dir = state.path;
  auto backend = make_linux_backend(config);
  SandboxSpec::Fields fields;
  fields.kind = "bench";
  const SandboxSpec spec(fields);
  const std::string scope = "bench-density-" + std::to_string(std::random_device{}());
  ExecOptions options;
  options.working_directory = kDefaultWorkDir;
  options.timeout = std::chrono::seconds(30);

  const std::set<pid_t> before_pids = init_processes();
  const long available_before = kib_field("/proc/meminfo", "MemAvailable:");
  const long kernel_before = kernel_kib();
  Stats acquire;
  acquire.subject = "linux cold acquire + exec true, fleet of " + std::to_string(fleet);
  int held = 0;
  try {
    for (int i = 0; i < fleet; ++i) {
      const auto start = std::chrono::steady_clock::now();
      auto sandbox = backend->acquire({scope, "t" + std::to_string(i), "a"}, spec);
      sandbox->exec(Command::argv({"true"}), options);
      acquire.samples.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
      ++held;  // the handle goes; the sandbox stays, idle and warm
    }
  } catch (const std::exception& error) {
    run.skipped("density beyond " + std::to_string(held) + " sandboxes", error.what());
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));  // let the fleet settle
  const long available_after = kib_field("/proc/meminfo", "MemAvailable:");
  const long kernel_after = kernel_kib();
  long pss_kib = 0;
  for (const pid_t pid : init_processes()) {
    if (before_pids.contains(pid)) continue;
    const long pss = kib_field("/proc/" + std::to_string(pid) + "/smaps_rollup", "Pss:");
    if (pss > 0) pss_kib += pss;
  }

  // Every sandbox still answers: the fleet is warm, not merely counted.
  int answering = 0;
  int sampled = 0;
  for (int i = 0; i < held; i += std::max(1, held / 20)) {
    ++sampled;
    auto sandbox = backend->acquire({scope, "t" + std::to_string(i), "a"}, spec);
    if (sandbox->exec(Command::argv({"true"}), options).exit_code == 0) ++answering;
  }

  run.record(acquire);
  Stats size;
  size.subject = "idle warm sandboxes held (" + std::to_string(answering) + " of " +
                 std::to_string(sampled) + " sampled answered)";
  size.unit = "sandboxes";
  size.samples = {static_cast<double>(held)};
  const Stats held_stats = run.record(size);
  if (run.quick()) {
    run.skipped("idle warm sandboxes held / 1,000", "--quick builds a fleet of 50 only");
  } else {
    Stats wanted;
    wanted.subject = "1,000 sandboxes (target)";
    wanted.unit = "sandboxes";
    wanted.samples = {1000.0};
    run.ratio("idle warm sandboxes held / 1,000", held_stats, run.record(wanted), 1.0,
              /*at_most=*/false);
  }
  if (held > 0) {
    const auto per_sandbox = [&](const std::string& subject, long kib) {
      Stats stats;
      stats.subject = subject;
      stats.unit = "MiB";
      stats.samples = {static_cast<double>(kib) / 1024.0 / held};
      return run.record(stats);
    };
    per_sandbox("init processes' Pss per idle sandbox", pss_kib);
    per_sandbox("kernel memory per idle sandbox (slab, stacks, tables, tmpfs, per-cpu)",
                kernel_after - kernel_before);
    const Stats host = per_sandbox("host memory per idle sandbox (Pss + kernel)",
                                   pss_kib + kernel_after - kernel_before);
    per_sandbox("MemAvailable drop per idle sandbox (machine-wide, for comparison)",
                available_before - available_after);
    Stats two;
    two.subject = "2 MiB (target)";
    two.unit = "MiB";
    two.samples = {2.0};
    run.ratio("host memory per idle sandbox / 2 MiB", host, run.record(two), 1.0);
  }
  backend->dispose_scope(scope, std::nullopt);
  backend->purge_all();
}

const bool kDensityBenchGroup = register_bench_group(
    "density", "idle warm linux sandboxes one machine holds, and the host memory each costs",
    run_density_group);

}  // namespace
}  // namespace airlock::bench
