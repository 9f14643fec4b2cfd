#include <cstdlib>
#include <mutex>
#include <thread>

#include "airlock/backends/docker.hpp"
#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "airlock/paths.hpp"
#include "backends/docker/containers.hpp"
#include "backends/docker/docker_sandbox.hpp"
#include "backends/docker/egress_topology.hpp"
#include "backends/docker/engine_context.hpp"
#include "backends/docker/seccomp_profile.hpp"
#include "backends/docker/snapshots.hpp"
#include "backends/kit/contained.hpp"
#include "backends/kit/labels.hpp"

namespace airlock::docker {
namespace {

constexpr TransferLimits kArchiveLimits{64ull << 20, 256ull << 20, 256};

// The labels every container, proxy and network of one sandbox carries.
std::map<std::string, std::string> labels_for(const SandboxKey& key, const SandboxSpec& spec,
                                              const char* role) {
  auto labels = sandbox_labels(key, spec);
  labels[kBackendLabel] = "docker";
  labels[kRoleLabel] = role;
  return labels;
}

// The query half of a sandbox's labels: what a later process can recompute from a key.
std::map<std::string, std::string> key_labels(const SandboxKey& key) {
  auto labels = backend_kit::key_labels(key);
  labels.emplace(kBackendLabel, "docker");
  return labels;
}

// Snapshots read the storage places through the archive endpoints: with a read-only root they
// hold everything a guest writes, and under runc the engine's view of them is the guest's.
bool takes_snapshots(const DockerConfig& config) {
  return config.read_only_rootfs && (config.runtime.empty() || config.runtime == "runc");
}

// A container that carries our name but not our labels for this sandbox is not adopted: it may
// be someone else's, and handing it out would give one conversation another's files.
bool labelled_for(const ContainerInfo& info, const std::map<std::string, std::string>& labels) {
  for (const char* name : {kBackendLabel, "airlock.scope", "airlock.thread", "airlock.agent",
                           "airlock.kind", "airlock.egress"}) {
    const auto want = labels.find(name);
    const auto have = info.labels.find(name);
    if (want == labels.end() || have == info.labels.end() || want->second != have->second) {
      return false;
    }
  }
  return true;
}

}  // namespace

struct DockerBackend::State {
  std::shared_ptr<EngineContext> engine;
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<std::mutex>> name_locks;
  std::optional<EngineInfo> info;

  std::shared_ptr<std::mutex> lock_for(const std::string& name) {
    std::lock_guard guard(mutex);
    auto& slot = name_locks[name];
    if (!slot) slot = std::make_shared<std::mutex>();
    return slot;
  }

  EngineInfo describe_engine() {
    {
      std::lock_guard guard(mutex);
      if (info) return *info;
    }
    auto described = engine_info(*this->engine->client);
    std::lock_guard guard(mutex);
    info = described;
    return described;
  }

  // Remove every container matching `labels` (sandboxes first, then proxies and snapshot
  // readers), then every network matching them, and — `snapshots` — every snapshot image.
  // Returns how many sandbox containers went.
  int sweep(const std::map<std::string, std::string>& labels,
            const std::optional<std::string>& only_instance = std::nullopt,
            bool snapshots = false) noexcept {
    int removed = 0;
    try {
      EngineClient& client = *engine->client;
      auto containers = list_containers(client, labels);
      std::vector<std::string> sandbox_names;
      for (const auto& container : containers) {
        const auto role = container.labels.find(kRoleLabel);
        if (role == container.labels.end() || role->second != kRoleSandbox) continue;
        if (only_instance && container.id != *only_instance) continue;
        if (remove_container(client, container.id)) ++removed;
        sandbox_names.push_back(container.name);
      }
      if (only_instance) {
        for (const auto& name : sandbox_names) remove_egress(*engine, name);
        return removed;
      }
      // A snapshot's reader never runs; one a crashed resume left goes with its conversation.
      for (const auto& container : containers) {
        const auto role = container.labels.find(kRoleLabel);
        if (role != container.labels.end() && role->second == kRoleSnapshotReader) {
          remove_container(client, container.id);
        }
      }
      if (snapshots) {
        for (const auto& snapshot : list_snapshot_images(client, labels)) {
          remove_snapshot_image(client, snapshot.record.id);
        }
      }
      // Proxies and networks are swept whatever the backend's configuration is now: a backend
      // configured closed today still owns what an allowlist configuration left yesterday.
      for (const auto& container : containers) {
        const auto role = container.labels.find(kRoleLabel);
        if (role != container.labels.end() && role->second == kRoleProxy) {
          remove_container(client, container.id);
        }
      }
      for (const auto& network : list_networks(client, labels)) remove_network(client, network.id);
      // A sandbox's storage volumes go with its container (they are anonymous); any left by a
      // container removed some other way go here.
      remove_volumes(client, labels);
    } catch (...) {
      // Best effort by contract; what could not be listed is still on the engine for the next
      // purge to find.
    }
    return removed;
  }
};

DockerBackend::DockerBackend(DockerConfig config) : state_(std::make_unique<State>()) {
  if (config.host.empty()) {
    const char* from_environment = std::getenv("DOCKER_HOST");
    config.host =
        from_environment && *from_environment ? from_environment : "unix:///var/run/docker.sock";
  }
  auto endpoint = parse_engine_host(config.host, config.tls, "docker.host");
  TlsSettings tls{config.tls_ca_file, config.tls_cert_file, config.tls_key_file, config.tls_verify};
  auto client = std::make_shared<EngineClient>(std::move(endpoint), std::move(tls),
                                               config.api_version_max, config.request_timeout);
  state_->engine = std::make_shared<EngineContext>();
  state_->engine->config = std::move(config);
  state_->engine->client = std::move(client);
}

DockerBackend::~DockerBackend() = default;

const DockerConfig& DockerBackend::config() const noexcept {
  return state_->engine->config;
}

std::string DockerBackend::api_version() const {
  return state_->engine->client->api_version();
}

std::string DockerBackend::container_name(const SandboxKey& key, const SandboxSpec& spec) {
  return "airlock-" + sandbox_identity(key, spec.kind(), spec.egress_posture());
}

// ---- declarations -----------------------------------------------------------------------------

Isolation DockerBackend::isolation() const {
  // What the isolation suite proves here (docs/backends/docker.md, "What it declares"):
  //   - under runc (the engines' default) the guest shares the host's kernel as host root, and
  //     the pools that kernel keeps per user (inotify instances and watches, pipe buffer pages)
  //     are host root's, shared with the host and every other sandbox; nothing an engine offers
  //     separates them, and the pty pool has no per-container ceiling either;
  //   - under runsc the guest has another kernel, but a guest attacking its own sandbox stalls
  //     it (nested user namespaces on gVisor's ptrace platform) or ends it (thousands of
  //     threads on systrap) before the suite can prove the rest.
  // Neither is `container`, let alone `hardened_container`: what holds is a separate process.
  return Isolation::os_process;
}

std::optional<EgressSet> DockerBackend::egress_modes() const {
  // Allowlist only with a proxy image to run: the proxy container is what serves it. And only
  // under the engine's default runtime (or runc named as such), the one the topology is proven
  // on: runsc as engines register it runs with --network=none, which would leave an allowlisted
  // sandbox no way to its proxy — a declaration the backend could not keep.
  const DockerConfig& config = state_->engine->config;
  if (config.proxy_image.empty()) return EgressSet{Egress::closed};
  if (!config.runtime.empty() && config.runtime != "runc") return EgressSet{Egress::closed};
  return EgressSet{Egress::closed, Egress::allowlist};
}

std::optional<CapabilitySet> DockerBackend::capabilities() const {
  CapabilitySet set{Capability::exec,       Capability::files_in,     Capability::files_out,
                    Capability::files_list, Capability::files_delete, Capability::host_tools};
  if (!state_->engine->config.run_code_interpreter.empty()) set.insert(Capability::run_code);
  if (takes_snapshots(state_->engine->config)) set.insert(Capability::snapshot);
  return set;
}

std::optional<SnapshotContent> DockerBackend::snapshot_content() const {
  if (!takes_snapshots(state_->engine->config)) return std::nullopt;
  return SnapshotContent::filesystem;
}

std::optional<SandboxLimits> DockerBackend::limits() const {
  return SandboxLimits{kArchiveLimits, kArchiveLimits};
}

std::optional<OsFamilySet> DockerBackend::os_families() const {
  return OsFamilySet{OsFamily::posix};
}

std::vector<std::string> DockerBackend::stated_residuals() const {
  const std::string& plane = state_->engine->config.file_plane;
  if (plane == "host") return {};
  return {std::string(plane == "archive" ? "file operations use the Engine API's archive endpoints"
                                         : "where the host plane does not apply (a remote engine, a "
                                           "runtime other than runc), file operations use the "
                                           "Engine API's archive endpoints") +
          ": the confinement walk and the operation are separate requests, so a guest that swaps "
          "a checked directory for a link between them wins the race (what the engine resolves "
          "stays inside the container's root), and a hard link reads as the regular file it "
          "names. file_plane \"host\" refuses rather than fall back."};
}

// ---- acquire ----------------------------------------------------------------------------------

// A resume's snapshot, as the engine's images describe it.
struct DockerBackend::Resume {
  StoredSnapshot snapshot;
};

std::shared_ptr<Sandbox> DockerBackend::acquire(const SandboxKey& key, const SandboxSpec& spec) {
  return obtain(key, spec, nullptr);
}

std::shared_ptr<Sandbox> DockerBackend::obtain(const SandboxKey& key, const SandboxSpec& spec,
                                               const Resume* from) {
  EngineContext& engine = *state_->engine;
  const DockerConfig& config = engine.config;
  EngineClient& client = *engine.client;

  const EngineFlavour flavour = state_->describe_engine().flavour;
  const ResourceLimits& resources = spec.resources();
  if (resources.disk_bytes) {
    if (!config.read_only_rootfs) {
      throw InvalidArgument(
          "resources.disk_bytes: this docker backend keeps the image's root "
          "writable (read_only_rootfs is false), on the engine's own storage, "
          "which nothing bounds; leave it unset, or make the root read-only",
          "resources.disk_bytes");
    }
    if (*resources.disk_bytes < kMinimumDiskBytes) {
      throw InvalidArgument(
          "resources.disk_bytes: at least 16 MiB (it is shared by every "
          "writable place of the sandbox)",
          "resources.disk_bytes");
    }
  }
  // A resume's storage is the snapshot's (its places, their sizes), and its image the one the
  // snapshot's sandbox ran: the spec's resources and image are not applied to it.
  const std::uint64_t disk_bytes = from != nullptr
                                       ? from->snapshot.disk_bytes
                                       : resources.disk_bytes.value_or(config.disk_bytes);
  const StorageLayout storage = plan_storage(spec.work_dir(), disk_bytes, flavour);
  std::vector<std::string> places;
  for (const auto& mount : storage.mounts) places.push_back(mount.target);
  if (from != nullptr) {
    if (normalize_guest_path(spec.work_dir()) != from->snapshot.record.work_dir) {
      throw InvalidArgument("snapshot '" + from->snapshot.record.id + "' holds the work dir " +
                                from->snapshot.record.work_dir +
                                "; it is resumed only there, not "
                                "in " +
                                normalize_guest_path(spec.work_dir()),
                            "work_dir");
    }
    if (from->snapshot.flavour != flavour || places != from->snapshot.places) {
      throw BackendError("snapshot '" + from->snapshot.record.id + "' cannot be resumed here",
                         "it was taken on another engine, or its storage places differ");
    }
  }
  std::string image = from != nullptr
                          ? from->snapshot.source_image_id
                          : spec.image_id().value_or(spec.image().value_or(config.default_image));
  if (image.empty()) {
    throw InvalidArgument(
        "No sandbox image is configured: the spec names neither image nor image_id, and the "
        "docker backend has no default_image (`airlock image build busybox --docker` makes " +
            std::string(kBuiltDefaultImage) + ", the default).",
        "image");
  }
  // The default image is made on this host (`airlock image build busybox --docker`), never
  // pulled: a registry may hold anything under its name.
  const bool built_default = image == kBuiltDefaultImage;
  if (spec.egress() == Egress::unrestricted ||
      (spec.egress() == Egress::allowlist && config.proxy_image.empty())) {
    throw EgressNotEnforced(
        "the docker backend cannot enforce the '" + std::string(to_string(spec.egress())) +
            "' egress mode" +
            (spec.egress() == Egress::allowlist ? " without a configured proxy_image" : ""),
        "egress");
  }
  if (!config.runtime.empty()) {
    if (!state_->describe_engine().runtimes.contains(config.runtime)) {
      throw BackendError("the container engine has no runtime named '" + config.runtime + "'");
    }
  }

  const std::string name = container_name(key, spec);
  const auto labels = labels_for(key, spec, kRoleSandbox);
  // One get-or-create per name in this process; across processes the engine's unique names
  // decide (a 409 on create means another process won, and its container is adopted).
  const auto name_lock = state_->lock_for(name);
  std::lock_guard guard(*name_lock);

  const bool allowlist = spec.egress() == Egress::allowlist;
  if (from != nullptr) {
    // The live sandbox of this key, kind and posture makes way for the resumed one.
    remove_container(client, name);
    remove_egress(engine, name);
  }
  auto existing = inspect_container(client, name);
  // A resume never adopts: a container of this name now is another process's, without the
  // snapshot's files.
  if (from != nullptr && existing) {
    throw BackendError("the sandbox could not be resumed: another process made it meanwhile",
                       "container " + name);
  }
  if (existing && !labelled_for(*existing, labels)) {
    throw BackendError("a container with this sandbox's name exists and was not made for it",
                       "container " + name + " carries other labels");
  }

  EgressTopology topology;
  if (allowlist) topology = ensure_egress(engine, name, spec, labels, /*fresh=*/!existing, flavour);

  std::string id;
  bool created_here = false;
  if (existing) {
    id = existing->id;
    if (existing->paused) {
      // Frozen by a file operation whose process died before it could thaw it.
      client.call("POST", "/containers/" + id + "/unpause");
    }
    if (!existing->running) {
      try {
        start_container(client, id);
        // Its storage was a tmpfs, and went with the stop.
        make_directories(client, id, storage.work_base, storage.work_directories);
      } catch (const Error&) {
        // A container that will not start again is replaced, not handed out dead.
        remove_container(client, id);
        existing.reset();
      }
    }
  }
  if (!existing) {
    try {
      try {
        ensure_image(client, image, config.pull_missing_images && !built_default && from == nullptr,
                     config.pull_timeout);
      } catch (const InvalidArgument&) {
        if (!built_default) throw;
        throw InvalidArgument("the docker backend's default image " + image +
                                  " is not on the container engine; make it offline with "
                                  "`airlock image build busybox --docker` (or set default_image)",
                              "image");
      }
      ContainerRequest request;
      request.name = name;
      request.image = image;
      request.entrypoint = {"/bin/sh", "-c", kKeeperScript};
      request.labels = labels;
      request.labels[kKeeperLabel] = kKeeperVersion;
      request.environment = config.environment;
      // A read-only root leaves the image's home unwritable, and programs write there (caches,
      // dotfiles): HOME is the bounded /tmp, as on the linux backend, unless configured.
      if (config.read_only_rootfs && !request.environment.contains("HOME")) {
        request.environment["HOME"] = "/tmp";
      }
      request.network_mode = allowlist ? topology.network : "none";
      request.pids_limit = spec.resources().pids.value_or(config.pids_limit);
      request.memory_bytes =
          spec.resources().memory_bytes ? spec.resources().memory_bytes : config.memory_bytes;
      request.cpu_millis =
          spec.resources().cpu_millis ? spec.resources().cpu_millis : config.cpu_millis;
      request.read_only_rootfs = config.read_only_rootfs;
      request.init = config.init;
      request.runtime = config.runtime;
      request.flavour = flavour;
      request.sandbox = true;
      request.ptys = config.ptys;
      request.storage = storage.mounts;
      request.shm_bytes = storage.shm_bytes;
      request.storage_labels = labels_for(key, spec, kRoleStorage);
      const SeccompOption seccomp(flavour);
      request.seccomp = seccomp.value();
      auto created = create_container(client, request);
      if (!created && from != nullptr) {
        throw BackendError("the sandbox could not be resumed: another process made it meanwhile",
                           "container " + name);
      }
      if (!created) {
        // Another process created it between our look and our create: adopt theirs. The engine
        // reserves a name before the container can be looked up by it, so look a little while.
        auto adopted = inspect_container(client, name);
        for (int attempt = 0; !adopted && attempt < 100; ++attempt) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          adopted = inspect_container(client, name);
        }
        if (!adopted || !labelled_for(*adopted, labels)) {
          throw BackendError("the sandbox's container name is taken by a container not made for it",
                             "container " + name);
        }
        id = adopted->id;
        if (!adopted->running) start_container(client, id);
        make_directories(client, id, storage.work_base, storage.work_directories);
      } else {
        id = *created;
        created_here = true;
        try {
          start_container(client, id);
          make_directories(client, id, storage.work_base, storage.work_directories);
          if (from != nullptr) {
            // Nothing of a guest runs in it yet: only the init and the keeper.
            restore_places(engine, id, from->snapshot, labels_for(key, spec, kRoleSnapshotReader));
          }
        } catch (...) {
          remove_container(client, id);
          throw;
        }
      }
    } catch (...) {
      if (allowlist) remove_egress(engine, name);
      throw;
    }
  }
  if (!config.runtime.empty()) {
    // The declared isolation rests on the runtime; a sandbox the engine runs under another one
    // (an older container of this name, an engine that ignores the field) is never handed out.
    const auto info = inspect_container(client, id);
    if (!info || info->runtime != config.runtime) {
      if (created_here) remove_container(client, id);
      if (allowlist) remove_egress(engine, name);
      throw BackendError(
          "the container engine did not run the sandbox under runtime '" + config.runtime + "'",
          "container " + name + " runs under '" + (info ? info->runtime : "?") + "'" +
              (created_here ? " (removed)" : " (left; dispose it to replace)"));
    }
  }

  SandboxIdentity identity{id, name, key, spec.kind(), spec.work_dir(), topology.environment};
  // The keeper stops every command in place (see force_stop) under runc, whose processes the
  // engine's process list shows as they are, and with the engine's init, which reaps what the
  // keeper kills; otherwise a forced stop restarts the container.
  identity.stop_in_place = (config.runtime.empty() || config.runtime == "runc") && config.init;
  identity.keeper_processes = 2;
  identity.storage_base = storage.work_base;
  identity.work_directories = storage.work_directories;
  identity.snapshots = takes_snapshots(config);
  identity.storage_places = places;
  identity.disk_bytes = disk_bytes;
  identity.flavour = flavour;
  return std::make_shared<DockerSandbox>(state_->engine, std::move(identity));
}

// ---- disposal ---------------------------------------------------------------------------------

void DockerBackend::dispose(const SandboxKey& key) noexcept {
  backend_kit::contained("docker", "dispose", [&] { state_->sweep(key_labels(key)); });
}

bool DockerBackend::dispose_kind(const SandboxKey& key, std::string_view kind,
                                 std::optional<std::string_view> instance_id) noexcept {
  return backend_kit::contained("docker", "dispose_kind", false, [&] {
    auto labels = backend_kit::kind_labels(key, kind);
    labels.emplace(kBackendLabel, "docker");
    if (!instance_id) {
      state_->sweep(labels);
    } else {
      state_->sweep(labels, std::string(*instance_id));
    }
    // Whatever happened above, the answer is what the engine now holds.
    for (const auto& container : list_containers(*state_->engine->client, labels)) {
      const auto role = container.labels.find(kRoleLabel);
      if (role == container.labels.end() || role->second != kRoleSandbox) continue;
      if (!instance_id || container.id == *instance_id) return false;
    }
    return true;
  });
}

int DockerBackend::dispose_scope(std::string_view scope,
                                 std::optional<std::string_view> thread_id) noexcept {
  return backend_kit::contained("docker", "dispose_scope", 0, [&] {
    auto labels = backend_kit::scope_labels(scope, thread_id);
    labels.emplace(kBackendLabel, "docker");
    return state_->sweep(labels, std::nullopt, /*snapshots=*/true);
  });
}

int DockerBackend::purge_all() noexcept {
  return backend_kit::contained("docker", "purge", 0, [&] {
    return state_->sweep({{kBackendLabel, "docker"}}, std::nullopt, /*snapshots=*/true);
  });
}

// ---- snapshots --------------------------------------------------------------------------------

std::shared_ptr<Sandbox> DockerBackend::acquire_from_snapshot(const SandboxKey& key,
                                                              const SandboxSpec& spec,
                                                              const SnapshotRecord& snapshot) {
  if (!takes_snapshots(state_->engine->config)) {
    throw NotSupported("this docker backend takes no snapshots");
  }
  if (snapshot.backend != "docker" || !is_snapshot_id(snapshot.id)) {
    throw InvalidArgument("snapshot '" + snapshot.id + "' is not one of the docker backend's",
                          "snapshot");
  }
  auto stored = find_snapshot_image(*state_->engine->client, snapshot.id);
  if (!stored) throw NotFound("no snapshot '" + snapshot.id + "'");
  const Resume from{std::move(*stored)};
  return obtain(key, spec, &from);
}

std::optional<SnapshotRecord> DockerBackend::find_snapshot(std::string_view id) {
  if (!is_snapshot_id(id)) return std::nullopt;
  auto stored = find_snapshot_image(*state_->engine->client, id);
  if (!stored) return std::nullopt;
  return std::move(stored->record);
}

std::vector<SnapshotRecord> DockerBackend::list_snapshots() {
  std::vector<SnapshotRecord> out;
  for (auto& stored : list_snapshot_images(*state_->engine->client, {})) {
    out.push_back(std::move(stored.record));
  }
  return out;
}

bool DockerBackend::delete_snapshot(std::string_view id) noexcept {
  return remove_snapshot_image(*state_->engine->client, id);
}

std::vector<SandboxRecord> DockerBackend::list_sandboxes() {
  std::vector<SandboxRecord> records;
  for (const auto& container : list_containers(
           *state_->engine->client, {{kBackendLabel, "docker"}, {kRoleLabel, kRoleSandbox}})) {
    SandboxRecord record;
    record.backend = "docker";
    record.instance_id = container.id;
    for (const auto& [name, value] : container.labels) {
      if (name.starts_with("airlock.")) record.labels[name] = value;
    }
    if (auto kind = container.labels.find("airlock.kind"); kind != container.labels.end()) {
      record.kind = kind->second;
    }
    if (auto egress = container.labels.find("airlock.egress"); egress != container.labels.end()) {
      record.egress_posture = egress->second;
    }
    record.state = container.state;
    record.created_at = container.created_at;
    records.push_back(std::move(record));
  }
  return records;
}

}  // namespace airlock::docker
