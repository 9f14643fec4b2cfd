// bench group "docker": the docker backend's warm exec and cold acquire, side by side with the
// docker CLI doing the same on the same engine (`docker exec`, `docker run --rm`), and its
// snapshots (save, and resume beside a cold acquire). SPEC §7's
// target: warm exec ≤ 0.5 × `docker exec`.
//
// The engine is DOCKER_HOST (scripts/engines/dockerd start prints one); the image is
// AIRLOCK_DOCKER_BENCH_IMAGE (default airlock-test/busybox:latest). Without an engine the group
// says SKIPPED with the reason.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "airlock/backends/docker.hpp"
#include "airlock/errors.hpp"
#include "bench.hpp"

namespace airlock::bench {
namespace {

std::string environment_or(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value && *value ? value : fallback;
}

// The docker CLI that matches the engine best: Debian's, else whatever PATH has.
std::string docker_cli() {
  if (std::filesystem::exists("/usr/bin/docker")) return "/usr/bin/docker";
  const std::string path = environment_or("PATH", "");
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    const std::filesystem::path candidate = path.substr(start, end - start) + "/docker";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return {};
}

// A peer's command must succeed for its timing to mean anything.
void run_or_throw(const std::vector<std::string>& argv) {
  const int status = run_quietly(argv);
  if (status != 0) {
    throw SystemError(argv[0] + " " + argv[1] + " failed (exit " + std::to_string(status) + ")");
  }
}

void bench_docker(BenchRun& run) {
  if (environment_or("DOCKER_HOST", "").empty() &&
      !std::filesystem::exists("/var/run/docker.sock")) {
    run.skipped("docker", "no container engine (DOCKER_HOST unset; scripts/engines/dockerd start)");
    return;
  }
  const std::string image =
      environment_or("AIRLOCK_DOCKER_BENCH_IMAGE", "airlock-test/busybox:latest");
  docker::DockerConfig config;
  config.default_image = image;
  config.pull_missing_images = false;
  docker::DockerBackend backend(config);
  try {
    backend.api_version();
  } catch (const std::exception& error) {
    run.skipped("docker", std::string("the engine does not answer: ") + error.what());
    return;
  }
  const std::string scope = "airlock-bench-" + std::to_string(::getpid());
  struct Cleanup {
    docker::DockerBackend& backend;
    std::string scope;
    ~Cleanup() { backend.dispose_scope(scope, std::nullopt); }
  } cleanup{backend, scope};

  const SandboxSpec spec({.kind = "bench", .work_dir = "/"});
  ExecOptions options;
  options.working_directory = "/";
  options.timeout = std::chrono::seconds(60);
  auto warm_sandbox = backend.acquire(SandboxKey{scope, "warm", "/bench"}, spec);
  const Command true_command = Command::argv({"true"});

  const Stats& warm = run.time("docker warm exec true (Engine API)", run.iterations(60), [&] {
    if (warm_sandbox->exec(true_command, options).exit_code != 0) {
      throw SystemError("`true` failed in the sandbox");
    }
  });

  int serial = 0;
  const Stats& cold =
      run.time("docker cold acquire + exec true + dispose", run.iterations(12), [&] {
        const SandboxKey key{scope, "cold-" + std::to_string(serial++), "/bench"};
        auto sandbox = backend.acquire(key, spec);
        sandbox->exec(true_command, options);
        backend.dispose_kind(key, spec.kind(), sandbox->instance_id());
      });

  // Snapshots (filesystem: the storage places), interleaved with a cold acquire of the same
  // spec so all three meet the same load: save a sandbox holding a 1 MiB file, resume it (+ its
  // first exec), and a cold acquire (+ its first exec).
  if (backend.snapshot_content()) {
    const SandboxSpec worked({.kind = "bench-snapshot", .work_dir = "/maf-sandbox/work"});
    auto saved_from = backend.acquire(SandboxKey{scope, "snapshot", "/bench"}, worked);
    ExecOptions in_work = options;
    in_work.working_directory = "/maf-sandbox/work";
    saved_from->exec(Command::shell("head -c 1048576 /dev/urandom > blob"), in_work);
    Stats saving{"docker snapshot (storage places, a 1 MiB file)", "ms", {}};
    Stats resuming{"docker resume from snapshot + first exec true", "ms", {}};
    Stats cold_beside{"docker cold acquire + first exec true (beside the snapshots)", "ms", {}};
    for (int i = -1; i < run.iterations(10); ++i) {
      auto start = BenchClock::now();
      const SnapshotRecord saved = saved_from->snapshot();
      const double save_ms = elapsed_ms(start);
      const SandboxKey fork{scope, "snapshot", "/fork-" + std::to_string(i + 1)};
      start = BenchClock::now();
      auto resumed = backend.acquire_from_snapshot(fork, worked, saved);
      resumed->exec(true_command, options);
      const double resume_ms = elapsed_ms(start);
      backend.dispose_kind(fork, worked.kind(), resumed->instance_id());
      backend.delete_snapshot(saved.id);
      const SandboxKey fresh{scope, "snapshot-cold", "/cold-" + std::to_string(i + 1)};
      start = BenchClock::now();
      auto cold_sandbox = backend.acquire(fresh, worked);
      cold_sandbox->exec(true_command, options);
      const double cold_ms = elapsed_ms(start);
      backend.dispose_kind(fresh, worked.kind(), cold_sandbox->instance_id());
      if (i < 0) continue;
      saving.samples.push_back(save_ms);
      resuming.samples.push_back(resume_ms);
      cold_beside.samples.push_back(cold_ms);
    }
    const Stats& save_stats = run.record(saving);
    const Stats& resume_stats = run.record(resuming);
    const Stats& cold_stats = run.record(cold_beside);
    run.ratio("docker snapshot / cold acquire+exec", save_stats, cold_stats, std::nullopt);
    run.ratio("docker resume+exec / cold acquire+exec", resume_stats, cold_stats, std::nullopt);
  }

  const std::string cli = docker_cli();
  if (cli.empty()) {
    run.skipped("docker CLI peers", "no docker CLI on PATH");
    return;
  }
  const std::string container = warm_sandbox->instance_id();
  const Stats& cli_exec = run.time("`docker exec` true (CLI)", run.iterations(30), [&] {
    run_or_throw({cli, "exec", container, "true"});
  });
  const Stats& cli_run =
      run.time("`docker run --rm --network none` true (CLI)", run.iterations(12), [&] {
        run_or_throw({cli, "run", "--rm", "--network", "none", image, "true"});
      });
  run.ratio("docker warm exec (API) / `docker exec` (CLI)", warm, cli_exec, 0.5);
  run.ratio("docker cold acquire+exec+dispose / `docker run --rm` (CLI)", cold, cli_run,
            std::nullopt);
}

const bool kDockerBenchGroup = register_bench_group(
    "docker", "docker backend warm exec and cold acquire vs `docker exec` / `docker run --rm`",
    bench_docker);

}  // namespace
}  // namespace airlock::bench
