#include "backends/gvisor/bundle.hpp"

#include <fstream>

#include "airlock/errors.hpp"
#include "backends/gvisor/guest_protocol.hpp"

namespace airlock::gvisor_backend {

std::vector<std::pair<std::string, std::string>> egress_proxy_environment() {
  const std::string proxy = "http://127.0.0.1:" + std::to_string(kEgressBridgePort);
  std::vector<std::pair<std::string, std::string>> environment;
  for (const char* name : {"HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"}) {
    environment.emplace_back(name, proxy);
  }
  environment.emplace_back("NO_PROXY", "localhost,127.0.0.1");
  environment.emplace_back("no_proxy", "localhost,127.0.0.1");
  return environment;
}

json::Json bundle_config(const BundlePlan& plan) {
  using json::Json;
  Json keeper = Json::array({gvisor_guest::kGuestHelperPath, "keeper"});
  if (!plan.work_dir.empty()) {
    keeper.push_back("--workdir");
    keeper.push_back(plan.work_dir);
  }
  keeper.push_back("--control");
  keeper.push_back(std::string(kControlGuestDirectory) + "/" + kKeeperSocketName);
  if (plan.egress_directory) {
    keeper.push_back("--bridge");
    keeper.push_back(std::string(kEgressGuestDirectory) + "/" + kEgressSocketName);
    keeper.push_back(std::to_string(kEgressBridgePort));
  }
  const Json no_capabilities = Json::array();
  Json process = {
      {"terminal", false},
      {"user", {{"uid", 0}, {"gid", 0}}},
      {"args", keeper},
      {"env", plan.environment},
      {"cwd", "/"},
      {"capabilities",
       {{"bounding", no_capabilities},
        {"effective", no_capabilities},
        {"inheritable", no_capabilities},
        {"permitted", no_capabilities},
        {"ambient", no_capabilities}}},
      {"noNewPrivileges", true},
      // Lowering only: root here has no CAP_SYS_RESOURCE, and raising a limit fails the create.
      {"rlimits", Json::array({{{"type", "RLIMIT_NOFILE"}, {"hard", 4096}, {"soft", 4096}}})}};
  if (plan.guest_pids) {
    process["rlimits"].push_back(
        {{"type", "RLIMIT_NPROC"}, {"hard", *plan.guest_pids}, {"soft", *plan.guest_pids}});
  }

  Json mounts = Json::array({
      {{"destination", "/proc"}, {"type", "proc"}, {"source", "proc"}},
      // runsc makes /dev a filesystem of its own (type "dev", a tmpfs it fills with its
      // devices) whatever the bundle says, and honours no size for it: what a guest stores
      // there is bounded by the sandbox's memory limit only (docs/backends/gvisor.md).
      {{"destination", "/dev"},
       {"type", "tmpfs"},
       {"source", "tmpfs"},
       {"options", {"nosuid", "strictatime", "mode=755"}}},
      {{"destination", "/dev/pts"},
       {"type", "devpts"},
       {"source", "devpts"},
       {"options", {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}}},
      // Writable, and overlaid by runsc into the sandbox's storage (one bound for everything the
      // guest writes but /dev itself, which runsc makes its own: see docs/backends/gvisor.md).
      // An explicit /tmp also keeps runsc from mounting its unbounded tmpfs there.
      {{"destination", "/tmp"},
       {"type", "bind"},
       {"source", plan.empty_directory.string()},
       {"options", {"rbind", "nosuid", "nodev"}}},
      {{"destination", "/dev/shm"},
       {"type", "bind"},
       {"source", plan.empty_directory.string()},
       {"options", {"rbind", "nosuid", "nodev", "noexec"}}},
      {{"destination", "/sys"},
       {"type", "sysfs"},
       {"source", "sysfs"},
       {"options", {"nosuid", "noexec", "nodev", "ro"}}},
      {{"destination", gvisor_guest::kGuestHelperDirectory},
       {"type", "bind"},
       {"source", plan.helper_directory.string()},
       {"options", {"rbind", "ro", "nosuid", "nodev"}}},
  });
  mounts.push_back({{"destination", kControlGuestDirectory},
                    {"type", "bind"},
                    {"source", plan.control_directory.string()},
                    {"options", {"rbind", "ro", "nosuid", "nodev", "noexec"}}});
  if (plan.egress_directory) {
    mounts.push_back({{"destination", kEgressGuestDirectory},
                      {"type", "bind"},
                      {"source", plan.egress_directory->string()},
                      {"options", {"rbind", "ro", "nosuid", "nodev", "noexec"}}});
  }

  Json resources = Json::object();
  if (plan.memory_bytes) resources["memory"] = {{"limit", *plan.memory_bytes}};
  if (plan.host_pids) resources["pids"] = {{"limit", *plan.host_pids}};
  if (plan.cpu_millis) {
    constexpr std::uint64_t kPeriod = 100'000;
    resources["cpu"] = {{"period", kPeriod}, {"quota", *plan.cpu_millis * kPeriod / 1000}};
  }
  const Json mapping =
      Json::array({{{"containerID", 0}, {"hostID", plan.uid_base}, {"size", 65536}}});
  Json linux_section = {
      {"namespaces", Json::array({{{"type", "pid"}},
                                  {{"type", "network"}},
                                  {{"type", "ipc"}},
                                  {{"type", "uts"}},
                                  {{"type", "mount"}},
                                  {{"type", "user"}}})},
      {"uidMappings", mapping},
      {"gidMappings", mapping},
      {"cgroupsPath", plan.cgroups_path},
      {"resources", resources},
      {"maskedPaths", Json::array({"/proc/kcore", "/proc/keys", "/proc/timer_list"})},
      {"readonlyPaths", Json::array({"/proc/sys", "/proc/sysrq-trigger"})}};

  return {{"ociVersion", "1.0.2"},
          {"process", process},
          // Writable: runsc's overlay takes the writes (into the sandbox's storage); the image's
          // rootfs is never modified.
          {"root", {{"path", plan.rootfs.string()}, {"readonly", false}}},
          {"hostname", "airlock"},
          {"mounts", mounts},
          {"linux", linux_section}};
}

void write_bundle(const std::filesystem::path& bundle_directory, const BundlePlan& plan) {
  std::error_code error;
  std::filesystem::create_directories(bundle_directory, error);
  std::filesystem::permissions(bundle_directory, std::filesystem::perms::owner_all, error);
  const auto target = bundle_directory / "config.json";
  const auto staging = bundle_directory / "config.json.tmp";
  {
    std::ofstream out(staging, std::ios::binary | std::ios::trunc);
    out << bundle_config(plan).dump(2);
    if (!out) {
      throw BackendError("the gvisor backend could not write a container bundle",
                         "writing " + staging.string());
    }
  }
  std::filesystem::rename(staging, target, error);
  if (error) {
    throw BackendError("the gvisor backend could not write a container bundle",
                       "rename " + staging.string() + ": " + error.message());
  }
}

}  // namespace airlock::gvisor_backend
