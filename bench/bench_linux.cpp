// `airlock bench` group "linux": the embedded backend against its physical floor and its peers,
// side by side in one run (SPEC §7):
//   cold acquire + first `exec true`   ≤ 1.5 × clone+pivot_root floor, ≤ 0.5 × bwrap
//     (with the backend's standby monitor ready, as in any process past its first acquire; the
//      first acquire of a process — no standby — is measured and reported beside it)
//   warm `exec true`                   ≤ 1.3 × host fork+exec
//   8 MiB write_file / read_file       ≥ 1 GB/s each way
// runc and crun (one-shot bundles, as an engine runs them) are reported beside bwrap when they
// can run here. Cold runs are interleaved with the floor and the peers, so all three meet the same machine state
// (network namespace teardown is asynchronous and slows whatever comes next). Stats are held by
// value: BenchRun stores them in a vector that later records reallocate.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <vector>

#include "airlock/backends/linux.hpp"
#include "bench.hpp"
#include "bench_host.hpp"

namespace airlock::bench {
namespace {

ExecOptions quick_options() {
  ExecOptions options;
  options.working_directory = kDefaultWorkDir;
  options.timeout = std::chrono::seconds(30);
  return options;
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
  auto backend = make_linux_backend(config);
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
  auto direct_backend = make_linux_backend(direct_config);
  Stats direct;
  direct.subject = "linux cold acquire + first exec true, no standby";
  Stats cold;
  cold.subject = "linux cold acquire + first exec true";
  Stats floor;
  floor.subject = "clone(all ns)+pivot_root floor + exec true";
  Stats peer;
  peer.subject = "bwrap --ro-bind / / --unshare-all … true";
  const int rounds = run.iterations(40);
  for (int i = -2; i < rounds; ++i) {
    const SandboxKey key{"bench-cold-" + salt, "t" + std::to_string(i), "a"};
    auto start = BenchClock::now();
    auto sandbox = backend->acquire(key, spec);
    sandbox->exec(Command::argv({"true"}), options);
    const double cold_ms = elapsed_ms(start);
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
    cold.samples.push_back(cold_ms);
    direct.samples.push_back(direct_ms);
    floor.samples.push_back(floor_ms);
    if (bwrap) peer.samples.push_back(bwrap_ms);
  }
  const Stats cold_stats = run.record(cold);
  const Stats direct_stats = run.record(direct);
  const Stats floor_stats = run.record(floor);
  run.ratio("linux cold acquire+exec / clone+pivot_root floor", cold_stats, floor_stats, 1.5);
  run.ratio("linux cold acquire+exec, no standby / clone+pivot_root floor", direct_stats,
            floor_stats, std::nullopt);
  if (bwrap) {
    const Stats peer_stats = run.record(peer);
    run.ratio("linux cold acquire+exec / bwrap", cold_stats, peer_stats, 0.5);
    run.ratio("linux cold acquire+exec, no standby / bwrap", direct_stats, peer_stats,
              std::nullopt);
  }
  for (std::size_t p = 0; p < oci.size(); ++p) {
    const Stats peer_stats = run.record(oci_samples[p]);
    run.ratio("linux cold acquire+exec / " + oci[p].name() + " run", cold_stats, peer_stats,
              std::nullopt);
    run.ratio("linux cold acquire+exec, no standby / " + oci[p].name() + " run", direct_stats,
              peer_stats, std::nullopt);
  }
  run.ratio("linux warm exec true / host fork+exec", warm_exec, host_exec, 1.3);
  Stats gigabyte;
  gigabyte.subject = "1 GB/s (target)";
  gigabyte.unit = "MB/s";
  gigabyte.samples = {1000.0};
  const Stats target = run.record(gigabyte);
  run.ratio("linux write_file 8 MiB / 1 GB/s", files_in_stats, target, 1.0, false);
  run.ratio("linux read_file 8 MiB / 1 GB/s", files_out_stats, target, 1.0, false);
  backend->purge_all();
  direct_backend->purge_all();
}

const bool kLinuxBenchGroup = register_bench_group(
    "linux",
    "linux backend: cold and warm exec vs the clone+pivot_root floor, host fork+exec and bwrap; "
    "8 MiB file throughput",
    run_linux_group);

}  // namespace
}  // namespace airlock::bench
