#include "backends/docker/containers.hpp"

#include <algorithm>
#include <ctime>
#include <nlohmann/json.hpp>
#include <thread>

#include "airlock/errors.hpp"
#include "airlock/paths.hpp"
#include "backends/docker/engine_streams.hpp"
#include "backends/docker/tar_io.hpp"

namespace airlock::docker {
namespace {

using nlohmann::json;

std::map<std::string, std::string> labels_of(const json& value) {
  std::map<std::string, std::string> labels;
  if (!value.is_object()) return labels;
  for (const auto& [name, item] : value.items()) {
    if (item.is_string()) labels[name] = item.get<std::string>();
  }
  return labels;
}

// "2026-11-30T02:24:54.421538707Z" → time point (seconds precision is enough for `ls`).
std::chrono::system_clock::time_point parse_rfc3339(const std::string& text) {
  std::tm parts{};
  if (strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &parts) == nullptr) return {};
  return std::chrono::system_clock::from_time_t(timegm(&parts));
}

json parse_object(const EngineResponse& response, std::string_view what) {
  auto parsed = json::parse(response.body, nullptr, false);
  if (parsed.is_discarded()) {
    throw BackendError("the container engine's answer could not be read",
                       std::string(what) + ": " + response.body.substr(0, 300));
  }
  return parsed;
}

// Top-level directories of the image's system: a work dir beneath one gets a place of its own
// instead of covering its parent (which would hide, or copy into memory, the image's files).
constexpr const char* kSystemDirectories[] = {"usr",    "bin", "sbin", "lib", "lib32", "lib64",
                                              "libx32", "etc", "opt",  "var", "boot"};

std::uint64_t inodes_for(std::uint64_t bytes) {
  return std::max<std::uint64_t>(1024, bytes / 4096);
}

std::string first_component(const std::string& absolute) {
  const auto end = absolute.find('/', 1);
  return absolute.substr(1, end == std::string::npos ? std::string::npos : end - 1);
}

}  // namespace

StorageLayout plan_storage(const std::string& work_dir, std::uint64_t disk_bytes,
                           EngineFlavour flavour) {
  const std::string work = normalize_guest_path(work_dir);
  // `/` and the kernel's own places get no place of their own: the work dir stays what the
  // image and the engine make it (read-only, or the kernel's), and only the standard places
  // below take writes.
  bool own_nothing = work.empty() || work.front() != '/' || work == "/";
  for (const char* kernel : {"/proc", "/sys", "/dev"}) {
    own_nothing = own_nothing || guest_path_relative_to(work, kernel).has_value();
  }
  StorageLayout layout;
  const std::uint64_t work_share = disk_bytes / 2;
  std::vector<std::pair<std::string, std::uint64_t>> places = {{"/tmp", disk_bytes / 4}};
  if (flavour == EngineFlavour::podman) {
    places.emplace_back("/run", disk_bytes / 16);
    places.emplace_back("/var/tmp", disk_bytes / 16);
  }
  layout.shm_bytes = disk_bytes / 8;

  // A work dir in a standard place lives there, and that place gets the work dir's share.
  bool placed = false;
  for (auto& [target, bytes] : places) {
    const auto below = guest_path_relative_to(work, target);
    if (!below) continue;
    bytes = work_share;
    layout.work_base = target;
    std::string walked;
    std::size_t start = 0;
    while (!below->empty() && start <= below->size()) {
      const auto slash = below->find('/', start);
      walked = below->substr(0, slash);
      layout.work_directories.push_back(walked);
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
    placed = true;
    break;
  }
  if (!placed && !own_nothing) {
    const auto slash = work.rfind('/');
    const std::string parent = slash == 0 ? "/" : work.substr(0, slash);
    const bool own_place =
        parent == "/" || std::find(std::begin(kSystemDirectories), std::end(kSystemDirectories),
                                   first_component(parent)) != std::end(kSystemDirectories);
    layout.work_base = own_place ? work : parent;
    if (!own_place) layout.work_directories.push_back(work.substr(slash + 1));
    layout.mounts.push_back({layout.work_base, work_share, inodes_for(work_share), "0755"});
  }
  for (const auto& [target, bytes] : places) {
    layout.mounts.push_back({target, bytes, inodes_for(bytes), "1777"});
  }
  return layout;
}

std::string container_create_body(const ContainerRequest& request) {
  json labels = json::object();
  for (const auto& [name, value] : request.labels) labels[name] = value;
  json environment = json::array();
  for (const auto& [name, value] : request.environment) environment.push_back(name + "=" + value);

  json security = json::array({"no-new-privileges"});
  if (!request.seccomp.empty()) security.push_back("seccomp=" + request.seccomp);
  json host = {
      {"NetworkMode", request.network_mode},
      {"CapDrop", json::array({"ALL"})},
      {"PidsLimit", request.pids_limit},
      {"Init", request.init},
      {"ReadonlyRootfs", request.read_only_rootfs},
      {"Privileged", false},
      {"PublishAllPorts", false},
      // Nothing of the host is mounted: no binds, no volumes, and never the engine's socket.
      {"Binds", json::array()},
      {"RestartPolicy", {{"Name", "no"}}},
  };
  if (request.memory_bytes) {
    host["Memory"] = *request.memory_bytes;
    host["MemorySwap"] = *request.memory_bytes;  // no swap beyond the limit
  }
  if (request.cpu_millis) host["NanoCpus"] = *request.cpu_millis * 1'000'000ull;
  if (!request.runtime.empty()) host["Runtime"] = request.runtime;
  json tmpfs = json::object();
  json mounts = json::array();
  if (request.sandbox) {
    if (request.flavour == EngineFlavour::docker) {
      // The engine's defaults, then the cgroup tree (a writable tmpfs under cgroup v1) and /dev
      // (a writable tmpfs holding the device nodes; the nodes themselves stay usable).
      host["ReadonlyPaths"] = {"/proc/bus",           "/proc/fs",       "/proc/irq", "/proc/sys",
                               "/proc/sysrq-trigger", "/sys/fs/cgroup", "/dev"};
    } else {
      // Podman's service ignores ReadonlyPaths; it masks a path on request (an empty,
      // read-only tmpfs over it).
      security.push_back("mask=/sys/fs/cgroup");
    }
    for (const StorageMount& place : request.storage) {
      if (request.flavour == EngineFlavour::docker) {
        // A volume, not a tmpfs mount: Docker's archive endpoints write to volumes of a
        // read-only container, never to its tmpfs mounts. The local driver mounts it as a
        // tmpfs of its own; the volume is anonymous, so removing the container removes it.
        json volume_labels = json::object();
        for (const auto& [name, value] : request.storage_labels) volume_labels[name] = value;
        mounts.push_back({{"Type", "volume"},
                          {"Target", place.target},
                          {"VolumeOptions",
                           {{"Labels", volume_labels},
                            {"DriverConfig",
                             {{"Name", "local"},
                              {"Options",
                               {{"type", "tmpfs"},
                                {"device", "tmpfs"},
                                {"o", "size=" + std::to_string(place.bytes) +
                                          ",nr_inodes=" + std::to_string(place.inodes) +
                                          ",mode=" + place.mode + ",nosuid,nodev"}}}}}}}});
      } else {
        // Podman refuses nr_inodes: its tmpfs inodes are bounded by memory only.
        tmpfs[place.target] =
            "rw,exec,nosuid,nodev,size=" + std::to_string(place.bytes) + ",mode=" + place.mode;
      }
    }
    if (!mounts.empty()) host["Mounts"] = mounts;
    if (!request.ptys) tmpfs["/dev/pts"] = "ro,nosuid,nodev,noexec,size=4k";
    if (request.shm_bytes) host["ShmSize"] = *request.shm_bytes;
    host["LogConfig"] = {{"Type", "none"}, {"Config", json::object()}};
  } else if (request.read_only_rootfs) {
    tmpfs["/tmp"] = "rw,nosuid,nodev,size=64m";
  }
  if (!tmpfs.empty()) host["Tmpfs"] = tmpfs;
  host["SecurityOpt"] = security;

  json body = {
      {"Image", request.image},
      {"Entrypoint", request.entrypoint},
      {"Cmd", nullptr},
      {"Labels", labels},
      {"Env", environment},
      {"Tty", false},
      {"OpenStdin", false},
      {"AttachStdin", false},
      {"AttachStdout", false},
      {"AttachStderr", false},
      {"NetworkDisabled", request.network_mode == "none"},
      {"HostConfig", host},
  };
  if (request.network_alias && request.network_mode != "none") {
    body["NetworkingConfig"] = {
        {"EndpointsConfig",
         {{request.network_mode, {{"Aliases", json::array({*request.network_alias})}}}}}};
  }
  return body.dump();
}

std::string label_filter(const std::map<std::string, std::string>& labels) {
  json list = json::array();
  for (const auto& [name, value] : labels) list.push_back(name + "=" + value);
  return url_encode(json{{"label", list}}.dump());
}

std::optional<ContainerInfo> inspect_container(EngineClient& client,
                                               const std::string& name_or_id) {
  const std::string path = "/containers/" + url_encode(name_or_id) + "/json";
  const EngineResponse response = client.call("GET", path);
  if (response.status == 404) return std::nullopt;
  if (response.status != 200) {
    EngineClient::fail("the container engine could not describe a sandbox", "GET", path, response);
  }
  const json parsed = parse_object(response, path);
  ContainerInfo info;
  info.id = parsed.value("Id", "");
  info.name = parsed.value("Name", "");
  if (info.name.starts_with("/")) info.name.erase(0, 1);
  if (parsed.contains("State") && parsed["State"].is_object()) {
    info.running = parsed["State"].value("Running", false);
    info.paused = parsed["State"].value("Paused", false);
    info.pid = parsed["State"].value("Pid", 0);
    info.state = parsed["State"].value("Status", "");
  }
  if (parsed.contains("Config") && parsed["Config"].is_object() &&
      parsed["Config"].contains("Labels")) {
    info.labels = labels_of(parsed["Config"]["Labels"]);
  }
  if (parsed.contains("Created") && parsed["Created"].is_string()) {
    info.created_at = parse_rfc3339(parsed["Created"].get<std::string>());
  }
  if (parsed.contains("HostConfig") && parsed["HostConfig"].is_object()) {
    info.runtime = parsed["HostConfig"].value("Runtime", "");
  }
  info.image_id = parsed.value("Image", "");
  return info;
}

std::optional<std::string> create_container(EngineClient& client, const ContainerRequest& request) {
  const std::string body = container_create_body(request);
  const std::string path = "/containers/create?name=" + url_encode(request.name);
  CallOptions options;
  options.body = body;
  const EngineResponse response = client.call("POST", path, options);
  // Docker answers a taken name with 409; Podman with 500 and these words.
  if (response.status == 409 ||
      (response.status == 500 &&
       response.engine_message().find("already in use") != std::string::npos)) {
    return std::nullopt;
  }
  if (response.status == 404) {
    EngineClient::fail("the sandbox image is not available to the container engine", "POST", path,
                       response);
  }
  if (response.status != 201) {
    EngineClient::fail("the container engine refused to create the sandbox", "POST", path,
                       response);
  }
  const json parsed = parse_object(response, path);
  if (!parsed.contains("Id") || !parsed["Id"].is_string()) {
    throw BackendError("the container engine's create answer has no Id", response.body);
  }
  return parsed["Id"].get<std::string>();
}

void start_container(EngineClient& client, const std::string& id) {
  const std::string path = "/containers/" + url_encode(id) + "/start";
  const EngineResponse response = client.call("POST", path);
  // 304: already running (another process started it first).
  if (response.status != 204 && response.status != 304) {
    EngineClient::fail("the container engine could not start the sandbox", "POST", path, response);
  }
}

bool remove_container(EngineClient& client, const std::string& name_or_id) noexcept {
  try {
    const std::string base = "/containers/" + url_encode(name_or_id);
    // SIGKILL first: a removal otherwise asks the keeper to stop politely and waits for it.
    client.call("POST", base + "/kill?signal=KILL");
    const EngineResponse response = client.call("DELETE", base + "?force=1&v=1");
    if (response.status == 204 || response.status == 404) return true;
    // A removal already under way (409) finishes on its own; confirm by looking.
    if (response.status == 409) {
      for (int attempt = 0; attempt < 50; ++attempt) {
        if (!inspect_container(client, name_or_id)) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    return false;
  } catch (...) {
    return false;
  }
}

std::vector<ContainerInfo> list_containers(EngineClient& client,
                                           const std::map<std::string, std::string>& labels) {
  const std::string path = "/containers/json?all=1&filters=" + label_filter(labels);
  CallOptions options;
  options.max_body_bytes = 64u << 20;
  const EngineResponse response = client.call("GET", path, options);
  if (response.status != 200) {
    EngineClient::fail("the container engine could not list sandboxes", "GET", path, response);
  }
  const json parsed = parse_object(response, path);
  std::vector<ContainerInfo> containers;
  if (!parsed.is_array()) return containers;
  for (const auto& item : parsed) {
    if (!item.is_object()) continue;
    ContainerInfo info;
    info.id = item.value("Id", "");
    if (item.contains("Names") && item["Names"].is_array() && !item["Names"].empty() &&
        item["Names"][0].is_string()) {
      info.name = item["Names"][0].get<std::string>();
      if (info.name.starts_with("/")) info.name.erase(0, 1);
    }
    info.state = item.value("State", "");
    info.running = info.state == "running";
    if (item.contains("Labels")) info.labels = labels_of(item["Labels"]);
    if (item.contains("Created") && item["Created"].is_number_integer()) {
      info.created_at = std::chrono::system_clock::from_time_t(item["Created"].get<std::time_t>());
    }
    containers.push_back(std::move(info));
  }
  return containers;
}

std::string ensure_network(EngineClient& client, const std::string& name, bool internal,
                           const std::map<std::string, std::string>& labels) {
  json label_object = json::object();
  for (const auto& [key, value] : labels) label_object[key] = value;
  json body = {{"Name", name},         {"CheckDuplicate", true}, {"Driver", "bridge"},
               {"Internal", internal}, {"Attachable", false},    {"Labels", label_object}};
  if (internal) {
    // No address for the host on an internal network: without one, a sandbox has no host
    // interface to reach around its proxy (the engine runs without iptables isolation here).
    body["Options"] = {{"com.docker.network.bridge.inhibit_ipv4", "true"}};
  }
  const std::string text = body.dump();
  CallOptions options;
  options.body = text;
  const EngineResponse response = client.call("POST", "/networks/create", options);
  if (response.status == 201) {
    const json parsed = parse_object(response, "/networks/create");
    return parsed.value("Id", name);
  }
  if (response.status == 409) return name;  // adopted: created by an earlier or parallel acquire
  EngineClient::fail("the container engine could not create the sandbox's network", "POST",
                     "/networks/create", response);
}

void connect_network(EngineClient& client, const std::string& network, const std::string& container,
                     const std::vector<std::string>& aliases) {
  json body = {{"Container", container}};
  if (!aliases.empty()) body["EndpointConfig"] = {{"Aliases", aliases}};
  const std::string text = body.dump();
  CallOptions options;
  options.body = text;
  const std::string path = "/networks/" + url_encode(network) + "/connect";
  const EngineResponse response = client.call("POST", path, options);
  if (response.status != 200) {
    EngineClient::fail("the container engine could not connect the egress proxy", "POST", path,
                       response);
  }
}

std::vector<NetworkInfo> list_networks(EngineClient& client,
                                       const std::map<std::string, std::string>& labels) {
  const std::string path = "/networks?filters=" + label_filter(labels);
  const EngineResponse response = client.call("GET", path);
  if (response.status != 200) {
    EngineClient::fail("the container engine could not list networks", "GET", path, response);
  }
  const json parsed = parse_object(response, path);
  std::vector<NetworkInfo> networks;
  if (!parsed.is_array()) return networks;
  for (const auto& item : parsed) {
    if (!item.is_object()) continue;
    NetworkInfo info;
    info.id = item.value("Id", "");
    info.name = item.value("Name", "");
    if (item.contains("Labels")) info.labels = labels_of(item["Labels"]);
    networks.push_back(std::move(info));
  }
  return networks;
}

bool remove_network(EngineClient& client, const std::string& name_or_id) noexcept {
  try {
    const EngineResponse response = client.call("DELETE", "/networks/" + url_encode(name_or_id));
    return response.status == 204 || response.status == 200 || response.status == 404;
  } catch (...) {
    return false;
  }
}

void ensure_image(EngineClient& client, const std::string& image, bool pull,
                  std::chrono::milliseconds pull_timeout) {
  const std::string path = "/images/" + url_encode(image) + "/json";
  const EngineResponse response = client.call("GET", path);
  if (response.status == 200) {
    // A snapshot's image holds a conversation's files: it is never what a spec runs, whatever
    // it is called (its tag, its id), so that no other conversation reaches it by name.
    const json parsed = parse_object(response, path);
    if (parsed.contains("Config") && parsed["Config"].is_object() &&
        parsed["Config"].contains("Labels")) {
      const auto labels = labels_of(parsed["Config"]["Labels"]);
      const auto role = labels.find(kRoleLabel);
      if (role != labels.end() &&
          (role->second == kRoleSnapshot || role->second == kRoleSnapshotReader)) {
        throw InvalidArgument("the image '" + image + "' is not a sandbox image", "image");
      }
    }
    return;
  }
  if (response.status != 404) {
    EngineClient::fail("the container engine could not look up the sandbox image", "GET", path,
                       response);
  }
  if (!pull) {
    throw InvalidArgument("the sandbox image '" + image +
                          "' is not present on the container engine and pulling is disabled");
  }
  // The pull answers 200 at once and reports failure inside its progress stream.
  const std::string pull_path = client.versioned("/images/create?fromImage=" + url_encode(image));
  CallOptions options;
  options.timeout = pull_timeout;
  options.max_body_bytes = 64u << 20;
  const EngineResponse pulled = client.call_unversioned("POST", pull_path, options);
  std::string failure;
  if (pulled.status != 200) {
    failure = pulled.engine_message();
  } else {
    std::size_t start = 0;
    while (start < pulled.body.size()) {
      std::size_t end = pulled.body.find('\n', start);
      if (end == std::string::npos) end = pulled.body.size();
      const auto line = json::parse(pulled.body.substr(start, end - start), nullptr, false);
      if (line.is_object() && line.contains("error")) failure = line["error"].dump();
      start = end + 1;
    }
  }
  if (!failure.empty()) {
    throw BackendError("the sandbox image '" + image + "' is not present and could not be pulled",
                       "POST /images/create: " + failure);
  }
}

EngineInfo engine_info(EngineClient& client) {
  const EngineResponse response = client.call("GET", "/info");
  if (response.status != 200) {
    EngineClient::fail("the container engine could not describe itself", "GET", "/info", response);
  }
  const json parsed = parse_object(response, "/info");
  EngineInfo info;
  // Podman's Docker-compatible service (the only engine whose /info carries BuildahVersion)
  // lists the runtimes of its configuration but ignores HostConfig.Runtime: a container asked
  // for runsc runs under runc (seen with Podman 4.3). None can be chosen through this API.
  if (parsed.contains("BuildahVersion")) {
    info.flavour = EngineFlavour::podman;
    return info;
  }
  if (parsed.contains("Runtimes") && parsed["Runtimes"].is_object()) {
    for (const auto& [name, runtime] : parsed["Runtimes"].items()) {
      EngineRuntime entry;
      if (runtime.is_object() && runtime.contains("path") && runtime["path"].is_string()) {
        entry.path = runtime["path"].get<std::string>();
      }
      if (runtime.is_object() && runtime.contains("runtimeArgs") &&
          runtime["runtimeArgs"].is_array()) {
        for (const auto& argument : runtime["runtimeArgs"]) {
          if (argument.is_string()) entry.arguments.push_back(argument.get<std::string>());
        }
      }
      info.runtimes[name] = std::move(entry);
    }
  }
  return info;
}

void make_directories(EngineClient& client, const std::string& id, const std::string& base,
                      const std::vector<std::string>& directories) {
  if (directories.empty()) return;
  const std::string path =
      "/containers/" + url_encode(id) + "/archive?noOverwriteDirNonDir=1&path=" + url_encode(base);
  CallOptions options;
  const std::string archive = build_directory_archive(directories);
  options.body = archive;
  options.content_type = "application/x-tar";
  const EngineResponse response = client.call("PUT", path, options);
  if (response.status != 200) {
    EngineClient::fail("the container engine could not make the sandbox's working directory", "PUT",
                       path, response);
  }
}

std::optional<std::size_t> count_processes(EngineClient& client, const std::string& id) {
  try {
    const EngineResponse response = client.call("GET", "/containers/" + url_encode(id) + "/top");
    if (response.status != 200) return std::nullopt;
    const auto parsed = json::parse(response.body, nullptr, false);
    if (!parsed.is_object() || !parsed.contains("Processes") || !parsed["Processes"].is_array()) {
      return std::nullopt;
    }
    return parsed["Processes"].size();
  } catch (...) {
    return std::nullopt;
  }
}

void pause_container(EngineClient& client, const std::string& id) {
  const std::string path = "/containers/" + url_encode(id) + "/pause";
  const EngineResponse response = client.call("POST", path);
  if (response.status != 204) {
    EngineClient::fail("the container engine could not freeze the sandbox", "POST", path, response);
  }
}

void unpause_container(EngineClient& client, const std::string& id) noexcept {
  try {
    client.call("POST", "/containers/" + url_encode(id) + "/unpause");
  } catch (...) {
  }
}

void signal_container(EngineClient& client, const std::string& id, const std::string& signal) {
  const std::string path = "/containers/" + url_encode(id) + "/kill?signal=" + url_encode(signal);
  const EngineResponse response = client.call("POST", path);
  if (response.status != 204) {
    EngineClient::fail("the container engine could not signal the sandbox", "POST", path, response);
  }
}

std::optional<std::vector<std::string>> process_states(EngineClient& client, const std::string& id,
                                                       EngineFlavour flavour) {
  try {
    // Docker passes ps_args to the host's ps; Podman takes its own descriptors and reads the
    // container's processes itself (its "-o" form would run ps inside the container).
    const std::string arguments = flavour == EngineFlavour::podman ? "pid,state" : "-o pid,stat";
    const EngineResponse response = client.call(
        "GET", "/containers/" + url_encode(id) + "/top?ps_args=" + url_encode(arguments));
    if (response.status != 200) return std::nullopt;
    const auto parsed = json::parse(response.body, nullptr, false);
    if (!parsed.is_object() || !parsed.contains("Processes") || !parsed["Processes"].is_array()) {
      return std::nullopt;
    }
    std::vector<std::string> states;
    for (const auto& row : parsed["Processes"]) {
      if (!row.is_array() || row.size() < 2 || !row[1].is_string()) return std::nullopt;
      states.push_back(row[1].get<std::string>().substr(0, 1));
    }
    return states;
  } catch (...) {
    return std::nullopt;
  }
}

std::vector<ImageInfo> list_images(EngineClient& client,
                                   const std::map<std::string, std::string>& labels) {
  // Podman 4.3's image list answers nothing when its filter names more than one label (its
  // container list ANDs them as Docker does): the engine is asked for one, the most telling,
  // and the rest are matched here.
  std::map<std::string, std::string> asked;
  for (const char* first : {"airlock.snapshot", "airlock.scope", "airlock.role"}) {
    const auto found = labels.find(first);
    if (found != labels.end()) {
      asked.insert(*found);
      break;
    }
  }
  if (asked.empty() && !labels.empty()) asked.insert(*labels.begin());
  const std::string path = "/images/json?filters=" + label_filter(asked);
  CallOptions options;
  options.max_body_bytes = 64u << 20;
  const EngineResponse response = client.call("GET", path, options);
  if (response.status != 200) {
    EngineClient::fail("the container engine could not list snapshots", "GET", path, response);
  }
  const json parsed = parse_object(response, path);
  std::vector<ImageInfo> images;
  if (!parsed.is_array()) return images;
  for (const auto& item : parsed) {
    if (!item.is_object()) continue;
    ImageInfo info;
    info.id = item.value("Id", "");
    if (item.contains("Labels")) info.labels = labels_of(item["Labels"]);
    const bool matches = std::all_of(labels.begin(), labels.end(), [&info](const auto& wanted) {
      const auto have = info.labels.find(wanted.first);
      return have != info.labels.end() && have->second == wanted.second;
    });
    if (!info.id.empty() && matches) images.push_back(std::move(info));
  }
  return images;
}

std::optional<ImageInfo> inspect_image(EngineClient& client, const std::string& name_or_id) {
  const std::string path = "/images/" + url_encode(name_or_id) + "/json";
  const EngineResponse response = client.call("GET", path);
  if (response.status == 404) return std::nullopt;
  if (response.status != 200) {
    EngineClient::fail("the container engine could not look up the sandbox image", "GET", path,
                       response);
  }
  const json parsed = parse_object(response, path);
  ImageInfo info;
  info.id = parsed.value("Id", "");
  if (parsed.contains("Config") && parsed["Config"].is_object() &&
      parsed["Config"].contains("Labels")) {
    info.labels = labels_of(parsed["Config"]["Labels"]);
  }
  return info;
}

std::string import_image(EngineClient& client, int fd, std::uint64_t bytes,
                         const std::string& reference,
                         const std::map<std::string, std::string>& labels) {
  // Each label a Dockerfile LABEL instruction; the values are label-safe words or base64, so
  // nothing in them needs quoting.
  std::string query = "/images/create?fromSrc=-&repo=" + url_encode(reference);
  for (const auto& [name, value] : labels) {
    query += "&changes=" + url_encode("LABEL " + name + "=" + value);
  }
  CallOptions options;
  options.body_fd = fd;
  options.body_fd_bytes = bytes;
  options.content_type = "application/x-tar";
  options.timeout =
      std::chrono::milliseconds(std::max<long long>(client.request_timeout().count(), 600'000));
  const EngineResponse response = client.call("POST", query, options);
  if (response.status != 200) {
    EngineClient::fail("the container engine could not store the snapshot", "POST",
                       "/images/create?fromSrc=-", response);
  }
  // A stream of JSON objects: an "error" anywhere fails it; the last "status" (Docker) or "id"
  // (Podman) that is an image id names the image.
  std::string id;
  std::size_t start = 0;
  while (start < response.body.size()) {
    std::size_t end = response.body.find('\n', start);
    if (end == std::string::npos) end = response.body.size();
    const auto line = json::parse(response.body.substr(start, end - start), nullptr, false);
    start = end + 1;
    if (!line.is_object()) continue;
    if (line.contains("error")) {
      throw BackendError("the container engine could not store the snapshot",
                         "POST /images/create?fromSrc=-: " + line["error"].dump());
    }
    for (const char* field : {"id", "status"}) {
      if (line.contains(field) && line[field].is_string() &&
          line[field].get<std::string>().rfind("sha256:", 0) == 0) {
        id = line[field].get<std::string>();
      }
    }
  }
  if (id.empty()) {
    throw BackendError("the container engine stored the snapshot but named no image",
                       response.body.substr(0, 300));
  }
  return id;
}

bool remove_image(EngineClient& client, const std::string& id) noexcept {
  try {
    const EngineResponse response =
        client.call("DELETE", "/images/" + url_encode(id) + "?force=1&noprune=0");
    return response.status == 200 || response.status == 404;
  } catch (...) {
    return false;
  }
}

void remove_volumes(EngineClient& client,
                    const std::map<std::string, std::string>& labels) noexcept {
  try {
    const std::string path = "/volumes?filters=" + label_filter(labels);
    const EngineResponse response = client.call("GET", path);
    if (response.status != 200) return;
    const auto parsed = json::parse(response.body, nullptr, false);
    if (!parsed.is_object() || !parsed.contains("Volumes") || !parsed["Volumes"].is_array()) {
      return;
    }
    for (const auto& volume : parsed["Volumes"]) {
      if (!volume.is_object() || !volume.contains("Name") || !volume["Name"].is_string()) continue;
      client.call("DELETE",
                  "/volumes/" + url_encode(volume["Name"].get<std::string>()) + "?force=1");
    }
  } catch (...) {
  }
}

}  // namespace airlock::docker
