// `airlock bench` group "gvisor": the gvisor backend beside raw runsc, in one run, and its
// snapshots (save, resume) beside its own cold acquire.
//   cold acquire + first `exec true`   vs `runsc run` of a trivial bundle and `runsc do true`
//     (the backend's acquire is a `runsc run --detach` plus our keeper; the ratio shows what
//      the bundle, records and locks cost on top of runsc itself)
//   warm `exec true`                   vs a raw `runsc exec <container> true` into the same kind
//     of container (what our wrapper, pipes and status channel add)
// SPEC §7 sets no gVisor targets; the ones printed here are ours (docs/backends/gvisor.md):
// cold ≤ 1.1 × `runsc run`, warm ≤ 1.3 × raw `runsc exec`.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>

#include "airlock/backends/gvisor.hpp"
#include "airlock/images.hpp"
#include "airlock/json.hpp"
#include "bench.hpp"

namespace airlock::bench {
namespace {

std::optional<std::filesystem::path> find_runsc() {
  for (const char* candidate : {"/usr/bin/runsc", "/usr/local/bin/runsc", "/usr/sbin/runsc"}) {
    if (::access(candidate, X_OK) == 0) return std::filesystem::path(candidate);
  }
  return std::nullopt;
}

// A two-applet busybox root (sh, true), as an image describes it: enough for `exec true`.
void make_busybox_root(const std::filesystem::path& root) {
  for (const char* directory : {"bin", "proc", "dev", "sys", "tmp", "etc"}) {
    std::filesystem::create_directories(root / directory);
  }
  std::filesystem::copy_file("/bin/busybox", root / "bin" / "busybox");
  std::filesystem::create_symlink("busybox", root / "bin" / "sh");
  std::filesystem::create_symlink("busybox", root / "bin" / "true");
  std::filesystem::create_symlink("busybox", root / "bin" / "sleep");
  std::ofstream(root / "etc" / "passwd") << "root:x:0:0:root:/root:/bin/sh\n";
}

void write_bundle(const std::filesystem::path& bundle, const std::filesystem::path& rootfs,
                  const std::vector<std::string>& args) {
  std::filesystem::create_directories(bundle);
  const json::Json config = {{"ociVersion", "1.0.2"},
                             {"process",
                              {{"terminal", false},
                               {"user", {{"uid", 0}, {"gid", 0}}},
                               {"args", args},
                               {"env", {"PATH=/bin"}},
                               {"cwd", "/"},
                               {"noNewPrivileges", true}}},
                             {"root", {{"path", rootfs.string()}, {"readonly", true}}},
                             {"linux",
                              {{"namespaces",
                                {{{"type", "pid"}},
                                 {{"type", "network"}},
                                 {{"type", "ipc"}},
                                 {{"type", "uts"}},
                                 {{"type", "mount"}}}}}}};
  std::ofstream(bundle / "config.json") << config.dump();
}

void run_gvisor_group(BenchRun& run) {
  if (::geteuid() != 0) {
    run.skipped("gvisor", "needs root (runsc makes namespaces and cgroups)");
    return;
  }
  const auto runsc = find_runsc();
  if (!runsc) {
    run.skipped("gvisor", "runsc is not installed (scripts/bootstrap --test installs it)");
    return;
  }
  if (::access("/bin/busybox", X_OK) != 0) {
    run.skipped("gvisor", "busybox-static is not installed (the bench's image is built from it)");
    return;
  }
  // runsc's Gofer runs unprivileged and must pass through to the rootfs.
  ScratchDirectory scratch("airlock-bench-gvisor", std::filesystem::perms(0711));
  const auto source = scratch.path / "busybox-source";
  make_busybox_root(source);
  GvisorBackendConfig config;
  config.state_dir = scratch.path / "state";
  config.image_store = scratch.path / "images";
  {
    images::ImageStore store(config.image_store, images::OwnershipMap::shifted(config.uid_base));
    store.import_directory(source, "busybox");
  }
  const GvisorPlatformProbe probe = probe_gvisor_platform(*runsc);
  if (!probe.working) {
    run.skipped("gvisor", "no gVisor platform works on this host");
    return;
  }
  const std::string platform = "--platform=" + std::string(to_string(*probe.working));
  run.record(Stats{
      "gvisor platform probe (" + std::string(to_string(*probe.working)) + ", once per process)",
      "ms",
      {probe.probe_milliseconds}});
  auto backend = make_gvisor_backend(config);
  SandboxSpec::Fields fields;
  fields.kind = "bench";
  fields.image = "busybox";
  const SandboxSpec spec(fields);
  ExecOptions options;
  options.working_directory = kDefaultWorkDir;
  options.timeout = std::chrono::seconds(60);
  const std::string salt = std::to_string(std::random_device{}());

  // Raw runsc, a trivial bundle in a private root: `run` start to end, and `exec` into a
  // container kept running.
  const auto raw_root = scratch.path / "raw-root";
  const auto run_bundle = scratch.path / "bundle-run";
  const auto keep_bundle = scratch.path / "bundle-keep";
  write_bundle(run_bundle, source, {"true"});
  write_bundle(keep_bundle, source, {"sleep", "100000"});
  const std::vector<std::string> raw = {runsc->string(), "--root=" + raw_root.string(), platform,
                                        "--network=none"};
  auto raw_command = [&raw](std::vector<std::string> tail) {
    std::vector<std::string> argv = raw;
    argv.insert(argv.end(), tail.begin(), tail.end());
    return argv;
  };
  const std::string kept = "airlock-bench-keep-" + salt;
  if (run_quietly(raw_command({"run", "--detach", "--bundle=" + keep_bundle.string(), kept})) !=
      0) {
    run.skipped("raw runsc exec", "runsc could not start the kept container");
  }

  // Warm, interleaved with the raw exec so both meet the same load.
  auto warm = backend->acquire({"bench-warm-" + salt, "t", "a"}, spec);
  Stats ours{"gvisor warm exec true", "ms", {}};
  Stats theirs{"runsc exec <container> true", "ms", {}};
  for (int i = -2; i < run.iterations(40); ++i) {
    auto start = BenchClock::now();
    warm->exec(Command::argv({"true"}), options);
    const double ours_ms = elapsed_ms(start);
    start = BenchClock::now();
    run_quietly(raw_command({"exec", kept, "true"}));
    const double theirs_ms = elapsed_ms(start);
    if (i < 0) continue;
    ours.samples.push_back(ours_ms);
    theirs.samples.push_back(theirs_ms);
  }
  const Stats warm_stats = run.record(ours);
  const Stats raw_exec = run.record(theirs);
  run.ratio("gvisor warm exec / raw runsc exec", warm_stats, raw_exec, 1.3);
  backend->dispose_scope("bench-warm-" + salt, std::nullopt);
  warm.reset();
  run_quietly(raw_command({"delete", "--force", kept}));

  // Cold, interleaved with `runsc run` of the trivial bundle and `runsc do true`.
  Stats cold{"gvisor cold acquire + first exec true", "ms", {}};
  Stats raw_run{"runsc run (bundle: true)", "ms", {}};
  Stats raw_do{"runsc do true", "ms", {}};
  for (int i = -1; i < run.iterations(10); ++i) {
    const SandboxKey key{"bench-cold-" + salt, "t" + std::to_string(i), "a"};
    auto start = BenchClock::now();
    auto sandbox = backend->acquire(key, spec);
    sandbox->exec(Command::argv({"true"}), options);
    const double cold_ms = elapsed_ms(start);
    sandbox.reset();
    backend->dispose(key);
    start = BenchClock::now();
    run_quietly(raw_command({"run", "--bundle=" + run_bundle.string(),
                             "airlock-bench-run-" + salt + "-" + std::to_string(i + 1)}));
    const double run_ms = elapsed_ms(start);
    start = BenchClock::now();
    run_quietly(raw_command({"do", "true"}));
    const double do_ms = elapsed_ms(start);
    if (i < 0) continue;
    cold.samples.push_back(cold_ms);
    raw_run.samples.push_back(run_ms);
    raw_do.samples.push_back(do_ms);
  }
  const Stats cold_stats = run.record(cold);
  const Stats run_stats = run.record(raw_run);
  const Stats do_stats = run.record(raw_do);
  run.ratio("gvisor cold acquire+exec / runsc run", cold_stats, run_stats, 1.1);
  run.ratio("gvisor cold acquire+exec / runsc do true", cold_stats, do_stats, std::nullopt);

  // Snapshots: saving a sandbox that runs a background process and holds a few files, and
  // resuming it into a new sandbox (+ its first exec), interleaved with a cold acquire (+ its
  // first exec) so all three meet the same load.
  const std::string scope = "bench-snapshot-" + salt;
  auto saved_from = backend->acquire({scope, "source", "a"}, spec);
  saved_from->exec(Command::shell("head -c 1048576 /dev/urandom > blob; "
                                  "sh -c 'while :; do sleep 1; done' </dev/null >/dev/null 2>&1 &"),
                   options);
  Stats saving{"gvisor snapshot (files + memory, a process running)", "ms", {}};
  Stats resuming{"gvisor resume from snapshot + first exec true", "ms", {}};
  Stats cold_again{"gvisor cold acquire + first exec true (beside the snapshots)", "ms", {}};
  std::uint64_t snapshot_bytes = 0;
  for (int i = -1; i < run.iterations(10); ++i) {
    auto start = BenchClock::now();
    const SnapshotRecord saved = saved_from->snapshot();
    const double save_ms = elapsed_ms(start);
    snapshot_bytes = saved.bytes;
    const SandboxKey key{scope, "source", "fork-" + std::to_string(i + 1)};
    start = BenchClock::now();
    auto resumed = backend->acquire_from_snapshot(key, spec, saved);
    resumed->exec(Command::argv({"true"}), options);
    const double resume_ms = elapsed_ms(start);
    resumed.reset();
    backend->dispose(key);
    backend->delete_snapshot(saved.id);
    const SandboxKey fresh{scope, "cold-" + std::to_string(i + 1), "a"};
    start = BenchClock::now();
    auto cold_sandbox = backend->acquire(fresh, spec);
    cold_sandbox->exec(Command::argv({"true"}), options);
    const double cold_ms = elapsed_ms(start);
    cold_sandbox.reset();
    backend->dispose(fresh);
    if (i < 0) continue;
    saving.samples.push_back(save_ms);
    resuming.samples.push_back(resume_ms);
    cold_again.samples.push_back(cold_ms);
  }
  const Stats save_stats = run.record(saving);
  const Stats resume_stats = run.record(resuming);
  const Stats cold_beside = run.record(cold_again);
  run.ratio("gvisor snapshot / cold acquire+exec", save_stats, cold_beside, std::nullopt);
  run.ratio("gvisor resume+exec / cold acquire+exec", resume_stats, cold_beside, std::nullopt);
  run.record(Stats{"gvisor snapshot size (a 1 MiB random file, a shell loop, the keeper)",
                   "KiB",
                   {static_cast<double>(snapshot_bytes >> 10)}});
  saved_from.reset();
  backend->purge_all();
}

const bool kGvisorBenchGroup = register_bench_group(
    "gvisor", "cold acquire and warm exec on the gvisor backend vs raw runsc run/exec/do",
    run_gvisor_group);

}  // namespace
}  // namespace airlock::bench
