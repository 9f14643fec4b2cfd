#include "backends/linux/linux_backend.hpp"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <limits>

#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "airlock/paths.hpp"
#include "airlock/state_dir.hpp"
#include "backends/kit/contained.hpp"
#include "backends/kit/labels.hpp"
#include "backends/linux/control_channel.hpp"
#include "backends/linux/id_slots.hpp"
#include "backends/linux/launcher.hpp"
#include "backends/linux/protocol.hpp"
#include "backends/linux/seccomp_policy.hpp"
#include "backends/linux/syscalls.hpp"
#include "backends/linux/tree_removal.hpp"
#include "base/syscall_error.hpp"

namespace airlock::linux_backend {
namespace {

constexpr auto kKillPatience = std::chrono::seconds(10);
constexpr std::uint64_t kLockedBytesPerProcess = std::uint64_t{16} << 20;

std::int64_t monotonic_ns() {
  struct timespec now {};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

std::int64_t unix_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A new directory of exactly `mode`, whatever this process's umask.
void make_directory(const std::filesystem::path& path, mode_t mode) {
  if (::mkdir(path.c_str(), 0700) != 0) {
    throw BackendError("the sandbox's state could not be created",
                       base::errno_error("mkdir", path.string()));
  }
  if (::chmod(path.c_str(), mode) != 0) {
    throw BackendError("the sandbox's state could not be created",
                       base::errno_error("chmod", path.string()));
  }
}

// Removes <base>/<id> without following anything the guest left in it.
void remove_state_directory(const StateStore& store, const std::string& id) {
  base::UniqueFd base(::open(store.base().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!base) return;
  (void)remove_tree(base.get(), id);
}

// What every command runs under. RLIMIT_MEMLOCK bounds what one process may pin (locked pages
// are charged to the sandbox's memory cgroup as well).
std::vector<ResourceLimit> guest_resource_limits() {
  // A hard limit can only be lowered: never ask for more than this process has.
  auto at_most = [](int resource, std::uint64_t wanted) {
    struct rlimit current {};
    ::getrlimit(resource, &current);
    return current.rlim_max == RLIM_INFINITY ? wanted
                                             : std::min<std::uint64_t>(wanted, current.rlim_max);
  };
  const std::uint64_t files = at_most(RLIMIT_NOFILE, 4096);
  const std::uint64_t locked = at_most(RLIMIT_MEMLOCK, kLockedBytesPerProcess);
  std::vector<ResourceLimit> limits{
      {static_cast<std::uint32_t>(RLIMIT_CORE), 0, 0},
      {static_cast<std::uint32_t>(RLIMIT_NOFILE), files, files},
      {static_cast<std::uint32_t>(RLIMIT_MEMLOCK), locked, locked},
  };
  return limits;
}

// The ceilings the init writes into its own user namespace (/proc/sys/user). No user namespace
// is made inside (the filter refuses it too: two locks) — and without one, no other kind of
// namespace either, since making one takes CAP_SYS_ADMIN, which only a new user namespace
// would give a guest. Unprivileged, every sandbox's namespace is created by the calling user,
// so what they hold in that user's inotify pool is shared with the user's own processes: each
// sandbox gets a quarter of it at most.
std::vector<NamespaceLimit> namespace_limits(bool privileged) {
  std::vector<NamespaceLimit> limits{{"max_user_namespaces", 0}};
  if (!privileged) {
    auto quarter = [](const char* path, std::uint64_t fallback) {
      std::ifstream file(path);
      std::uint64_t value = 0;
      if (!(file >> value) || value == 0) value = fallback;
      return std::max<std::uint64_t>(1, value / 4);
    };
    limits.push_back(
        {"max_inotify_instances", quarter("/proc/sys/fs/inotify/max_user_instances", 128)});
    limits.push_back(
        {"max_inotify_watches", quarter("/proc/sys/fs/inotify/max_user_watches", 8192)});
  }
  return limits;
}

// One inode per 4 KiB of storage, at least 4096: small files are the common case (a node_modules
// tree), and an inode costs kernel memory the sandbox's memory cgroup is charged for.
std::uint64_t storage_inodes(std::uint64_t storage_bytes) {
  return std::max<std::uint64_t>(4096, storage_bytes / 4096);
}

bool is_host_root_directory(const std::string& name) {
  for (const char* shown : kHostRootDirectories) {
    if (name == shown) return true;
  }
  return false;
}

// With image "host", the work dir must be makeable: under /tmp or /run (the sandbox's own),
// under a first component the shown host root lacks (made in the root's tmpfs), or an existing
// host directory under a shown one, reached without links (covered by the work storage).
// Anything else would need a new directory in the read-only host root.
void check_host_work_dir(const std::string& work_dir) {
  const std::string first = work_dir.substr(1, work_dir.find('/', 1) - 1);
  if (first == "tmp" || first == "run") return;
  struct stat info {};
  if (!is_host_root_directory(first) || ::lstat(("/" + first).c_str(), &info) != 0) return;
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
                                "first component the host root shown to the guest lacks (the "
                                "default /maf-sandbox/work), or one under /tmp",
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

// The working directory a sandbox may have: normalised, below /, outside what the sandbox
// provides itself, and (image "host") outside the host directories shown read-only.
void check_work_dir(const std::string& work_dir, RootKind root) {
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
  if (root == RootKind::host) check_host_work_dir(work_dir);
}

// Kernel memory one open file costs while a mapping holds it after its descriptor is closed
// (struct file and its vm_area_struct, both charged to the memory cgroup): ~400 bytes measured
// on 6.18; the figure below is lower on purpose, so the count it gives errs high.
constexpr std::uint64_t kKernelBytesPerHeldFile = 320;

std::uint64_t host_file_max() {
  std::ifstream file("/proc/sys/fs/file-max");
  std::uint64_t value = 0;
  if (!(file >> value)) return std::numeric_limits<std::uint64_t>::max();
  return value;
}

}  // namespace

namespace {

// The first range of at least kIdsPerSandbox ids for `user` (its name or uid) in a subid file.
std::optional<std::uint32_t> subordinate_range(const std::filesystem::path& file,
                                               const std::string& name, const std::string& uid) {
  std::ifstream lines(file);
  std::string line;
  while (std::getline(lines, line)) {
    const auto first = line.find(':');
    const auto second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string owner = line.substr(0, first);
    if (owner != name && owner != uid) continue;
    try {
      const unsigned long long start = std::stoull(line.substr(first + 1, second - first - 1));
      const unsigned long long count = std::stoull(line.substr(second + 1));
      if (count >= kIdsPerSandbox && start > 0 && start + kIdsPerSandbox <= 0xFFFFFFFFull) {
        return static_cast<std::uint32_t>(start);
      }
    } catch (const std::exception&) {
    }
  }
  return std::nullopt;
}

// A setuid-root helper where the shadow package puts it.
std::string setuid_helper(const char* name) {
  for (const char* directory : {"/usr/bin", "/bin", "/usr/local/bin"}) {
    const std::string path = std::string(directory) + "/" + name;
    struct stat info {};
    if (::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) && info.st_uid == 0 &&
        (info.st_mode & S_ISUID) != 0) {
      return path;
    }
  }
  return {};
}

}  // namespace

std::optional<SubordinateIds> find_subordinate_ids(const std::filesystem::path& subuid,
                                                   const std::filesystem::path& subgid) {
  struct passwd entry {};
  struct passwd* found = nullptr;
  char buffer[4096];
  const uid_t uid = ::getuid();
  std::string name;
  if (::getpwuid_r(uid, &entry, buffer, sizeof buffer, &found) == 0 && found != nullptr) {
    name = found->pw_name;
  }
  const auto users = subordinate_range(subuid, name, std::to_string(uid));
  const auto groups = subordinate_range(subgid, name, std::to_string(uid));
  SubordinateIds ids;
  ids.uid_mapper = setuid_helper("newuidmap");
  ids.gid_mapper = setuid_helper("newgidmap");
  if (!users || !groups || ids.uid_mapper.empty() || ids.gid_mapper.empty()) return std::nullopt;
  ids.uid_start = *users;
  ids.gid_start = *groups;
  return ids;
}

void check_file_table_share(std::optional<std::uint64_t> memory_bytes, std::uint64_t file_max) {
  // Descriptors are bounded by RLIMIT_NOFILE, but a file mapped and closed stays open without
  // one, and the only bound on those is the memory the kernel spends on them. A sandbox whose
  // memory limit could hold more than half of the host's file table could make every other
  // process's open() fail (ENFILE): refused, saying how to fix the host.
  if (!memory_bytes) return;  // no memory limit: nothing of the host is promised (see docs)
  const std::uint64_t held = *memory_bytes / kKernelBytesPerHeldFile;
  if (held <= file_max / 2) return;
  const std::uint64_t most = (file_max / 2) * kKernelBytesPerHeldFile;
  throw InvalidArgument(
      "resources.memory_bytes: a sandbox with " + std::to_string(*memory_bytes) +
          " bytes of memory could keep up to " + std::to_string(held) +
          " files open, more than half of this host's file table (fs.file-max = " +
          std::to_string(file_max) +
          "), and so make open() fail for every other process and sandbox; raise the table "
          "(sysctl -w fs.file-max=9223372036854775807, systemd's default) or ask for at most " +
          std::to_string(most) + " bytes",
      "resources.memory_bytes");
}

LinuxBackend::LinuxBackend(LinuxBackendConfig config)
    : config_(std::make_shared<const LinuxBackendConfig>(std::move(config))),
      store_(config_->state_dir.empty() ? default_linux_state_dir() : config_->state_dir),
      snapshots_(store_.base() / "snapshots"),
      privileged_(::geteuid() == 0),
      egress_(config_->egress_decisions) {
  if (config_->max_concurrent_commands == 0) {
    throw InvalidArgument("max_concurrent_commands must be at least 1", "max_concurrent_commands");
  }
  if (config_->uid_base == 0 || config_->uid_base > 0xFFFFFFFEu - 65535u) {
    throw InvalidArgument("uid_base must be above 0 and leave room for 65536 ids", "uid_base");
  }
  // As root, cgroups are made under each hierarchy's airlock/ subtree (or the delegated
  // directories, when given); unprivileged, only in directories delegated to this user.
  cgroups_ = privileged_ || !config_->delegated_cgroups.empty();
  if (!privileged_ && config_->subordinate_ids) subordinate_ = find_subordinate_ids();
  if (cgroups_) layout_ = CgroupLayout::detect(config_->delegated_cgroups);
  if (config_->pool.size > 0 && cgroups_) {
    pool_ = std::make_unique<WarmPool>(
        config_->pool, [this](const PoolShape& shape) { return build_pool_member(shape); },
        [this](PoolMember& member) { discard_pool_member(member); });
    if (config_->pool.prewarm) {
      try {
        const SandboxSpec spec(SandboxSpec::Fields{.kind = "pool"});
        const ResolvedImage image = resolve(config_->default_image);
        check_work_dir(spec.work_dir(), image.kind);
        pool_->want(pool_shape(config_->default_image, image, spec, effective_resources(spec)));
      } catch (const std::exception& error) {
        spdlog::warn("linux: the warm pool cannot prewarm the default shape: {}",
                     error_detail(error));
      }
    }
  }
}

LinuxBackend::~LinuxBackend() {
  pool_.reset();  // its thread builds through this backend
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
    // The next standby is made once this acquire and its first command are likely past (the
    // warm pool's reasoning, warm_pool.cpp): a spawn and cgroup work on another core would
    // slow both.
    standby_quiet_until_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(25);
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
    standby_wakeup_.wait(
        lock, [&] { return standby_stopping_ || (standby_wanted_ && standby_ == nullptr); });
    while (!standby_stopping_ && std::chrono::steady_clock::now() < standby_quiet_until_) {
      standby_wakeup_.wait_until(lock, standby_quiet_until_);
    }
    if (standby_stopping_) break;
    lock.unlock();
    std::unique_ptr<StandbyMonitor> prepared;
    try {
      StandbyMonitor::Options options;
      options.init_path = init_path();
      options.store = &store_;
      options.layout = cgroups_ ? &layout_ : nullptr;
      options.limits = cgroups_ ? config_->default_resources : ResourceLimits{};
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
  CapabilitySet capabilities{Capability::exec,         Capability::run_code,
                             Capability::files_in,     Capability::files_out,
                             Capability::files_list,   Capability::files_delete,
                             Capability::host_tools};
  // Root only: unprivileged, the host user cannot read what a guest's root made unreadable.
  if (privileged_) capabilities.insert(Capability::snapshot);
  return capabilities;
}

std::optional<SnapshotContent> LinuxBackend::snapshot_content() const {
  if (!privileged_) return std::nullopt;
  return SnapshotContent::filesystem;
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
  return cache_.mutex_for(id);
}

ResourceLimits LinuxBackend::effective_resources(const SandboxSpec& spec) const {
  const ResourceLimits& asked = spec.resources();
  const ResourceLimits& defaults = config_->default_resources;
  // The storage bound is a tmpfs size: enforced the same way as root or not.
  const std::optional<std::uint64_t> disk =
      asked.disk_bytes ? asked.disk_bytes : defaults.disk_bytes;
  if (!disk) {
    throw InvalidArgument(
        "resources.disk_bytes: the linux backend keeps everything a guest "
        "writes in a bounded store, so it needs a size (the config's "
        "disk_bytes is null and the spec names none)",
        "resources.disk_bytes");
  }
  if (*disk < (std::uint64_t{1} << 20)) {
    throw InvalidArgument("resources.disk_bytes: at least 1 MiB", "resources.disk_bytes");
  }
  if (!cgroups_) {
    // Without cgroups nothing would bound a guest's memory or processes: a fork or memory bomb
    // would take what the host has. Refused, rather than run with less safety than as root.
    throw InvalidArgument(
        "the linux backend bounds every sandbox's memory and processes with cgroups; this "
        "process is not root and no cgroups are delegated to it, so it cannot start a sandbox "
        "as safely as root would: delegate a memory and a pids cgroup to this user and name "
        "them in the config's delegated_cgroups (docs/backends/linux.md, Unprivileged hosts), "
        "or run as root",
        "delegated_cgroups");
  }
  ResourceLimits limits;
  limits.disk_bytes = disk;
  limits.memory_bytes = asked.memory_bytes ? asked.memory_bytes : defaults.memory_bytes;
  limits.pids = asked.pids ? asked.pids : defaults.pids;
  limits.cpu_millis = asked.cpu_millis ? asked.cpu_millis : defaults.cpu_millis;
  auto refuse = [](const char* leg, const char* controller) {
    throw InvalidArgument(std::string("resources.") + leg + ": this host has no usable " +
                              controller + " cgroup controller, so the limit cannot be enforced",
                          std::string("resources.") + leg);
  };
  if (!privileged_ && (!limits.memory_bytes || !limits.pids)) {
    throw InvalidArgument(
        "resources: unprivileged, every sandbox needs a memory and a pids "
        "limit (the config's memory_bytes and pids may not be null)",
        "resources");
  }
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
  check_file_table_share(limits.memory_bytes, host_file_max());
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
  if (auto cached = cache_.find(id, [](LinuxSandbox& held) { return held.is_live(); })) {
    return cached;
  }
  // The state directory is checked in full once: from then on only root and this user can
  // change what lies beneath it (prepare_state_directory), so later acquires only look that it
  // is still there (an operator may have removed it), not at every ancestor again.
  if (!layout_checked_.load(std::memory_order_acquire) ||
      ::access((store_.base() / "locks").c_str(), F_OK) != 0) {
    store_.ensure_layout();
    layout_checked_.store(true, std::memory_order_release);
  }
  // Standbys of processes that died without disposing of them (and so never will): their
  // records and empty cgroups are reclaimed by whichever backend starts next, not only by a
  // purge of everything.
  std::call_once(orphans_once_, [this] {
    StandbyMonitor::reclaim_orphans(store_);
    reclaim_orphaned_pool();
    snapshots_.reclaim_staging();
  });
  base::UniqueFd across_processes = store_.lock(id);
  if (auto record = store_.read(id)) {
    // A record without a control secret predates it: its sandbox is replaced, never adopted.
    if (record->state == "running" && !record->control_secret.empty() && init_is_alive(*record)) {
      auto adopted = adopt(*record, key);
      if (adopted && adopted->channel().ping()) {
        if (spec.egress() == Egress::allowlist) listen_for_egress(id, spec, *record);
        cache_.remember(id, adopted);
        return adopted;
      }
    }
    destroy_locked(id, record);
  } else if (::access(store_.sandbox_dir(id).c_str(), F_OK) == 0) {
    destroy_locked(id, std::nullopt);  // leftovers of a crash before the first record
  }
  const ResolvedImage image = resolve(image_reference);
  std::shared_ptr<LinuxSandbox> created;
  if (pool_) {
    // Checked here, as create would: a spec the backend refuses is refused before the pool
    // learns its shape.
    check_work_dir(spec.work_dir(), image.kind);
    if (auto member = pool_->take(pool_shape(image_reference, image, spec, resources))) {
      created = claim_pooled(std::move(*member), id, key, spec);
    }
  }
  if (!created) created = create(id, key, spec, resources, image);
  if (spec.egress() == Egress::allowlist) {
    try {
      listen_for_egress(id, spec, created->record());
    } catch (...) {
      destroy_locked(id, created->record());
      throw;
    }
  }
  cache_.remember(id, created);
  return created;
}

std::shared_ptr<LinuxSandbox> LinuxBackend::adopt(const RecordFile& record, const SandboxKey& key) {
  base::UniqueFd pidfd = open_verified_init(record);
  if (!pidfd) return nullptr;
  return std::make_shared<LinuxSandbox>(config_, record, key,
                                        store_.sandbox_dir(record.id) / "control.sock",
                                        std::move(pidfd), init_path());
}

// What the init is told: the sandbox's root, storage, ids, cgroups, limits and filter.
SpawnConfig LinuxBackend::spawn_config(const RecordFile& record, const std::string& secret,
                                       bool egress_bridge, const ResourceLimits& resources,
                                       const ResolvedImage& image, const InstanceCgroups& cgroups) {
  const std::filesystem::path directory = store_.sandbox_dir(record.id);
  const std::uint32_t guest_root = record.uid_base;
  SpawnConfig config;
  config.instance_id = record.instance_id;
  config.control_secret = secret;
  config.sandbox_dir = directory.string();
  config.root_kind = image.kind;
  config.guest_work_dir = record.work_dir;
  config.storage_bytes = *resources.disk_bytes;
  config.storage_inodes = storage_inodes(*resources.disk_bytes);
  config.max_ptys = config_->max_ptys;
  if (image.kind == RootKind::host) {
    config.hidden_paths.push_back(store_.base().parent_path().string());
  } else {
    config.lower_dir = image.rootfs.string();
    // Image content is owned by uid_base+k (the store's ownership map, and how a rootfs
    // directory for guests is made): shown to this sandbox as its own ids.
    if (privileged_) config.image_uid_base = config_->uid_base;
  }
  if (egress_bridge) config.flags |= kEgressBridge;
  if (privileged_) {
    config.flags |= kMapFullRange | kHasIdSlot;
    config.uid_base = guest_root;
    config.gid_base = guest_root;
    config.id_count = kIdsPerSandbox;
  } else if (subordinate_) {
    config.flags |= kSubordinateIds;
    config.uid_base = subordinate_->uid_start;
    config.gid_base = subordinate_->gid_start;
    config.id_count = kIdsPerSandbox;
    config.uid_mapper = subordinate_->uid_mapper;
    config.gid_mapper = subordinate_->gid_mapper;
  } else {
    config.uid_base = static_cast<std::uint32_t>(::geteuid());
    config.gid_base = static_cast<std::uint32_t>(::getegid());
    config.id_count = 1;
  }
  config.cgroup_procs = cgroups.procs_files;
  config.command_cgroup = cgroups.command_parent;
  config.namespace_limits = namespace_limits(privileged_);
  config.max_commands = config_->max_concurrent_commands;
  config.seccomp_filter = seccomp_filter();
  config.resource_limits = guest_resource_limits();

  return config;
}

std::shared_ptr<LinuxSandbox> LinuxBackend::create(const std::string& id, const SandboxKey& key,
                                                   const SandboxSpec& spec,
                                                   const ResourceLimits& resources,
                                                   const ResolvedImage& image,
                                                   std::optional<int> snapshot) {
  RecordFile record;
  record.id = id;
  record.kind = spec.kind();
  record.labels = sandbox_labels(key, spec);
  record.egress_posture = spec.egress_posture();
  record.work_dir = spec.work_dir();
  base::UniqueFd pidfd = build_instance(record, resources, image,
                                        spec.egress() == Egress::allowlist, std::nullopt, snapshot);
  return std::make_shared<LinuxSandbox>(config_, record, key,
                                        store_.sandbox_dir(id) / "control.sock", std::move(pidfd),
                                        init_path());
}

base::UniqueFd LinuxBackend::build_instance(RecordFile& record, const ResourceLimits& resources,
                                            const ResolvedImage& image, bool egress_bridge,
                                            std::optional<int> leash,
                                            std::optional<int> snapshot) {
  const std::int64_t started_ns = monotonic_ns();
  std::int64_t launch_ns = 0;
  const std::string id = record.id;
  const std::filesystem::path directory = store_.sandbox_dir(id);
  check_work_dir(record.work_dir, image.kind);
  (void)seccomp_filter();  // built (and checked) before anything exists
  const std::filesystem::path& helper = init_path();
  // Every range of ids is a sandbox's own (id_slots.hpp), claimed before anything exists and
  // held by the init from its start; released by the kernel whenever this attempt fails.
  std::optional<IdSlot> slot;
  if (privileged_) {
    std::call_once(id_slots_once_,
                   [this] { id_slots_ = open_id_slot_directory(default_id_slot_directory()); });
    slot = claim_id_slot(id_slots_.get(), default_id_slot_directory(), config_->uid_base);
  }
  const std::uint32_t guest_root =
      slot ? slot->base
           : (subordinate_ ? subordinate_->uid_start : static_cast<std::uint32_t>(::geteuid()));
  if (subordinate_ && image.kind != RootKind::host) {
    throw InvalidArgument(
        "image: unprivileged, on subordinate ids, the linux backend runs image \"host\" only (the "
        "guest's root may not pass through this user's image store); use image \"host\", set "
        "subordinate_ids false, or run as root",
        "image");
  }

  record.instance_id = "lx-" + random_hex(8);
  record.state = "creating";
  record.image = image.reference;
  record.boot_id = current_boot_id();
  record.created_at_ms = unix_now_ms();
  record.privileged = privileged_;
  record.subordinate_ids = subordinate_.has_value();
  record.uid_base = guest_root;
  const std::string secret = random_bytes(protocol::kSecretBytes);
  record.control_secret = to_hex(secret);
  InstanceCgroups cgroups;
  if (cgroups_) {
    cgroups =
        plan_instance_cgroups(layout_, record.instance_id, resources, config_->per_command_cgroups);
  }
  // A resume starts a monitor of its own: the snapshot's stream travels as a descriptor a
  // standby was not started with.
  std::unique_ptr<StandbyMonitor> standby =
      leash || snapshot ? nullptr : take_standby(cgroups);
  if (standby) {
    record.instance_id = standby->instance_id();
    cgroups = standby->cgroups();
  }
  record.cgroups = cgroups.directories;

  // 0711: no other host user may list it, and the init — which walks beneath it by descriptor
  // as the guest's host uid — may pass through it to what it was handed.
  make_directory(directory, 0711);
  try {
    store_.write(record);  // first: whatever happens next, purge can find it
    if (standby) {
      standby->forget_record();  // the sandbox's record names the cgroups now
      if (cgroups_) apply_instance_limits(layout_, cgroups, resources);
    } else if (cgroups_) {
      create_instance_cgroups(layout_, cgroups, resources);
    }
    if (privileged_) delegate_instance_cgroups(cgroups, guest_root);

    make_directory(directory / "root", 0755);
    make_directory(directory / "storage", 0700);
    if (egress_bridge) make_directory(directory / "egress", 0711);
    SpawnConfig config = spawn_config(record, secret, egress_bridge, resources, image, cgroups);

    base::UniqueFd listener = listen_control_socket(directory / "control.sock");
    InitDescriptors descriptors;
    descriptors.control_listener = listener.get();
    if (image.pin) {
      config.flags |= kHasImagePin;
      descriptors.image_pin = image.pin.get();
    }
    if (slot) descriptors.id_slot = slot->lock.get();
    if (leash) {
      config.flags |= kPooled;
      descriptors.pool_leash = *leash;
    }
    if (snapshot) {
      config.flags |= kFromSnapshot;
      descriptors.snapshot = *snapshot;
    }
    std::optional<LaunchedInit> launched;
    launch_ns = monotonic_ns();
    if (standby && standby->usable()) {
      launched = standby->claim(config, descriptors, config_->start_timeout);
    } else {
      // No standby (or it died): start a monitor now; it joins the same cgroups itself.
      standby.reset();
      launched = launch_init(helper, config, descriptors, config_->start_timeout);
    }
    record.init_pid = launched->pid;
    record.init_start_time = launched->start_time;
    record.state = leash ? "pooled" : "running";
    store_.write(record, StateStore::Replaced::kept);
    if (config_->setup_observer) {
      LinuxSetupTimings timings;
      timings.instance_id = record.instance_id;
      timings.pooled = leash.has_value();
      timings.standby = standby != nullptr;
      auto span = [](std::int64_t from, std::int64_t to) {
        return std::chrono::nanoseconds(std::max<std::int64_t>(0, to - from));
      };
      timings.steps.emplace_back("prepare", span(started_ns, launch_ns));
      std::int64_t previous = launch_ns;
      for (const auto& [name, at] : launched->steps) {
        timings.steps.emplace_back(name, span(previous, at));
        previous = at;
      }
      timings.steps.emplace_back("init ready", span(previous, launched->ready_at_ns));
      timings.steps.emplace_back("record", span(launched->ready_at_ns, monotonic_ns()));
      config_->setup_observer(timings);
    }
  } catch (...) {
    destroy_locked(id, record);
    throw;
  }
  base::UniqueFd pidfd = open_verified_init(record);
  if (!pidfd) {
    destroy_locked(id, record);
    throw BackendError("the sandbox's init exited right after it started", record.instance_id);
  }
  return pidfd;
}

ResolvedImage LinuxBackend::resolve(const std::string& reference) const {
  const std::filesystem::path store_root =
      config_->image_store.empty() ? store_.base().parent_path() / "images" : config_->image_store;
  return resolve_image(reference, {store_root, config_->uid_base});
}

PoolShape LinuxBackend::pool_shape(const std::string& image_reference, const ResolvedImage& image,
                                   const SandboxSpec& spec,
                                   const ResourceLimits& resources) const {
  PoolShape shape;
  shape.image_reference = image_reference;
  shape.image_identity = image.kind == RootKind::host ? "host" : image.rootfs.string();
  shape.work_dir = spec.work_dir();
  shape.resources = resources;
  shape.egress_bridge = spec.egress() == Egress::allowlist;
  return shape;
}

// On the pool's thread. The member is locked under its own id while it is built, so a purge
// by another process waits for it and then finds a whole record.
PoolMember LinuxBackend::build_pool_member(const PoolShape& shape) {
  const ResolvedImage image = resolve(shape.image_reference);
  const std::string identity = image.kind == RootKind::host ? "host" : image.rootfs.string();
  if (identity != shape.image_identity) {
    // The reference moved (an image re-imported under the same tag): the shape is stale, and
    // the next acquire of the reference learns the new one.
    throw BackendError("the image of a warm pool shape changed since it was learned",
                       shape.image_reference);
  }
  int ends[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) {
    throw BackendError("the warm pool could not make a leash", base::errno_error("socketpair"));
  }
  PoolMember member;
  member.leash = base::UniqueFd(ends[0]);
  base::UniqueFd init_end(ends[1]);

  member.record.id = "pool-" + random_hex(8);
  member.record.work_dir = shape.work_dir;
  member.record.pool_owner_pid = ::getpid();
  member.record.pool_owner_start_time = process_start_time(::getpid()).value_or(0);
  store_.ensure_layout();
  base::UniqueFd held = store_.lock(member.record.id);
  try {
    (void)build_instance(member.record, shape.resources, image, shape.egress_bridge,
                         init_end.get());
  } catch (...) {
    store_.forget_lock(member.record.id);
    throw;
  }
  init_end.reset();
  member.memory_bytes = backend_kit::memory_usage(member.record.cgroups).value_or(0);
  return member;
}

void LinuxBackend::discard_pool_member(PoolMember& member) noexcept {
  member.leash.reset();  // its init ends with the leash
  try {
    const std::string id = member.record.id;
    {
      base::UniqueFd held = store_.lock(id);
      if (::access(store_.sandbox_dir(id).c_str(), F_OK) == 0) destroy_locked(id, member.record);
    }
    store_.forget_lock(id);
  } catch (const std::exception& error) {
    spdlog::warn("linux: discarding a pooled sandbox failed: {}", error_detail(error));
  } catch (...) {
  }
}

std::shared_ptr<LinuxSandbox> LinuxBackend::claim_pooled(PoolMember member, const std::string& id,
                                                         const SandboxKey& key,
                                                         const SandboxSpec& spec) {
  const std::string pooled = member.record.id;
  {
    // Under the member's lock, a purge by another process has either removed its directory
    // (the rename fails: ENOENT) or not begun; pool ids are never reused, so the directory is
    // the one the pool built. A member whose init died is not a sandbox any more.
    base::UniqueFd held = store_.lock(pooled);
    const bool alive = member.usable();
    if (!alive ||
        ::rename(store_.sandbox_dir(pooled).c_str(), store_.sandbox_dir(id).c_str()) != 0) {
      const bool purged = !alive || errno == ENOENT;
      const std::string why = purged ? std::string() : base::errno_error("rename", pooled).what();
      held.reset();
      if (!purged) spdlog::warn("linux: a pooled sandbox could not be claimed: {}", why);
      discard_pool_member(member);
      return nullptr;
    }
  }
  store_.forget_lock(pooled);
  RecordFile record = member.record;
  // From here it is the identity's sandbox: a failure destroys it under the identity's lock,
  // which the caller holds.
  record.id = id;
  record.kind = spec.kind();
  record.labels = sandbox_labels(key, spec);
  record.egress_posture = spec.egress_posture();
  record.state = "running";
  record.created_at_ms = unix_now_ms();
  record.pool_owner_pid = 0;
  record.pool_owner_start_time = 0;
  try {
    store_.write(record, StateStore::Replaced::kept);
  } catch (...) {
    destroy_locked(id, record);
    throw;
  }
  base::UniqueFd pidfd = open_verified_init(record);
  if (!member.release() || !pidfd) {
    destroy_locked(id, record);
    return nullptr;
  }
  return std::make_shared<LinuxSandbox>(config_, record, key,
                                        store_.sandbox_dir(id) / "control.sock", std::move(pidfd),
                                        init_path());
}

void LinuxBackend::reclaim_orphaned_pool() noexcept {
  backend_kit::contained("linux", "pool reclaim", [&] {
    for (const auto& id : store_.ids()) {
      if (id.rfind("pool-", 0) != 0) continue;
      base::UniqueFd held = store_.lock(id);
      const auto record = store_.read(id);
      if (record) {
        RecordFile owner;
        owner.init_pid = record->pool_owner_pid;
        owner.init_start_time = record->pool_owner_start_time;
        owner.boot_id = record->boot_id;
        if (init_is_alive(owner)) continue;  // another live process's pool
      } else {
        // No record: a build cut short, or one being written right now by its (live) owner,
        // who holds this lock while it builds. Having the lock, it is a leftover.
      }
      destroy_locked(id, record);
      held.reset();
      store_.forget_lock(id);
    }
  });
}

std::vector<std::string> LinuxBackend::pooled_ids() {
  return pool_ ? pool_->ready_ids() : std::vector<std::string>{};
}

void LinuxBackend::destroy_locked(const std::string& id,
                                  const std::optional<RecordFile>& record) noexcept {
  try {
    if (auto live = cache_.forget(id)) live->mark_disposed();
    if (record) {
      if (base::UniqueFd init = open_verified_init(*record)) {
        // SIGKILL to a pid namespace's init ends every process in it; its exit is reported once
        // they are all gone.
        sys::pidfd_send_signal(init.get(), SIGKILL);
        struct pollfd exited {
          init.get(), POLLIN, 0
        };
        ::poll(&exited, 1, static_cast<int>(std::chrono::milliseconds(kKillPatience).count()));
      }
      if (!record->cgroups.empty()) {
        backend_kit::destroy_cgroups(record->cgroups, kKillPatience);
      }
    }
    stop_egress(id);
    remove_state_directory(store_, id);
  } catch (const std::exception& error) {
    spdlog::warn("linux: tearing down {} failed: {}", id, error_detail(error));
  } catch (...) {
    spdlog::warn("linux: tearing down {} failed", id);
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
  } else if (record.subordinate_ids) {
    // The guest's root is not this user and may not be given the socket: it is open to all, in
    // a directory only this user (and the sandbox's init, by descriptor) may pass through.
    socket.mode = 0666;
  }
  // An older listener for this sandbox (its socket file was since replaced by another process,
  // or this is a re-adopt) serves no one: the kit closes it before the new bind.
  egress_.listen(id, store_.sandbox_dir(id) / "egress" / "egress.sock", std::move(policy),
                 record.instance_id, socket);
}

void LinuxBackend::stop_egress(const std::string& id) noexcept {
  egress_.stop(id);
}

bool LinuxBackend::destroy_identity(
    const std::string& id, const std::function<bool(const RecordFile&)>& matches) noexcept {
  try {
    auto mutex = identity_mutex(id);
    std::lock_guard in_process(*mutex);
    base::UniqueFd across_processes = store_.lock(id);
    auto record = store_.read(id);
    if (!record) {
      // A directory without a record is the residue of a crash before anything ran: it matches
      // no key, and only purge_all removes it.
      return false;
    }
    if (!matches(*record)) return false;
    destroy_locked(id, record);
    return true;
  } catch (const std::exception& error) {
    spdlog::warn("linux: disposing of {} failed: {}", id, error_detail(error));
    return false;
  } catch (...) {
    spdlog::warn("linux: disposing of {} failed", id);
    return false;
  }
}

template <typename Match>
int LinuxBackend::destroy_matching(Match match) noexcept {
  int count = 0;
  backend_kit::contained("linux", "disposal", [&] {
    for (const auto& id : store_.ids()) {
      auto record = store_.read(id);
      if (!record || !match(*record)) continue;
      if (destroy_identity(id, match)) ++count;
    }
  });
  return count;
}

void LinuxBackend::dispose(const SandboxKey& key) noexcept {
  backend_kit::contained("linux", "dispose", [&] {
    const auto wanted = backend_kit::key_labels(key);
    destroy_matching(
        [&](const RecordFile& record) { return backend_kit::labels_match(record.labels, wanted); });
  });
}

bool LinuxBackend::dispose_kind(const SandboxKey& key, std::string_view kind,
                                std::optional<std::string_view> instance_id) noexcept {
  return backend_kit::contained("linux", "dispose_kind", false, [&] {
    const auto wanted = backend_kit::kind_labels(key, kind);
    auto match = [&](const RecordFile& record) {
      return backend_kit::labels_match(record.labels, wanted) &&
             (!instance_id || record.instance_id == *instance_id);
    };
    destroy_matching(match);
    for (const auto& id : store_.ids()) {
      auto record = store_.read(id);
      if (record && match(*record)) return false;
    }
    return true;
  });
}

int LinuxBackend::dispose_scope(std::string_view scope,
                                std::optional<std::string_view> thread_id) noexcept {
  return backend_kit::contained("linux", "dispose_scope", 0, [&] {
    const auto wanted = backend_kit::scope_labels(scope, thread_id);
    const int count = destroy_matching(
        [&](const RecordFile& record) { return backend_kit::labels_match(record.labels, wanted); });
    for (const auto& snapshot : snapshots_.list()) {
      if (backend_kit::labels_match(snapshot.labels, wanted)) snapshots_.remove(snapshot.id);
    }
    return count;
  });
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
    entry.created_at =
        std::chrono::system_clock::time_point(std::chrono::milliseconds(record->created_at_ms));
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
    if (pool_) pool_->clear();  // refilled as long as its shapes are wanted
    for (const auto& id : store_.ids()) {
      auto mutex = identity_mutex(id);
      std::lock_guard in_process(*mutex);
      base::UniqueFd across_processes = store_.lock(id);
      auto record = store_.read(id);
      destroy_locked(id, record);
      if (id.rfind("pool-", 0) == 0) store_.forget_lock(id);
      if (record) ++count;
    }
    snapshots_.remove_all();
    snapshots_.reclaim_staging();
  } catch (const std::exception& error) {
    spdlog::warn("linux: purge failed: {}", error_detail(error));
  } catch (...) {
    spdlog::warn("linux: purge failed");
  }
  return count;
}

// ---- snapshots ----

std::optional<SnapshotRecord> LinuxBackend::find_snapshot(std::string_view id) {
  return snapshots_.find(id);
}

std::vector<SnapshotRecord> LinuxBackend::list_snapshots() { return snapshots_.list(); }

bool LinuxBackend::delete_snapshot(std::string_view id) noexcept {
  return backend_kit::contained("linux", "delete_snapshot", false,
                                [&] { return snapshots_.remove(id); });
}

std::shared_ptr<Sandbox> LinuxBackend::acquire_from_snapshot(const SandboxKey& key,
                                                             const SandboxSpec& spec,
                                                             const SnapshotRecord& snapshot) {
  if (snapshot.backend != "linux" || !is_snapshot_id(snapshot.id)) {
    throw InvalidArgument("snapshot '" + snapshot.id + "' is not one of the linux backend's",
                          "snapshot");
  }
  if (!privileged_) {
    throw NotSupported("the linux backend resumes snapshots only as root");
  }
  if (spec.egress() == Egress::unrestricted) {
    throw InvalidArgument(
        "egress: the linux backend never gives a sandbox the host's network (unrestricted); "
        "it runs closed, or allowlisted through the host's egress proxy",
        "egress");
  }
  // The spec's limits and posture; the snapshot's storage, over the image it was taken on.
  const ResourceLimits resources = effective_resources(spec);
  const std::string image_reference =
      spec.image_id() ? *spec.image_id() : (spec.image() ? *spec.image() : config_->default_image);

  const std::string id = sandbox_identity(key, spec.kind(), spec.egress_posture());
  auto mutex = identity_mutex(id);
  std::lock_guard in_process(*mutex);
  if (!layout_checked_.load(std::memory_order_acquire) ||
      ::access((store_.base() / "locks").c_str(), F_OK) != 0) {
    store_.ensure_layout();
    layout_checked_.store(true, std::memory_order_release);
  }
  std::call_once(orphans_once_, [this] {
    StandbyMonitor::reclaim_orphans(store_);
    reclaim_orphaned_pool();
    snapshots_.reclaim_staging();
  });
  // The stored record, not the caller's copy, says whose it is (the router checked too).
  const auto stored = snapshots_.find(snapshot.id);
  if (!stored || !snapshot_belongs_to(*stored, key)) {
    throw NotFound("no snapshot '" + snapshot.id + "' in this conversation");
  }
  // Opened before anything is disposed of: a snapshot deleted meanwhile is NotFound, and one
  // deleted from here on is still read whole.
  base::UniqueFd stream = snapshots_.open_stream(snapshot.id);
  if (spec.work_dir() != stored->work_dir) {
    throw InvalidArgument("snapshot '" + snapshot.id + "' was taken with work_dir '" +
                              stored->work_dir + "'; it is resumed only there",
                          "work_dir");
  }
  const ResolvedImage image = resolve(image_reference);
  if (image.reference != stored->image) {
    throw InvalidArgument("snapshot '" + snapshot.id + "' holds what was written over image '" +
                              stored->image + "'; the spec's image is '" + image.reference +
                              "', over which it would not be the same files",
                          "image");
  }
  base::UniqueFd across_processes = store_.lock(id);
  // The live sandbox of this identity, if any, goes first: a resume is a new instance.
  if (auto record = store_.read(id)) {
    destroy_locked(id, record);
  } else if (::access(store_.sandbox_dir(id).c_str(), F_OK) == 0) {
    destroy_locked(id, std::nullopt);
  } else if (auto live = cache_.forget(id)) {
    live->mark_disposed();
  }
  std::shared_ptr<LinuxSandbox> created =
      create(id, key, spec, resources, image, stream.get());
  stream.reset();
  if (spec.egress() == Egress::allowlist) {
    try {
      listen_for_egress(id, spec, created->record());
    } catch (...) {
      destroy_locked(id, created->record());
      throw;
    }
  }
  cache_.remember(id, created);
  return created;
}

std::shared_ptr<SandboxBackend> make_backend_instance(LinuxBackendConfig config) {
  return std::make_shared<LinuxBackend>(std::move(config));
}

}  // namespace airlock::linux_backend

namespace airlock {

std::shared_ptr<SandboxBackend> make_linux_backend(LinuxBackendConfig config) {
  return linux_backend::make_backend_instance(std::move(config));
}

std::filesystem::path default_linux_state_dir() {
  return default_state_dir();
}

}  // namespace airlock
