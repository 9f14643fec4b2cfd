// `airlock bench` group "microvm": the microvm backend beside gvisor and linux, in one run.
//   cold boot + first `exec true`        a VM booted from its kernel (snapshots: false)
//   restore + first `exec true`          the default: a VM restored from its shape's template
//                                         (SPEC §7: ≤ 0.3 s on this machine kind, under TCG)
//   warm `exec true`                     one command in a running VM
//   snapshot, and resume + first exec    a sandbox's own snapshot (memory and disk) and a new
//                                         VM from it
//   RSS of one idle VM                   QEMU's resident memory, as the host pays it
// and, in the same run, the same cold and warm figures for gvisor and linux, so the ratios
// between them meet one machine state. The accelerator is whatever the backend verified (TCG
// on a host whose KVM cannot boot the guest).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "airlock/backends/gvisor.hpp"
#include "airlock/backends/linux.hpp"
#include "airlock/backends/microvm.hpp"
#include "airlock/images.hpp"
#include "bench.hpp"

namespace airlock::bench {
namespace {

// A busybox root with every applet linked (relative links, so any root may hold it).
void microvm_busybox_root(const std::filesystem::path& root) {
  for (const char* directory : {"bin", "proc", "dev", "sys", "tmp", "etc", "root"}) {
    std::filesystem::create_directories(root / directory);
  }
  std::filesystem::copy_file("/bin/busybox", root / "bin" / "busybox");
  for (const char* applet : {"sh", "true", "sleep", "cat", "echo", "head", "od", "date"}) {
    std::filesystem::create_symlink("busybox", root / "bin" / applet);
  }
  std::ofstream(root / "etc" / "passwd") << "root:x:0:0:root:/root:/bin/sh\n";
}

double qemu_rss_mib() {
  double total = 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
    std::ifstream comm(entry.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name.rfind("qemu-system", 0) != 0) continue;
    std::ifstream status(entry.path() / "status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("VmRSS:", 0) == 0) total += std::stod(line.substr(6)) / 1024.0;
    }
  }
  return total;
}

void run_microvm_group(BenchRun& run) {
  if (::geteuid() != 0) {
    run.skipped("microvm", "needs root (its jail makes namespaces and cgroups)");
    return;
  }
  for (const char* tool : {"/usr/bin/qemu-system-x86_64", "/usr/bin/qemu-img", "/bin/busybox"}) {
    if (::access(tool, X_OK) != 0) {
      run.skipped("microvm", std::string(tool) + " is missing (scripts/bootstrap installs it)");
      return;
    }
  }
  ScratchDirectory scratch("airlock-bench-microvm", std::filesystem::perms(0711));
  const auto source = scratch.path / "busybox-source";
  microvm_busybox_root(source);
  const auto store_path = scratch.path / "images";
  {
    images::ImageStore store(store_path, images::OwnershipMap::shifted());
    store.import_directory(source, "busybox");
  }
  SandboxSpec::Fields fields;
  fields.kind = "bench";
  fields.image = "busybox";
  const SandboxSpec spec(fields);
  ExecOptions options;
  options.working_directory = kDefaultWorkDir;
  options.timeout = std::chrono::seconds(120);
  const Command truth = Command::argv({"true"});
  const std::string salt = std::to_string(std::random_device{}());

  MicrovmBackendConfig config;
  config.state_dir = scratch.path / "state";
  config.image_store = store_path;
  std::shared_ptr<SandboxBackend> microvm;
  try {
    const auto started = BenchClock::now();
    microvm = make_microvm_backend(config);
    run.record(Stats{"microvm backend made (accelerator verified by a boot under KVM, once per "
                     "state directory; " +
                         std::string(to_string(microvm->isolation())) + ")",
                     "ms",
                     {elapsed_ms(started)}});
  } catch (const std::exception& error) {
    run.skipped("microvm", std::string("the backend could not be made: ") + error.what());
    return;
  }

  // The shape's disk image and template, built by the first acquire.
  {
    const SandboxKey first{"bench-first-" + salt, "t", "a"};
    const auto started = BenchClock::now();
    auto sandbox = microvm->acquire(first, spec);
    sandbox->exec(truth, options);
    run.record(Stats{"microvm first acquire of a shape (disk image + template) + exec true", "ms",
                     {elapsed_ms(started)}});
    microvm->dispose(first);
  }

  // Restore + first exec: the default acquire.
  Stats restore{"microvm restore + first exec true", "ms", {}};
  for (int i = -1; i < run.iterations(20); ++i) {
    const SandboxKey key{"bench-restore-" + salt, "t" + std::to_string(i), "a"};
    const auto started = BenchClock::now();
    auto sandbox = microvm->acquire(key, spec);
    sandbox->exec(truth, options);
    const double ms = elapsed_ms(started);
    sandbox.reset();
    microvm->dispose(key);
    if (i >= 0) restore.samples.push_back(ms);
  }
  const Stats& restore_stats = run.record(restore);
  const Stats target_300{"0.3 s (SPEC §7)", "ms", {300.0}};
  run.ratio("microvm restore + first exec / 0.3 s (target)", restore_stats, target_300, 1.0);

  // Warm exec, the resident memory of an idle VM, a snapshot of it and a resume from that.
  const SandboxKey warm_key{"bench-warm-" + salt, "t", "a"};
  auto warm = microvm->acquire(warm_key, spec);
  const Stats& warm_stats = run.time(
      "microvm warm exec true", run.iterations(100), [&] { warm->exec(truth, options); }, 3);
  run.record(Stats{"microvm RSS of one idle VM (QEMU, host side)", "MiB", {qemu_rss_mib()}});
  Stats snapshot{"microvm snapshot (memory + disk) of a running VM", "ms", {}};
  Stats resume{"microvm resume from that snapshot + first exec true", "ms", {}};
  for (int i = 0; i < run.iterations(10); ++i) {
    auto started = BenchClock::now();
    const SnapshotRecord saved = warm->snapshot();
    snapshot.samples.push_back(elapsed_ms(started));
    const SandboxKey fork{"bench-warm-" + salt, "t", "fork" + std::to_string(i)};
    started = BenchClock::now();
    auto resumed = microvm->acquire_from_snapshot(fork, spec, saved);
    resumed->exec(truth, options);
    resume.samples.push_back(elapsed_ms(started));
    resumed.reset();
    microvm->dispose(fork);
    microvm->delete_snapshot(saved.id);
  }
  const Stats& snapshot_stats = run.record(snapshot);
  const Stats& resume_stats = run.record(resume);
  warm.reset();
  microvm->dispose_scope("bench-warm-" + salt, std::nullopt);

  // Cold boot, without templates.
  MicrovmBackendConfig cold_config = config;
  cold_config.snapshots = false;
  auto cold_backend = make_microvm_backend(cold_config);
  Stats cold{"microvm cold boot + first exec true (no template)", "ms", {}};
  for (int i = 0; i < run.iterations(10); ++i) {
    const SandboxKey key{"bench-cold-" + salt, "t" + std::to_string(i), "a"};
    const auto started = BenchClock::now();
    auto sandbox = cold_backend->acquire(key, spec);
    sandbox->exec(truth, options);
    cold.samples.push_back(elapsed_ms(started));
    sandbox.reset();
    cold_backend->dispose(key);
  }
  const Stats& cold_stats = run.record(cold);
  run.ratio("microvm restore + first exec / cold boot + first exec", restore_stats, cold_stats,
            std::nullopt);
  run.ratio("microvm resume of a snapshot + first exec / restore + first exec", resume_stats,
            restore_stats, std::nullopt);
  run.ratio("microvm snapshot / restore + first exec", snapshot_stats, restore_stats,
            std::nullopt);
  cold_backend->purge_all();
  microvm->purge_all();

  // The peers, in the same run: gvisor and linux, cold and warm.
  const auto peer = [&](const std::string& name, const std::shared_ptr<SandboxBackend>& backend,
                        int cold_runs) -> std::pair<const Stats*, const Stats*> {
    Stats peer_cold{name + " cold acquire + first exec true", "ms", {}};
    for (int i = -1; i < run.iterations(cold_runs); ++i) {
      const SandboxKey key{"bench-" + name + "-" + salt, "t" + std::to_string(i), "a"};
      const auto started = BenchClock::now();
      auto sandbox = backend->acquire(key, spec);
      sandbox->exec(truth, options);
      const double ms = elapsed_ms(started);
      sandbox.reset();
      backend->dispose(key);
      if (i >= 0) peer_cold.samples.push_back(ms);
    }
    const Stats& cold_recorded = run.record(peer_cold);
    const SandboxKey key{"bench-" + name + "-warm-" + salt, "t", "a"};
    auto sandbox = backend->acquire(key, spec);
    const Stats& warm_recorded = run.time(
        name + " warm exec true", run.iterations(40), [&] { sandbox->exec(truth, options); }, 2);
    sandbox.reset();
    backend->purge_all();
    return {&cold_recorded, &warm_recorded};
  };
  try {
    GvisorBackendConfig gvisor_config;
    gvisor_config.state_dir = scratch.path / "gvisor-state";
    gvisor_config.image_store = store_path;
    const auto [gvisor_cold, gvisor_warm] = peer("gvisor", make_gvisor_backend(gvisor_config), 10);
    run.ratio("microvm restore + first exec / gvisor cold acquire + first exec", restore_stats,
              *gvisor_cold, std::nullopt);
    run.ratio("microvm warm exec / gvisor warm exec", warm_stats, *gvisor_warm, std::nullopt);
  } catch (const std::exception& error) {
    run.skipped("gvisor beside microvm", error.what());
  }
  try {
    LinuxBackendConfig linux_config;
    linux_config.state_dir = scratch.path / "linux-state";
    linux_config.image_store = store_path;
    const auto [linux_cold, linux_warm] = peer("linux", make_linux_backend(linux_config), 20);
    run.ratio("microvm restore + first exec / linux cold acquire + first exec", restore_stats,
              *linux_cold, std::nullopt);
    run.ratio("microvm warm exec / linux warm exec", warm_stats, *linux_warm, std::nullopt);
  } catch (const std::exception& error) {
    run.skipped("linux beside microvm", error.what());
  }
}

const bool kMicrovmBenchGroup = register_bench_group(
    "microvm",
    "microvm cold boot, snapshot restore, warm exec, its own snapshots, beside gvisor and linux",
    run_microvm_group);

}  // namespace
}  // namespace airlock::bench
