// Which gVisor platform works on this host: a real `runsc run` of a one-binary container
// (our helper's `probe`), systrap first, then ptrace. Cached per process and runsc binary.
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <mutex>

#include "airlock/backends/gvisor.hpp"
#include "backends/gvisor/bundle.hpp"
#include "backends/gvisor/guest_protocol.hpp"
#include "backends/gvisor/runsc.hpp"
#include "backends/gvisor/state_store.hpp"

namespace airlock {

std::string_view to_string(GvisorPlatform platform) noexcept {
  return platform == GvisorPlatform::systrap ? "systrap" : "ptrace";
}

namespace {

using gvisor_backend::Completed;

std::string last_line(const std::string& text) {
  std::string trimmed = text;
  while (!trimmed.empty() && (trimmed.back() == '\n' || trimmed.back() == ' ')) trimmed.pop_back();
  const auto newline = trimmed.rfind('\n');
  return newline == std::string::npos ? trimmed : trimmed.substr(newline + 1);
}

// One attempt in a scratch directory of its own (bundle, empty rootfs, private runsc root).
std::optional<std::string> try_platform(const std::filesystem::path& runsc,
                                        const std::filesystem::path& helper,
                                        GvisorPlatform platform) {
  std::error_code error;
  const auto scratch = std::filesystem::temp_directory_path(error) /
                       ("airlock-gvisor-probe-" + gvisor_backend::random_hex(6));
  std::filesystem::create_directories(scratch / "rootfs", error);
  std::filesystem::create_directories(scratch / "state", error);
  std::filesystem::create_directories(scratch / "bundle", error);
  struct Remove {
    std::filesystem::path path;
    ~Remove() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } remove{scratch};
  json::Json config = {{"ociVersion", "1.0.2"},
                       {"process",
                        {{"terminal", false},
                         {"user", {{"uid", 0}, {"gid", 0}}},
                         {"args", {gvisor_guest::kGuestHelperPath, "probe"}},
                         {"env", {"PATH=/bin"}},
                         {"cwd", "/"},
                         {"noNewPrivileges", true}}},
                       {"root", {{"path", (scratch / "rootfs").string()}, {"readonly", false}}},
                       {"mounts",
                        {{{"destination", gvisor_guest::kGuestHelperDirectory},
                          {"type", "bind"},
                          {"source", helper.parent_path().string()},
                          {"options", {"rbind", "ro"}}}}},
                       {"linux",
                        {{"namespaces",
                          {{{"type", "pid"}},
                           {{"type", "network"}},
                           {{"type", "ipc"}},
                           {{"type", "uts"}},
                           {{"type", "mount"}}}}}}};
  {
    std::ofstream out(scratch / "bundle" / "config.json");
    out << config.dump();
  }
  const std::string id = "airlock-probe-" + gvisor_backend::random_hex(6);
  const Completed ran = gvisor_backend::run_to_completion(
      {runsc.string(), "--root=" + (scratch / "state").string(),
       "--platform=" + std::string(to_string(platform)), "--network=none", "--ignore-cgroups",
       "run", "--bundle=" + (scratch / "bundle").string(), id},
      std::chrono::seconds(60));
  if (ran.exit_code == 0 && ran.stdout_text.find("airlock-gvisor-guest ok") != std::string::npos) {
    return std::nullopt;
  }
  gvisor_backend::run_to_completion(
      {runsc.string(), "--root=" + (scratch / "state").string(), "delete", "--force", id},
      std::chrono::seconds(30));
  if (ran.timed_out) return std::string("timed out after 60 s");
  const std::string said = last_line(ran.stderr_text.empty() ? ran.stdout_text : ran.stderr_text);
  return "exit " + std::to_string(ran.exit_code) + (said.empty() ? "" : ": " + said);
}

}  // namespace

GvisorPlatformProbe probe_gvisor_platform(const std::filesystem::path& runsc_path,
                                          const std::filesystem::path& guest_helper_path) {
  static std::mutex mutex;
  static std::map<std::string, GvisorPlatformProbe> cache;
  const auto runsc = gvisor_backend::locate_runsc(runsc_path);
  const auto helper = gvisor_backend::locate_guest_helper(guest_helper_path);
  std::lock_guard lock(mutex);
  if (const auto found = cache.find(runsc.string()); found != cache.end()) return found->second;
  GvisorPlatformProbe probe;
  const auto started = std::chrono::steady_clock::now();
  for (GvisorPlatform platform : {GvisorPlatform::systrap, GvisorPlatform::ptrace}) {
    const auto failure = try_platform(runsc, helper, platform);
    if (!failure) {
      probe.working = platform;
      break;
    }
    probe.failures.push_back(std::string(to_string(platform)) + ": " + *failure);
  }
  probe.probe_milliseconds =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  cache[runsc.string()] = probe;
  return probe;
}

}  // namespace airlock
