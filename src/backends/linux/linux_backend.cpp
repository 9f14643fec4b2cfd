#include "backends/linux/linux_backend.hpp"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "airlock/paths.hpp"
#include "airlock/state_dir.hpp"
#include "backends/linux/control_channel.hpp"
#include "backends/linux/launcher.hpp"
#include "backends/linux/protocol.hpp"
#include "backends/linux/seccomp_policy.hpp"
#include "backends/linux/syscalls.hpp"
#include "backends/linux/tree_removal.hpp"

namespace airlock::linux_backend {
namespace {

constexpr auto kKillPatience = std::chrono::seconds(10);

std::int64_t unix_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void make_directory(const std::filesystem::path& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0) {
    throw BackendError("the sandbox's state could not be created",
                       path.string() + ": " + std::strerror(errno));
  }
}

void hand_to_guest(const std::filesystem::path& path, uid_t owner) {
  if (::chown(path.c_str(), owner, owner) != 0) {
    throw BackendError("the sandbox's state could not be created",
                       "chown " + path.string() + ": " + std::strerror(errno));
  }
}

// Removes <base>/<id> without following anything the guest left in it.
void remove_state_directory(const StateStore& store, const std::string& id) {
  UniqueFd base(::open(store.base().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!base) return;
  (void)remove_tree(base.get(), id);
}

bool matches_labels(const RecordFile& record, const std::map<std::string, std::string>& wanted) {
  for (const auto& [name, value] : wanted) {
    auto found = record.labels.find(name);
    if (found == record.labels.end() || found->second != value) return false;
  }
  return true;
}

std::vector<ResourceLimit> guest_resource_limits() {
  struct rlimit current {};
  ::getrlimit(RLIMIT_NOFILE, &current);
  const std::uint64_t files = std::min<std::uint64_t>(4096, current.rlim_max);
  return {
      {static_cast<std::uint32_t>(RLIMIT_CORE), 0, 0},
      {static_cast<std::uint32_t>(RLIMIT_NOFILE), files, files},
  };
}

// With image "host", the work dir must be makeable: under /tmp or /run (private tmpfs), under a
// first component the host root lacks (a scratch tmpfs), or an existing host directory reached
// without links (covered by the work storage). Anything else would need a new directory in the
// read-only host root.
void check_host_work_dir(const std::string& work_dir) {
  const std::string first = work_dir.substr(1, work_dir.find('/', 1) - 1);
  if (first == "tmp" || first == "run") return;
  struct stat info {};
  if (::lstat(("/" + first).c_str(), &info) != 0) return;
  std::string prefix;
  std::size_t start = 1;
  while (start <= work_dir.size()) {
    std::size_t end = work_dir.find('/', start);
    if (end == std::string::npos) end = work_dir.size();
    prefix += "/" + work_dir.substr(start, end - start);
    start = end + 1;
    if (::lstat(prefix.c_str(), &info) != 0) {
      throw InvalidArgument("work_dir '" + work_dir + "': " + prefix +
                                " does not exist and cannot be made, because the host root is "
                                "read-only in an image \"host\" sandbox; use a work dir whose "
                                "first component the host lacks (the default /maf-sandbox/work), "
                                "or one under /tmp",
                            "work_dir");
    }
    if (S_ISLNK(info.st_mode)) {
      throw InvalidArgument("work_dir '" + work_dir + "' passes through the link " + prefix +
                                "; the file plane refuses every path through a link",
                            "work_dir");
    }
    if (!S_ISDIR(info.st_mode)) {
      throw InvalidArgument("work_dir '" + work_dir + "': " + prefix + " is not a directory",
                            "work_dir");
    }
  }
}

}  // namespace

LinuxBackend::LinuxBackend(LinuxBackendConfig config)
    : config_(std::make_shared<const LinuxBackendConfig>(std::move(config))),
      store_(config_->state_dir.empty() ? default_linux_state_dir() : config_->state_dir),
      privileged_(::geteuid() == 0) {
  if (config_->max_concurrent_commands == 0) {
    throw InvalidArgument("max_concurrent_commands must be at least 1", "max_concurrent_commands");
  }
  if (config_->uid_base == 0 || config_->uid_base > 0xFFFFFFFEu - 65535u) {
    throw InvalidArgument("uid_base must be above 0 and leave room for 65536 ids", "uid_base");
  }
  if (privileged_) layout_ = CgroupLayout::detect();
}

LinuxBackend::~LinuxBackend() {
  {
    std::lock_guard lock(standby_mutex_);
    standby_stopping_ = true;
  }
  standby_wakeup_.notify_all();
  if (standby_worker_.joinable()) standby_worker_.join();
  standby_.reset();
}

std::unique_ptr<StandbyMonitor> LinuxBackend::take_standby(const InstanceCgroups& planned) {
  if (!config_->standby) return nullptr;
  std::unique_ptr<StandbyMonitor> taken;
  std::unique_ptr<StandbyMonitor> stale;
  {
    std::lock_guard lock(standby_mutex_);
    if (standby_ && !standby_->usable()) stale = std::move(standby_);
    if (standby_ && same_hierarchies(standby_->cgroups(), planned)) taken = std::move(standby_);
    standby_wanted_ = standby_failures_ < 3;
    if (standby_wanted_ && !standby_worker_.joinable()) {
      standby_worker_ = std::thread([this] { standby_loop(); });
    }
  }
  standby_wakeup_.notify_all();
  return taken;
}

std::string LinuxBackend::ready_standby() {
  std::lock_guard lock(standby_mutex_);
  return standby_ && standby_->usable() ? standby_->instance_id() : std::string();
}

// Keeps one standby monitor ready. Runs on its own thread because a standby dies with the
// thread that spawned it (PR_SET_PDEATHSIG is about the parent *thread*), so that thread must
// live as long as the backend.
void LinuxBackend::standby_loop() {
  std::unique_lock lock(standby_mutex_);
  while (!standby_stopping_) {
    standby_wakeup_.wait(lock, [&] {
      return standby_stopping_ || (standby_wanted_ && standby_ == nullptr);
    });
    if (standby_stopping_) break;
    lock.unlock();
    std::unique_ptr<StandbyMonitor> prepared;
    try {
      StandbyMonitor::Options options;
      options.init_path = init_path();
      options.store = &store_;
      options.layout = privileged_ ? &layout_ : nullptr;
      options.limits = privileged_ ? config_->default_resources : ResourceLimits{};
      options.per_command_cgroups = config_->per_command_cgroups;
      options.guest_root = config_->uid_base;
      options.timeout = config_->start_timeout;
      store_.ensure_layout();
      prepared = StandbyMonitor::prepare(options);
    } catch (...) {
      // Acquires fall back to starting a monitor themselves; after three failures in a row the
      // standby is given up for this backend.
    }
    lock.lock();
    if (prepared) {
      standby_failures_ = 0;
      if (standby_stopping_) break;  // `prepared` is discarded as it goes out of scope
      standby_ = std::move(prepared);
    } else if (++standby_failures_ >= 3) {
      standby_wanted_ = false;
    } else {
      standby_wakeup_.wait_for(lock, std::chrono::seconds(1), [&] { return standby_stopping_; });
    }
  }
}

std::optional<CapabilitySet> LinuxBackend::capabilities() const {
  return CapabilitySet{Capability::exec,       Capability::run_code,   Capability::files_in,
                       Capability::files_out,  Capability::files_list, Capability::files_delete,
                       Capability::host_tools};
}

const std::string& LinuxBackend::seccomp_filter() {
  std::call_once(seccomp_once_, [this] { seccomp_ = compile_seccomp_filter(); });
  return seccomp_;
}

const std::filesystem::path& LinuxBackend::init_path() {
  std::call_once(init_once_, [this] { init_path_ = locate_init(config_->init_path); });
  return init_path_;
}

std::shared_ptr<std::mutex> LinuxBackend::identity_mutex(const std::string& id) {
  std::lock_guard lock(cache_mutex_);
  auto& slot = identity_mutexes_[id];
  if (!slot) slot = std::make_shared<std::mutex>();
  return slot;
}

ResourceLimits LinuxBackend::effective_resources(const SandboxSpec& spec) const {
  const ResourceLimits& asked = spec.resources();
  const ResourceLimits& defaults = config_->default_resources;
  if (!privileged_) {
    if (asked.memory_bytes || asked.pids || asked.cpu_millis) {
      throw InvalidArgument(
          "resources: the linux backend enforces memory, pids and CPU limits with cgroups, which "
          "need root; this process is not root, so a spec that asks for limits is refused",
          "resources");
    }
    return {};
  }
  ResourceLimits limits;
  limits.memory_bytes = asked.memory_bytes ? asked.memory_bytes : defaults.memory_bytes;
  limits.pids = asked.pids ? asked.pids : defaults.pids;
  limits.cpu_millis = asked.cpu_millis ? asked.cpu_millis : defaults.cpu_millis;
  auto refuse = [](const char* leg, const char* controller) {
    throw InvalidArgument(std::string("resources.") + leg + ": this host has no usable " +
                              controller + " cgroup controller, so the limit cannot be enforced",
                          std::string("resources.") + leg);
  };
  if (limits.memory_bytes && !layout_.can_limit_memory()) refuse("memory_bytes", "memory");
  if (limits.pids && !layout_.can_limit_pids()) refuse("pids", "pids");
  if (limits.cpu_millis && !layout_.can_limit_cpu()) refuse("cpu_millis", "cpu");
  if (limits.memory_bytes && *limits.memory_bytes < (std::uint64_t{4} << 20)) {
    throw InvalidArgument("resources.memory_bytes: at least 4 MiB", "resources.memory_bytes");
  }
  if (limits.pids && *limits.pids < 2) {
    throw InvalidArgument("resources.pids: at least 2 (the init and one command)",
                          "resources.pids");
  }
  if (limits.cpu_millis && *limits.cpu_millis < 10) {
    throw InvalidArgument("resources.cpu_millis: at least 10", "resources.cpu_millis");
  }
  return limits;
}

std::shared_ptr<Sandbox> LinuxBackend::acquire(const SandboxKey& key, const SandboxSpec& spec) {
  if (spec.egress() == Egress::unrestricted) {
    throw InvalidArgument(
        "egress: the linux backend never gives a sandbox the host's network (unrestricted); "
        "it runs closed, or allowlisted through the host's egress proxy",
        "egress");
  }
  const ResourceLimits resources = effective_resources(spec);
  const std::string image_reference =
      spec.image_id() ? *spec.image_id() : (spec.image() ? *spec.image() : config_->default_image);
  const std::string posture = spec.egress_posture();
  const std::string id = sandbox_identity(key, spec.kind(), posture);

  auto mutex = identity_mutex(id);
  std::lock_guard in_process(*mutex);
  {
    std::lock_guard lock(cache_mutex_);
    if (auto cached = cache_[id].lock(); cached && cached->is_live()) return cached;
  }
  store_.ensure_layout();
  UniqueFd across_processes = store_.lock(id);
  if (auto record = store_.read(id)) {
    // A record without a control secret predates it: its sandbox is replaced, never adopted.
    if (record->state == "running" && !record->control_secret.empty() &&
        init_is_alive(*record)) {
      auto adopted = adopt(*record, key);
      if (adopted && adopted->channel().ping()) {
        if (spec.egress() == Egress::allowlist) listen_for_egress(id, spec, *record);
        std::lock_guard lock(cache_mutex_);
        cache_[id] = adopted;
        return adopted;
      }
    }
    destroy_locked(id, record);
  } else if (::access(store_.sandbox_dir(id).c_str(), F_OK) == 0) {
    destroy_locked(id, std::nullopt);  // leftovers of a crash before the first record
  }
  const std::filesystem::path store_root =
      config_->image_store.empty() ? store_.base().parent_path() / "images" : config_->image_store;
  ResolvedImage image = resolve_image(image_reference, {store_root, config_->uid_base});
  auto created = create(id, key, spec, resources, std::move(image));
  if (spec.egress() == Egress::allowlist) {
    try {
      listen_for_egress(id, spec, created->record());
    } catch (...) {
      destroy_locked(id, created->record());
      throw;
    }
  }
  std::lock_guard lock(cache_mutex_);
  cache_[id] = created;
  return created;
}

std::shared_ptr<LinuxSandbox> LinuxBackend::adopt(const RecordFile& record,
                                                  const SandboxKey& key) {
  UniqueFd pidfd = open_verified_init(record);
  if (!pidfd) return nullptr;
  return std::make_shared<LinuxSandbox>(config_, record, key,
                                        store_.sandbox_dir(record.id) / "control.sock",
                                        std::move(pidfd));
}

std::shared_ptr<LinuxSandbox> LinuxBackend::create(const std::string& id, const SandboxKey& key,
                                                   const SandboxSpec& spec,
                                                   const ResourceLimits& resources,
                                                   ResolvedImage image) {
  const std::filesystem::path directory = store_.sandbox_dir(id);
  const std::string& work_dir = spec.work_dir();
  if (normalize_guest_path(work_dir) != work_dir || work_dir == "/") {
    throw InvalidArgument("work_dir '" + work_dir +
                              "' must be a normalised absolute path below / (no '.', '..', "
                              "doubled or trailing slashes)",
                          "work_dir");
  }
  for (const char* reserved : {"/proc", "/sys", "/dev", kHostToolsGuestDir}) {
    if (work_dir == reserved || work_dir.rfind(std::string(reserved) + "/", 0) == 0) {
      throw InvalidArgument("work_dir '" + work_dir + "' is inside " + reserved +
                                ", which the sandbox provides itself",
                            "work_dir");
    }
  }
  if (image.kind == RootKind::host) check_host_work_dir(work_dir);
  const std::string& filter = seccomp_filter();
  const std::filesystem::path& helper = init_path();

  RecordFile record;
  record.id = id;
  record.instance_id = "lx-" + random_hex(8);
  record.kind = spec.kind();
  record.labels = sandbox_labels(key, spec);
  record.egress_posture = spec.egress_posture();
  record.state = "creating";
  record.image = image.reference;
  record.work_dir = work_dir;
  record.boot_id = current_boot_id();
  record.created_at_ms = unix_now_ms();
  record.privileged = privileged_;
  record.uid_base = privileged_ ? config_->uid_base : static_cast<std::uint32_t>(::geteuid());
  const std::string secret = random_bytes(protocol::kSecretBytes);
  record.control_secret = to_hex(secret);
  InstanceCgroups cgroups;
  if (privileged_) {
    cgroups = plan_instance_cgroups(layout_, record.instance_id, resources,
                                    config_->per_command_cgroups);
  }
  std::unique_ptr<StandbyMonitor> standby = take_standby(cgroups);
  if (standby) {
    record.instance_id = standby->instance_id();
    cgroups = standby->cgroups();
  }
  record.cgroups = cgroups.directories;

  make_directory(directory, 0700);
  try {
    store_.write(record);  // first: whatever happens next, purge can find it
    if (standby) {
      standby->forget_record();  // the sandbox's record names the cgroups now
      if (privileged_) apply_instance_limits(layout_, cgroups, resources);
    } else if (privileged_) {
      create_instance_cgroups(layout_, cgroups, resources, config_->uid_base);
    }

    SpawnConfig config;
    config.instance_id = record.instance_id;
    config.control_secret = secret;
    config.root_mount = (directory / "root").string();
    make_directory(config.root_mount, 0755);
    config.root_kind = image.kind;
    config.guest_work_dir = work_dir;
    if (image.kind == RootKind::host) {
      config.work_storage = (directory / "work").string();
      make_directory(config.work_storage, 0755);
      if (privileged_) hand_to_guest(config.work_storage, config_->uid_base);
      config.hidden_paths.push_back(store_.base().parent_path().string());
    } else {
      config.lower_dir = image.rootfs.string();
      config.upper_dir = (directory / "overlay-upper").string();
      config.overlay_work_dir = (directory / "overlay-work").string();
      make_directory(config.upper_dir, 0755);
      make_directory(config.overlay_work_dir, 0700);
      // The merged "/" takes the upper directory's owner and mode: make them the image's own.
      struct stat lower {};
      if (::stat(config.lower_dir.c_str(), &lower) == 0) {
        if (::chown(config.upper_dir.c_str(), lower.st_uid, lower.st_gid) != 0 ||
            ::chmod(config.upper_dir.c_str(), lower.st_mode & 07777) != 0) {
          throw BackendError("the sandbox's state could not be created",
                             "overlay upper: " + std::string(std::strerror(errno)));
        }
      }
    }
    // Where host-tool runs put their listening sockets (see LinuxSandbox::socket_channel).
    config.host_tools_dir = (directory / "host-tools").string();
    make_directory(config.host_tools_dir, 0755);
    if (spec.egress() == Egress::allowlist) {
      config.flags |= kEgressBridge;
      config.egress_dir = (directory / "egress").string();
      make_directory(config.egress_dir, 0755);
    }
    if (privileged_) {
      config.flags |= kMapFullRange;
      config.uid_base = config_->uid_base;
      config.gid_base = config_->uid_base;
      config.id_count = 65536;
      config.cgroup_procs = cgroups.procs_files;
      config.command_cgroup = cgroups.command_parent;
    } else {
      config.uid_base = static_cast<std::uint32_t>(::geteuid());
      config.gid_base = static_cast<std::uint32_t>(::getegid());
      config.id_count = 1;
    }
    config.max_commands = config_->max_concurrent_commands;
    config.seccomp_filter = filter;
    config.resource_limits = guest_resource_limits();

    UniqueFd listener = listen_control_socket(directory / "control.sock");
    std::optional<int> pin;
    if (image.pin) pin = image.pin.get();
    if (pin) config.flags |= kHasImagePin;
    std::optional<LaunchedInit> launched;
    if (standby && standby->usable()) {
      launched = standby->claim(config, listener.get(), pin, config_->start_timeout);
    } else {
      // No standby (or it died): start a monitor now; it joins the same cgroups itself.
      standby.reset();
      launched = launch_init(helper, config, listener.get(), pin, config_->start_timeout);
    }
    record.init_pid = launched->pid;
    record.init_start_time = launched->start_time;
    record.state = "running";
    store_.write(record);
  } catch (...) {
    destroy_locked(id, record);
    throw;
  }
  UniqueFd pidfd = open_verified_init(record);
  if (!pidfd) {
    destroy_locked(id, record);
    throw BackendError("the sandbox's init exited right after it started", record.instance_id);
  }
  return std::make_shared<LinuxSandbox>(config_, record, key, directory / "control.sock",
                                        std::move(pidfd));
}

void LinuxBackend::destroy_locked(const std::string& id,
                                  const std::optional<RecordFile>& record) noexcept {
  try {
    {
      std::lock_guard lock(cache_mutex_);
      auto found = cache_.find(id);
      if (found != cache_.end()) {
        if (auto live = found->second.lock()) live->mark_disposed();
        cache_.erase(found);
      }
    }
    if (record) {
      if (UniqueFd init = open_verified_init(*record)) {
        // SIGKILL to a pid namespace's init ends every process in it; its exit is reported once
        // they are all gone.
        sys::pidfd_send_signal(init.get(), SIGKILL);
        struct pollfd exited {init.get(), POLLIN, 0};
        ::poll(&exited, 1, static_cast<int>(std::chrono::milliseconds(kKillPatience).count()));
      }
      if (!record->cgroups.empty()) destroy_cgroups(record->cgroups, kKillPatience);
    }
    stop_egress(id);
    remove_state_directory(store_, id);
  } catch (...) {
  }
}

void LinuxBackend::listen_for_egress(const std::string& id, const SandboxSpec& spec,
                                     const RecordFile& record) {
  EgressPolicy policy = config_->egress_policy;
  policy.allowed_hosts = spec.egress_allow();
  // The guest's init connects as the guest's root: as root that is uid_base, which owns the
  // socket (0600), so no other host user — and no guest user but root — can use it directly.
  UnixSocketOptions socket;
  if (record.privileged) {
    socket.owner_uid = record.uid_base;
    socket.owner_gid = record.uid_base;
  }
  // An older listener of ours for this sandbox (its socket file was since replaced by another
  // process, or this is a re-adopt) serves no one: it goes before the new bind.
  stop_egress(id);
  std::lock_guard lock(egress_mutex_);
  if (!egress_proxy_) {
    EgressProxy::Options options;
    options.on_decision = config_->egress_decisions;
    egress_proxy_ = std::make_unique<EgressProxy>(std::move(options));
  }
  egress_listeners_[id] = egress_proxy_->listen(store_.sandbox_dir(id) / "egress" / "egress.sock",
                                                std::move(policy), record.instance_id, socket);
}

void LinuxBackend::stop_egress(const std::string& id) noexcept {
  EgressListener closing;
  {
    std::lock_guard lock(egress_mutex_);
    auto found = egress_listeners_.find(id);
    if (found == egress_listeners_.end()) return;
    closing = std::move(found->second);
    egress_listeners_.erase(found);
  }
  closing.close();  // outside the lock: it waits for the event loop
}

bool LinuxBackend::destroy_identity(
    const std::string& id, const std::function<bool(const RecordFile&)>& matches) noexcept {
  try {
    auto mutex = identity_mutex(id);
    std::lock_guard in_process(*mutex);
    UniqueFd across_processes = store_.lock(id);
    auto record = store_.read(id);
    if (!record) {
      // A directory without a record is the residue of a crash before anything ran: it matches
      // no key, and only purge_all removes it.
      return false;
    }
    if (!matches(*record)) return false;
    destroy_locked(id, record);
    return true;
  } catch (...) {
    return false;
  }
}

template <typename Match>
int LinuxBackend::destroy_matching(Match match) noexcept {
  int count = 0;
  try {
    for (const auto& id : store_.ids()) {
      auto record = store_.read(id);
      if (!record || !match(*record)) continue;
      if (destroy_identity(id, match)) ++count;
    }
  } catch (...) {
  }
  return count;
}

void LinuxBackend::dispose(const SandboxKey& key) noexcept {
  try {
    const std::map<std::string, std::string> wanted{
        {"airlock.scope", map_label_value(key.scope)},
        {"airlock.thread", map_label_value(key.thread_id)},
        {"airlock.agent", map_label_value(key.agent_dir)}};
    destroy_matching([&](const RecordFile& record) { return matches_labels(record, wanted); });
  } catch (...) {
  }
}

bool LinuxBackend::dispose_kind(const SandboxKey& key, std::string_view kind,
                                std::optional<std::string_view> instance_id) noexcept {
  try {
    const std::map<std::string, std::string> wanted{
        {"airlock.scope", map_label_value(key.scope)},
        {"airlock.thread", map_label_value(key.thread_id)},
        {"airlock.agent", map_label_value(key.agent_dir)},
        {"airlock.kind", map_label_value(kind)}};
    auto match = [&](const RecordFile& record) {
      return matches_labels(record, wanted) &&
             (!instance_id || record.instance_id == *instance_id);
    };
    destroy_matching(match);
    for (const auto& id : store_.ids()) {
      auto record = store_.read(id);
      if (record && match(*record)) return false;
    }
    return true;
  } catch (...) {
    return false;
  }
}

int LinuxBackend::dispose_scope(std::string_view scope,
                                std::optional<std::string_view> thread_id) noexcept {
  try {
    std::map<std::string, std::string> wanted{{"airlock.scope", map_label_value(scope)}};
    if (thread_id) wanted["airlock.thread"] = map_label_value(*thread_id);
    return destroy_matching(
        [&](const RecordFile& record) { return matches_labels(record, wanted); });
  } catch (...) {
    return 0;
  }
}

std::vector<SandboxRecord> LinuxBackend::list_sandboxes() {
  std::vector<SandboxRecord> out;
  for (const auto& id : store_.ids()) {
    auto record = store_.read(id);
    SandboxRecord entry;
    entry.backend = "linux";
    if (!record) {
      entry.instance_id = id;
      entry.state = "incomplete";
      out.push_back(std::move(entry));
      continue;
    }
    entry.instance_id = record->instance_id;
    entry.kind = record->kind;
    entry.labels = record->labels;
    entry.egress_posture = record->egress_posture;
    entry.state = init_is_alive(*record) ? record->state : std::string("dead");
    entry.created_at = std::chrono::system_clock::time_point(
        std::chrono::milliseconds(record->created_at_ms));
    out.push_back(std::move(entry));
  }
  return out;
}

int LinuxBackend::purge_all() noexcept {
  int count = 0;
  try {
    {
      std::lock_guard lock(standby_mutex_);
      standby_.reset();
    }
    StandbyMonitor::reclaim_all(store_);
    for (const auto& id : store_.ids()) {
      auto mutex = identity_mutex(id);
      std::lock_guard in_process(*mutex);
      UniqueFd across_processes = store_.lock(id);
      auto record = store_.read(id);
      destroy_locked(id, record);
      if (record) ++count;
    }
  } catch (...) {
  }
  return count;
}

std::shared_ptr<SandboxBackend> make_backend_instance(LinuxBackendConfig config) {
  return std::make_shared<LinuxBackend>(std::move(config));
}

}  // namespace airlock::linux_backend

namespace airlock {

std::shared_ptr<SandboxBackend> make_linux_backend(LinuxBackendConfig config) {
  return linux_backend::make_backend_instance(std::move(config));
}

std::filesystem::path default_linux_state_dir() { return default_state_dir(); }

}  // namespace airlock
