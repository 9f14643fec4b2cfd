// `airlock bench` group "linux": the embedded backend against its physical floor and its peers,
// side by side in one run (SPEC §7):
//   cold acquire + first `exec true`, warm pool hit   ≤ 0.3 × bwrap, ≤ 2 × warm exec
//   cold acquire + first `exec true`, pool miss       ≤ 1.0 × bwrap, ≤ 1.5 × clone+pivot_root floor
//     (a miss is built on the acquire path with the backend's standby monitor ready, as in any
//      process past its first acquire; the first acquire of a process — no standby — is
//      measured and reported beside it)
//   warm `exec true`                   ≤ 1.1 × host fork+exec
//   8 MiB write_file / read_file       ≥ 2 GB/s each way
//   snapshot, and resume + first exec  a sandbox's own files (frozen) and a new sandbox from
//                                      them, beside a cold acquire of the same backend
// runc and crun (one-shot bundles, as an engine runs them) are reported beside bwrap when they
// can run here. Cold runs are interleaved with the floor and the peers, so all meet the same
// machine state (network namespace teardown is asynchronous and slows whatever comes next).
// Each start's step-by-step breakdown (LinuxSetupTimings) is printed under its row.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <vector>

#include "airlock/backends/linux.hpp"
#include "bench.hpp"
#include "bench_host.hpp"

namespace airlock::bench {
namespace {

// The setup-latency breakdown: every step's duration (ms) of the sandboxes one backend starts
// while `recording`, in the order the steps first came.
struct SetupBreakdown {
  std::mutex mutex;
  bool recording = false;
  std::vector<std::string> order;
  std::map<std::string, std::vector<double>> samples;

  LinuxSetupObserver observer() {
    return [this](const LinuxSetupTimings& timings) {
      std::lock_guard lock(mutex);
      if (!recording) return;
      for (const auto& [name, took] : timings.steps) {
        auto& list = samples[name];
        if (list.empty() && std::find(order.begin(), order.end(), name) == order.end()) {
          order.push_back(name);
        }
        list.push_back(std::chrono::duration<double, std::milli>(took).count());
      }
    };
  }
  void record(BenchRun& run, const std::string& which) {
    std::lock_guard lock(mutex);
    for (const auto& name : order) {
      Stats step;
      step.subject = "  " + which + " setup: " + name;
      step.samples = samples[name];
      run.record(step);
    }
  }
};

// Until `backend` lists a ready pooled sandbox (the pool refills on its own thread); false
// after 30 s.
bool wait_for_pooled(SandboxBackend& backend) {
  for (int attempt = 0; attempt < 30'000; ++attempt) {
    for (const auto& entry : backend.list_sandboxes()) {
      if (entry.state == "pooled") return true;
    }
    ::usleep(1000);
  }
  return false;
}

ExecOptions quick_options() {
  ExecOptions options;
  options.working_directory = kDefaultWorkDir;
  options.timeout = std::chrono::seconds(30);
  return options;
}

// Snapshots (files only: the storage, frozen): saving a sandbox that holds a 1 MiB random file
// and a hundred small ones, and resuming it into a new sandbox (+ its first exec), interleaved
// with a cold acquire of the same backend (+ its first exec) so all three meet the same load.
void run_linux_snapshots(BenchRun& run, SandboxBackend& backend, const SandboxSpec& spec,
                         const std::string& salt) {
  const ExecOptions options = quick_options();
  const std::string scope = "bench-snapshot-" + salt;
  auto source = backend.acquire({scope, "source", "a"}, spec);
  source->exec(Command::shell("head -c 1048576 /dev/urandom > blob; mkdir many; "
                              "for i in $(seq 100); do echo $i > many/$i; done"),
               options);
  Stats saving{"linux snapshot (files: 1 MiB + 100 small)", "ms", {}};
  Stats resuming{"linux resume from snapshot + first exec true", "ms", {}};
  Stats cold{"linux cold acquire + first exec true (beside the snapshots)", "ms", {}};
  std::uint64_t snapshot_bytes = 0;
  for (int i = -1; i < run.iterations(20); ++i) {
    auto start = BenchClock::now();
    const SnapshotRecord saved = source->snapshot();
    const double save_ms = elapsed_ms(start);
    snapshot_bytes = saved.bytes;
    const SandboxKey fork{scope, "source", "fork-" + std::to_string(i + 1)};
    start = BenchClock::now();
    auto resumed = backend.acquire_from_snapshot(fork, spec, saved);
    resumed->exec(Command::argv({"true"}), options);
    const double resume_ms = elapsed_ms(start);
    resumed.reset();
    backend.dispose(fork);
    backend.delete_snapshot(saved.id);
    const SandboxKey fresh{scope, "cold-" + std::to_string(i + 1), "a"};
    start = BenchClock::now();
    auto sandbox = backend.acquire(fresh, spec);
    sandbox->exec(Command::argv({"true"}), options);
    const double cold_ms = elapsed_ms(start);
    sandbox.reset();
    backend.dispose(fresh);
    if (i < 0) continue;  // warm-up
    saving.samples.push_back(save_ms);
    resuming.samples.push_back(resume_ms);
    cold.samples.push_back(cold_ms);
  }
  source.reset();
  backend.dispose_scope(scope, std::nullopt);
  const Stats save_stats = run.record(saving);
  const Stats resume_stats = run.record(resuming);
  const Stats cold_stats = run.record(cold);
  run.ratio("linux snapshot / cold acquire+exec", save_stats, cold_stats, std::nullopt);
  run.ratio("linux resume+exec / cold acquire+exec", resume_stats, cold_stats, std::nullopt);
  run.record(Stats{"linux snapshot size (1 MiB random file + 100 small)", "KiB",
                   {static_cast<double>(snapshot_bytes >> 10)}});
}

void run_linux_group(BenchRun& run) {
  if (::geteuid() != 0) {
    run.skipped("linux", "needs root (the backend's user namespaces, cgroups and mounts)");
    return;
  }
  ScratchDirectory state("airlock-bench-state");
  ScratchDirectory floor_root("airlock-bench-floor");
  std::filesystem::create_directory(floor_root.path / "root");
  LinuxBackendConfig config;
  config.state_dir = state.path;
  SetupBreakdown miss_steps;
  LinuxBackendConfig miss_config = config;
  miss_config.setup_observer = miss_steps.observer();
  auto backend = make_linux_backend(miss_config);
  SandboxSpec::Fields fields;
  fields.kind = "bench";
  const SandboxSpec spec(fields);
  const ExecOptions options = quick_options();
  const std::string salt = std::to_string(std::random_device{}());

  // Warm first, before any namespace churn; interleaved with the host's own fork+exec so both
  // meet the same load.
  auto warm = backend->acquire({"bench-warm-" + salt, "t", "a"}, spec);
  Stats warm_samples;
  warm_samples.subject = "linux warm exec true";
  Stats host_samples;
  host_samples.subject = "host fork+exec /bin/true";
  for (int i = -5; i < run.iterations(300); ++i) {
    auto start = BenchClock::now();
    warm->exec(Command::argv({"true"}), options);
    const double warm_ms = elapsed_ms(start);
    start = BenchClock::now();
    host_baseline::fork_exec_true();
    const double host_ms = elapsed_ms(start);
    if (i < 0) continue;
    warm_samples.samples.push_back(warm_ms);
    host_samples.samples.push_back(host_ms);
  }
  const Stats warm_exec = run.record(warm_samples);
  const Stats host_exec = run.record(host_samples);

  // Files, 8 MiB each way, in MB/s.
  const std::string payload(8u << 20, 'x');
  Stats files_in;
  files_in.subject = "linux write_file 8 MiB";
  files_in.unit = "MB/s";
  Stats files_out;
  files_out.subject = "linux read_file 8 MiB";
  files_out.unit = "MB/s";
  for (int i = 0; i < run.iterations(30) + 2; ++i) {
    auto start = BenchClock::now();
    warm->write_file("bench.bin", payload, kDefaultWorkDir);
    const double write_ms = elapsed_ms(start);
    start = BenchClock::now();
    const std::string back = warm->read_file("bench.bin", kDefaultWorkDir, payload.size());
    const double read_ms = elapsed_ms(start);
    if (back.size() != payload.size()) throw std::runtime_error("read_file returned short");
    if (i < 2) continue;  // warm-up
    files_in.samples.push_back(payload.size() / 1e6 / (write_ms / 1e3));
    files_out.samples.push_back(payload.size() / 1e6 / (read_ms / 1e3));
  }
  const Stats files_in_stats = run.record(files_in);
  const Stats files_out_stats = run.record(files_out);
  backend->dispose_scope("bench-warm-" + salt, std::nullopt);
  warm.reset();

  // Cold, interleaved with the floor and bwrap.
  const auto bwrap = host_baseline::find_bwrap();
  if (!bwrap) run.skipped("bwrap true", "bubblewrap is not installed (apt-get install bubblewrap)");
  // runc and crun one-shot, as a container engine runs them (a bundle, a cgroup, run and delete).
  ScratchDirectory oci_scratch("airlock-bench-oci");
  std::vector<host_baseline::OciPeer> oci;
  std::vector<Stats> oci_samples;
  for (const char* runtime : {"runc", "crun"}) {
    std::string why;
    if (auto peer = host_baseline::OciPeer::prepare(runtime, oci_scratch.path, why)) {
      oci.push_back(std::move(*peer));
      Stats samples;
      samples.subject = std::string(runtime) + " run (one-shot bundle) /bin/true";
      oci_samples.push_back(samples);
    } else {
      run.skipped(std::string(runtime) + " run /bin/true", why);
    }
  }
  // A second backend without a standby: the first acquire of a process, every time.
  LinuxBackendConfig direct_config = config;
  direct_config.standby = false;
  SetupBreakdown direct_steps;
  direct_config.setup_observer = direct_steps.observer();
  auto direct_backend = make_linux_backend(direct_config);
  // A third with a warm pool of one, measured only when a pooled sandbox is ready, and waited
  // on until it is refilled before anything else is measured (the refill's work is the
  // pool's, off the acquire path, and must not land on the other subjects' clocks).
  LinuxBackendConfig pool_config = config;
  pool_config.pool.size = 1;
  pool_config.pool.prewarm = true;
  auto pool_backend = make_linux_backend(pool_config);
  Stats hit;
  hit.subject = "linux cold acquire + first exec true, warm pool hit";
  Stats hit_exec;
  hit_exec.subject = "  linux pool hit: the first exec true alone";
  Stats direct;
  direct.subject = "linux cold acquire + first exec true, no standby";
  Stats cold;
  cold.subject = "linux cold acquire + first exec true, pool miss";
  Stats first_exec;
  first_exec.subject = "  linux pool miss: the first exec true alone";
  Stats floor;
  floor.subject = "clone(all ns)+pivot_root floor + exec true";
  Stats peer;
  peer.subject = "bwrap --ro-bind / / --unshare-all … true";
  const int rounds = run.iterations(40);
  for (int i = -2; i < rounds; ++i) {
    for (SetupBreakdown* steps : {&miss_steps, &direct_steps}) {
      std::lock_guard lock(steps->mutex);
      steps->recording = i >= 0;
    }
    const SandboxKey key{"bench-cold-" + salt, "t" + std::to_string(i), "a"};
    if (!wait_for_pooled(*pool_backend)) throw std::runtime_error("the warm pool never filled");
    auto start = BenchClock::now();
    auto pooled = pool_backend->acquire(key, spec);
    const auto claimed = BenchClock::now();
    pooled->exec(Command::argv({"true"}), options);
    const double hit_ms = elapsed_ms(start);
    const double hit_exec_ms = elapsed_ms(claimed);
    pooled.reset();
    pool_backend->dispose(key);
    if (!wait_for_pooled(*pool_backend)) throw std::runtime_error("the warm pool was not refilled");

    start = BenchClock::now();
    auto sandbox = backend->acquire(key, spec);
    const auto acquired = BenchClock::now();
    sandbox->exec(Command::argv({"true"}), options);
    const double cold_ms = elapsed_ms(start);
    const double first_exec_ms = elapsed_ms(acquired);
    sandbox.reset();
    backend->dispose(key);

    start = BenchClock::now();
    auto unprepared = direct_backend->acquire(key, spec);
    unprepared->exec(Command::argv({"true"}), options);
    const double direct_ms = elapsed_ms(start);
    unprepared.reset();
    direct_backend->dispose(key);

    start = BenchClock::now();
    host_baseline::clone_pivot_true(floor_root.path / "root");
    const double floor_ms = elapsed_ms(start);

    double bwrap_ms = 0;
    if (bwrap) {
      start = BenchClock::now();
      host_baseline::bwrap_true(*bwrap);
      bwrap_ms = elapsed_ms(start);
    }
    std::vector<double> oci_ms;
    for (auto& runtime : oci) {
      start = BenchClock::now();
      runtime.run_true();
      oci_ms.push_back(elapsed_ms(start));
    }
    if (i < 0) continue;  // warm-up rounds
    for (std::size_t p = 0; p < oci.size(); ++p) oci_samples[p].samples.push_back(oci_ms[p]);
    hit.samples.push_back(hit_ms);
    hit_exec.samples.push_back(hit_exec_ms);
    cold.samples.push_back(cold_ms);
    first_exec.samples.push_back(first_exec_ms);
    direct.samples.push_back(direct_ms);
    floor.samples.push_back(floor_ms);
    if (bwrap) peer.samples.push_back(bwrap_ms);
  }
  const Stats hit_stats = run.record(hit);
  run.record(hit_exec);
  const Stats cold_stats = run.record(cold);
  miss_steps.record(run, "linux pool miss");
  run.record(first_exec);
  const Stats direct_stats = run.record(direct);
  direct_steps.record(run, "linux no standby");
  const Stats floor_stats = run.record(floor);
  run.ratio("linux pool hit acquire+exec / warm exec", hit_stats, warm_exec, 2.0);
  run.ratio("linux pool miss acquire+exec / clone+pivot_root floor", cold_stats, floor_stats,
            1.5);
  run.ratio("linux cold acquire+exec, no standby / clone+pivot_root floor", direct_stats,
            floor_stats, std::nullopt);
  if (bwrap) {
    const Stats peer_stats = run.record(peer);
    run.ratio("linux pool hit acquire+exec / bwrap", hit_stats, peer_stats, 0.3);
    run.ratio("linux pool miss acquire+exec / bwrap", cold_stats, peer_stats, 1.0);
    run.ratio("linux cold acquire+exec, no standby / bwrap", direct_stats, peer_stats,
              std::nullopt);
  }
  for (std::size_t p = 0; p < oci.size(); ++p) {
    const Stats peer_stats = run.record(oci_samples[p]);
    run.ratio("linux pool hit acquire+exec / " + oci[p].name() + " run", hit_stats, peer_stats,
              std::nullopt);
    run.ratio("linux pool miss acquire+exec / " + oci[p].name() + " run", cold_stats, peer_stats,
              std::nullopt);
    run.ratio("linux cold acquire+exec, no standby / " + oci[p].name() + " run", direct_stats,
              peer_stats, std::nullopt);
  }
  run.ratio("linux warm exec true / host fork+exec", warm_exec, host_exec, 1.1);
  Stats gigabytes;
  gigabytes.subject = "2 GB/s (target)";
  gigabytes.unit = "MB/s";
  gigabytes.samples = {2000.0};
  const Stats target = run.record(gigabytes);
  run.ratio("linux write_file 8 MiB / 2 GB/s", files_in_stats, target, 1.0, false);
  run.ratio("linux read_file 8 MiB / 2 GB/s", files_out_stats, target, 1.0, false);
  run_linux_snapshots(run, *backend, spec, salt);
  pool_backend->purge_all();
  pool_backend.reset();
  backend->purge_all();
  direct_backend->purge_all();
}

const bool kLinuxBenchGroup = register_bench_group(
    "linux",
    "linux backend: cold (warm pool hit and miss) and warm exec vs the clone+pivot_root floor, "
    "host fork+exec, bwrap, runc and crun; "
    "8 MiB file throughput; snapshot and resume beside a cold acquire",
    run_linux_group);

}  // namespace
}  // namespace airlock::bench
