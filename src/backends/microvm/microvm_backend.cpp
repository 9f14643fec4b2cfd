#include "backends/microvm/microvm_backend.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>
#include <sstream>

#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "airlock/paths.hpp"
#include "airlock/state_dir.hpp"
#include "backends/kit/cgroups.hpp"
#include "backends/kit/contained.hpp"
#include "backends/kit/identity_lock.hpp"
#include "backends/kit/labels.hpp"
#include "backends/kit/own_directory.hpp"
#include "backends/microvm/guest_layout.hpp"

#ifndef AIRLOCK_LIBEXEC_DIR
#define AIRLOCK_LIBEXEC_DIR "/usr/local/libexec/airlock"
#endif

extern char** environ;

namespace airlock::microvm_backend {
namespace {

namespace fs = std::filesystem;
constexpr const char* kCgroupSubtree = "airlock-microvm";
constexpr int kEgressBridgePort = 3128;

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string random_bytes(std::size_t count) {
  std::string bytes(count, '\0');
  std::size_t done = 0;
  while (done < count) {
    const ssize_t got = ::getrandom(bytes.data() + done, count - done, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) throw BackendError("getrandom failed", std::strerror(errno));
    done += static_cast<std::size_t>(got);
  }
  return bytes;
}

std::string random_hex(std::size_t count) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (const unsigned char c : random_bytes(count)) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

std::string process_start(std::int64_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::ostringstream bytes;
  bytes << stat.rdbuf();
  const std::string text = bytes.str();
  const auto close = text.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  for (int index = 3; index <= 22 && (fields >> field); ++index) {
    if (index == 22) return field;
  }
  return {};
}

// Runs `argv` to its end (bounded by `timeout`) and returns its exit code, with what it printed.
int run_program(const std::vector<std::string>& argv, std::string& output,
                std::chrono::milliseconds timeout) {
  int pipe_ends[2];
  if (::pipe2(pipe_ends, O_CLOEXEC) != 0) return -1;
  base::UniqueFd read_end(pipe_ends[0]), write_end(pipe_ends[1]);
  base::UniqueFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, null.get(), 0);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), 2);
  std::vector<std::string> copy = argv;
  std::vector<char*> pointers;
  for (auto& argument : copy) pointers.push_back(argument.data());
  pointers.push_back(nullptr);
  pid_t pid = -1;
  const int spawned =
      ::posix_spawnp(&pid, pointers[0], &actions, nullptr, pointers.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  write_end.reset();
  if (spawned != 0) {
    output = std::string(std::strerror(spawned));
    return -1;
  }
  const auto deadline = Clock::now() + timeout;
  char buffer[4096];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd watch{read_end.get(), POLLIN, 0};
    if (left <= 0 || ::poll(&watch, 1, static_cast<int>(left)) <= 0) {
      ::kill(pid, SIGKILL);
      output += " (timed out)";
      break;
    }
    const ssize_t got = ::read(read_end.get(), buffer, sizeof buffer);
    if (got <= 0) break;
    if (output.size() < 16384) output.append(buffer, static_cast<std::size_t>(got));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void run_or_throw(const std::vector<std::string>& argv, const std::string& what) {
  std::string output;
  const int code = run_program(argv, output, std::chrono::minutes(5));
  if (code != 0) {
    while (!output.empty() && output.back() == '\n') output.pop_back();
    throw BackendError("the microvm backend could not " + what,
                       argv[0] + " exited " + std::to_string(code) + ": " + output);
  }
}

bool executable(const fs::path& path) { return ::access(path.c_str(), X_OK) == 0; }
bool readable(const fs::path& path) { return ::access(path.c_str(), R_OK) == 0; }

void locate_marker() {}

// Where our own programs and the guest's files are: next to libairlock (the build tree), its
// ../libexec/airlock, or the install prefix's.
fs::path locate(const fs::path& configured, const std::string& name, const std::string& key,
                bool want_executable) {
  const auto usable = [&](const fs::path& path) {
    return want_executable ? executable(path) : readable(path);
  };
  if (!configured.empty()) {
    if (usable(configured)) return configured;
    throw BackendError("the microvm backend's " + name + " was not found",
                       key + " " + configured.string() + " is not usable");
  }
  std::vector<fs::path> candidates;
  std::error_code ignored;
  Dl_info library{};
  if (::dladdr(reinterpret_cast<void*>(&locate_marker), &library) != 0 &&
      library.dli_fname != nullptr) {
    const auto directory = fs::absolute(library.dli_fname, ignored).parent_path();
    candidates.push_back(directory / name);
    candidates.push_back(directory / ".." / "libexec" / "airlock" / name);
  }
  candidates.emplace_back(std::string(AIRLOCK_LIBEXEC_DIR) + "/" + name);
  std::string looked;
  for (const auto& candidate : candidates) {
    if (usable(candidate)) return fs::absolute(candidate, ignored).lexically_normal();
    looked += (looked.empty() ? "" : ", ") + candidate.string();
  }
  throw BackendError("the microvm backend's " + name + " was not found",
                     "looked in: " + looked + " (set " + key + ")");
}

fs::path on_path(const fs::path& configured, const char* name) {
  if (!configured.empty()) return configured;
  if (const char* path = std::getenv("PATH")) {
    std::istringstream parts(path);
    std::string part;
    while (std::getline(parts, part, ':')) {
      if (!part.empty() && executable(fs::path(part) / name)) return fs::path(part) / name;
    }
  }
  return fs::path("/usr/bin") / name;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw SystemError("could not write " + path.string(), errno, path.string());
}

// chown -R and chmod of what QEMU wrote while it made a template: root's, readable by all.
void seal_tree(const fs::path& directory) {
  std::error_code error;
  ::chown(directory.c_str(), 0, 0);
  ::chmod(directory.c_str(), 0755);
  for (const auto& entry : fs::directory_iterator(directory, error)) {
    ::lchown(entry.path().c_str(), 0, 0);
    if (entry.is_regular_file(error)) ::chmod(entry.path().c_str(), 0644);
  }
}

// Every entry of `tree` (not following links) from host owner base + g to guest owner g. An
// id outside the store's range (which the store never writes) becomes the guest's root-free
// overflow id, 65534. Modes are put back after chown, which clears the set-id bits.
void unshift_ownership(const fs::path& tree, std::uint32_t base) {
  const auto shift = [base](std::uint32_t id) -> std::uint32_t {
    return id >= base && id - base < images::OwnershipMap::kGuestIdCount ? id - base : 65534;
  };
  const auto fix = [&](const fs::path& path) {
    struct stat info {};
    if (::lstat(path.c_str(), &info) != 0) {
      throw SystemError("could not read an image file's owner", errno, path.string());
    }
    if (::lchown(path.c_str(), shift(info.st_uid), shift(info.st_gid)) != 0) {
      throw SystemError("could not set an image file's owner", errno, path.string());
    }
    if (!S_ISLNK(info.st_mode) && ::chmod(path.c_str(), info.st_mode & 07777) != 0) {
      throw SystemError("could not set an image file's mode", errno, path.string());
    }
  };
  fix(tree);
  std::error_code error;
  fs::recursive_directory_iterator walk(tree, fs::directory_options::none, error);
  if (error) throw SystemError("could not walk the image's copy", error.value(), tree.string());
  for (const auto& entry : walk) fix(entry.path());
}

// What changes when a file is replaced: its path, inode, size and modification time.
std::string file_stamp(const fs::path& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return path.string() + ":missing";
  return path.string() + ":" + std::to_string(info.st_ino) + ":" + std::to_string(info.st_size) +
         ":" + std::to_string(info.st_mtim.tv_sec) + "." + std::to_string(info.st_mtim.tv_nsec);
}

std::string shape_hash(const std::string& text) { return sha256_hex(text).substr(0, 24); }

std::vector<std::string> environment_for(const images::ImageInfo& image) {
  std::vector<std::string> environment = image.config.env;
  const auto has = [&environment](const std::string& name) {
    for (const auto& entry : environment) {
      if (entry.rfind(name + "=", 0) == 0) return true;
    }
    return false;
  };
  if (!has("PATH")) {
    environment.emplace_back("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
  }
  if (!has("HOME")) environment.emplace_back("HOME=/root");
  return environment;
}

// The KVM probe: one boot of the kernel and agent under KVM to the agent's hello, in a jail like
// any VM's. Cached beside the state, keyed by what could change its answer.
MicrovmAccelProbe probe_accel(const MicrovmBackendConfig& config, const fs::path& state,
                              const VmPlan& base_plan,
                              const std::function<std::vector<std::string>()>& make_cgroups,
                              const std::function<void(const std::vector<std::string>&)>&
                                  remove_cgroups) {
  MicrovmAccelProbe probe;
  if (config.accel == MicrovmAccel::tcg) {
    probe.chosen = MicrovmAccel::tcg;
    probe.reason = "tcg was asked for";
    return probe;
  }
  if (::access("/dev/kvm", R_OK | W_OK) != 0) {
    probe.chosen = MicrovmAccel::tcg;
    probe.reason = "/dev/kvm is not usable here (" + std::string(std::strerror(errno)) + ")";
    return probe;
  }
  utsname host{};
  ::uname(&host);
  std::error_code error;
  const auto stamp = [&](const fs::path& path) {
    const auto size = fs::file_size(path, error);
    const auto when = fs::last_write_time(path, error).time_since_epoch().count();
    return path.string() + ":" + std::to_string(size) + ":" + std::to_string(when);
  };
  const std::string identity = std::string(host.release) + "|" + host.version + "|" +
                               stamp(base_plan.qemu) + "|" + stamp(base_plan.kernel) + "|" +
                               stamp(base_plan.initramfs);
  const fs::path cache = state / ("accel-" + shape_hash(identity));
  {
    std::ifstream in(cache);
    std::string verdict;
    std::getline(in, verdict);
    std::string reason;
    std::getline(in, reason);
    if (verdict == "kvm" || verdict == "tcg") {
      probe.chosen = verdict == "kvm" ? MicrovmAccel::kvm : MicrovmAccel::tcg;
      probe.reason = reason + " (probed earlier, cached in " + cache.string() + ")";
      return probe;
    }
  }
  const auto started = Clock::now();
  const fs::path directory = state / ("probe-" + random_hex(6));
  const fs::path vm_directory = directory / "vm";
  fs::create_directories(vm_directory, error);
  ::chown(vm_directory.c_str(), config.jail_uid, config.jail_uid);
  ::chmod(vm_directory.c_str(), 0700);
  VmPlan plan;
  std::string failure;
  try {
    plan.cgroups = make_cgroups();
  } catch (const std::exception& caught) {
    failure = error_detail(caught);
  }
  plan.qemu = base_plan.qemu;
  plan.jail = base_plan.jail;
  plan.kernel = base_plan.kernel;
  plan.initramfs = base_plan.initramfs;
  plan.directory = vm_directory;
  plan.uid = config.jail_uid;
  plan.memory_bytes = std::uint64_t{128} << 20;
  plan.kvm = true;
  plan.extra_cmdline = "airlock.probe";
  const std::vector<std::string> cgroups = plan.cgroups;
  if (failure.empty()) {
    try {
      auto vm = VirtualMachine::start(std::move(plan), Clock::now() + config.kvm_probe_timeout);
      vm->await_hello(started + config.kvm_probe_timeout);
      vm->kill();
    } catch (const std::exception& caught) {
      failure = error_detail(caught);
    }
  }
  remove_cgroups(cgroups);
  fs::remove_all(directory, error);
  probe.probe_milliseconds =
      std::chrono::duration<double, std::milli>(Clock::now() - started).count();
  if (failure.empty()) {
    probe.chosen = MicrovmAccel::kvm;
    probe.reason = "a boot under KVM reached the agent in " +
                   std::to_string(static_cast<long>(probe.probe_milliseconds)) + " ms";
  } else {
    probe.chosen = MicrovmAccel::tcg;
    probe.reason = "/dev/kvm exists but could not boot the guest kernel within " +
                   std::to_string(config.kvm_probe_timeout.count()) + " ms: " +
                   failure.substr(0, 400);
  }
  write_text(cache, std::string(to_string(probe.chosen)) + "\n" + probe.reason + "\n");
  return probe;
}

}  // namespace

// ---- MicrovmSandbox ----

MicrovmSandbox::MicrovmSandbox(std::shared_ptr<Instance> instance,
                               backend_kit::ChannelSandboxSettings settings, SandboxKey key,
                               std::shared_ptr<const SnapshotPlace> snapshots)
    : ChannelSandbox(instance->vm->channel(), std::move(settings), instance->record.instance_id,
                     std::move(key), instance->record.kind, instance->record.work_dir),
      instance_(std::move(instance)),
      snapshots_(std::move(snapshots)) {}

// A command whose kill could not be confirmed ran in a guest whose kernel stopped answering:
// the VM goes, so nothing of it outlives the caller's deadline.
template <typename Call>
ExecResult MicrovmSandbox::guarded(Call call) {
  try {
    return call();
  } catch (const Timeout& timeout) {
    if (timeout.kill_confirmed() == false) {
      spdlog::warn("microvm: sandbox {}: a command's kill was not confirmed; ending its VM",
                   instance_->record.id);
      std::lock_guard lock(instance_->mutex);
      if (instance_->vm) instance_->vm->kill();
    }
    throw;
  }
}

ExecResult MicrovmSandbox::exec(const Command& command, const ExecOptions& options) {
  return guarded([&] { return ChannelSandbox::exec(command, options); });
}

ExecResult MicrovmSandbox::run_code(std::string_view code, Milliseconds timeout) {
  return guarded([&] { return ChannelSandbox::run_code(code, timeout); });
}

// The VM is stopped while its memory is saved and its layer copied, then runs on: the copy is
// of one instant of both. The layer's copy holds only what the guest wrote (the clusters the
// layer itself holds), as a layer over the same base, so a snapshot costs its guest's writes
// plus its RAM.
SnapshotRecord MicrovmSandbox::snapshot() {
  std::lock_guard lock(instance_->mutex);
  if (!instance_->vm || !instance_->vm->alive() || instance_->vm->channel()->gone()) {
    throw SandboxInvalidated("the microVM is gone; acquire the sandbox again");
  }
  const Record& source = instance_->record;
  SnapshotRecord record;
  record.id = "snap-" + random_hex(12);
  record.backend = "microvm";
  record.content = SnapshotContent::filesystem_and_memory;
  record.kind = source.kind;
  record.egress_posture = source.egress_posture;
  record.image = source.image;
  record.work_dir = source.work_dir;
  record.labels = source.labels;
  record.source_instance_id = source.instance_id;
  record.created_at = std::chrono::system_clock::now();
  const fs::path staging =
      snapshots_->directory / ("." + record.id + ".staging-" + std::to_string(::getpid()));
  const fs::path final_directory = snapshots_->directory / record.id;
  std::error_code error;
  if (!fs::create_directory(staging, error)) {
    throw SystemError("could not make a snapshot's directory", error.value(), staging.string());
  }
  ::chmod(staging.c_str(), 0700);
  const auto deadline = Clock::now() + snapshots_->timeout;
  bool stopped = false;
  try {
    base::UniqueFd memory(::open((staging / "memory.mig").c_str(),
                                 O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!memory) throw SystemError("could not make a snapshot's memory file", errno);
    stopped = true;
    instance_->vm->save_snapshot(memory.get(), deadline);
    const fs::path layer = instance_->vm->disk();
    run_or_throw({snapshots_->qemu_img.string(), "convert", "-U", "-q", "-W", "-f", "qcow2", "-O",
                  "qcow2", "-B", instance_->base_disk.string(), "-F", instance_->base_format,
                  layer.string(), (staging / "disk.qcow2").string()},
                 "copy the sandbox's disk layer (qemu-img convert)");
    instance_->vm->resume(deadline);
    stopped = false;
  } catch (...) {
    if (stopped) {
      try {
        instance_->vm->resume(Clock::now() + std::chrono::seconds(10));
      } catch (const std::exception& resumed) {
        spdlog::warn("microvm: sandbox {} did not run again after a failed snapshot: {}",
                     source.id, error_detail(resumed));
      }
    }
    fs::remove_all(staging, error);
    throw;
  }
  for (const char* file : {"memory.mig", "disk.qcow2"}) {
    ::chmod((staging / file).c_str(), 0600);  // qemu-img makes its files 0644
    record.bytes += static_cast<std::uint64_t>(fs::file_size(staging / file, error));
  }
  json::Json value = json::to_json(record);
  value["microvm"] = {{"image_id", instance_->shape.image_id},
                      {"disk_bytes", instance_->shape.disk_bytes},
                      {"memory_bytes", instance_->shape.memory_bytes},
                      {"vcpus", instance_->shape.vcpus},
                      {"base_disk", instance_->base_disk.string()},
                      {"base_format", instance_->base_format},
                      {"guest", snapshots_->guest_identity}};
  write_text(staging / "record.json", value.dump());
  ::chmod((staging / "record.json").c_str(), 0600);
  fs::rename(staging, final_directory, error);
  if (error) {
    fs::remove_all(staging, error);
    throw SystemError("could not publish a snapshot", error.value(), final_directory.string());
  }
  spdlog::info("microvm: sandbox {} saved as {} ({} MiB)", source.id, record.id,
               record.bytes >> 20);
  return record;
}

// ---- MicrovmBackend ----

std::string Shape::key(const std::string& guest) const {
  return shape_hash(guest + "|" + image_id + "|" + std::to_string(disk_bytes) + "|" +
                    std::to_string(memory_bytes) + "|" + std::to_string(vcpus));
}

MicrovmBackend::MicrovmBackend(MicrovmBackendConfig config)
    : config_(std::move(config)),
      state_(config_.state_dir.empty() ? default_state_dir() : config_.state_dir),
      images_(config_.image_store.empty() ? state_ / "images" : config_.image_store,
              images::OwnershipMap::shifted(config_.uid_base)),
      egress_(config_.egress_decisions) {
  if (::geteuid() != 0) {
    throw NotSupported(
        "the microvm backend needs root: its jail makes namespaces and cgroups for QEMU");
  }
  if (config_.jail_uid == 0) throw InvalidArgument("jail_uid: must not be 0", "jail_uid");
  config_.qemu_path = on_path(config_.qemu_path, "qemu-system-x86_64");
  config_.qemu_img_path = on_path(config_.qemu_img_path, "qemu-img");
  if (!executable(config_.qemu_path)) {
    throw BackendError("the microvm backend needs QEMU",
                       config_.qemu_path.string() +
                           " is not executable (scripts/bootstrap installs qemu-system-x86)");
  }
  if (!executable(config_.qemu_img_path)) {
    throw BackendError("the microvm backend needs qemu-img",
                       config_.qemu_img_path.string() +
                           " is not executable (scripts/bootstrap installs qemu-utils)");
  }
  config_.jail_path = locate(config_.jail_path, "airlock-microvm-jail", "jail_path", true);
  config_.kernel_path = locate(config_.kernel_path, "microvm/vmlinux", "kernel_path", false);
  config_.initramfs_path =
      locate(config_.initramfs_path, "microvm/initramfs.cpio", "initramfs_path", false);
  tsc_khz_ = host_tsc_khz();
  // A template holds the memory of a running guest: one made with another kernel, initramfs
  // (agent) or QEMU must never be restored, so all three name it.
  for (const auto& part : {config_.qemu_path, config_.kernel_path, config_.initramfs_path}) {
    guest_identity_ += file_stamp(part) + "|";
  }
  // Checked before anything is made in it (no link, nobody else's, not writable by others);
  // below it every directory is root's alone, made without following a link. QEMU reaches
  // what it needs through its jail's binds, never through these paths.
  prepare_state_directory(state_);
  backend_kit::make_own_directory(base(), 0700, 0, 0, "microvm");
  for (const char* directory : {"sandboxes", "disks", "templates", "snapshots", "locks"}) {
    backend_kit::make_own_directory(base() / directory, 0700, 0, 0, "microvm");
  }
  // Every VM's cgroups are <hierarchy>/airlock-microvm/<state>-<name>: named after the state
  // directory, so a purge here never touches another state directory's VMs.
  cgroups_ = backend_kit::CgroupLayout::detect({}, kCgroupSubtree);
  if (!cgroups_.can_limit_memory() || !cgroups_.can_limit_pids()) {
    throw BackendError("the microvm backend cannot bound its VMs here",
                       "no cgroup hierarchy with the memory and pids controllers is mounted");
  }
  cgroup_prefix_ = sha256_hex(fs::absolute(base()).string()).substr(0, 12);

  VmPlan probe_plan;
  probe_plan.qemu = config_.qemu_path;
  probe_plan.jail = config_.jail_path;
  probe_plan.kernel = config_.kernel_path;
  probe_plan.initramfs = config_.initramfs_path;
  accel_ = probe_accel(
      config_, base(), probe_plan,
      [this] {
        Shape probe_shape;
        probe_shape.memory_bytes = std::uint64_t{128} << 20;
        return make_cgroups("p-" + random_hex(6), probe_shape);
      },
      [](const std::vector<std::string>& cgroups) {
        backend_kit::destroy_cgroups(cgroups, std::chrono::seconds(5));
      });
  if (config_.accel == MicrovmAccel::kvm && accel_.chosen != MicrovmAccel::kvm) {
    throw BackendError("the microvm backend was asked for KVM, which cannot run the guest here",
                       accel_.reason);
  }
  spdlog::info("microvm: accelerator {}: {}", to_string(accel_.chosen), accel_.reason);

  snapshot_place_ = std::make_shared<SnapshotPlace>();
  snapshot_place_->directory = base() / "snapshots";
  snapshot_place_->qemu_img = config_.qemu_img_path;
  snapshot_place_->guest_identity = guest_identity_;
  snapshot_place_->timeout = config_.boot_timeout;

  settings_.backend = "microvm";
  settings_.helper_path = kAgentPath;
  settings_.output_ceiling_bytes = config_.output_ceiling_bytes;
  settings_.max_bytes_per_file_in = config_.limits.files_in.max_bytes_per_file;
  settings_.max_concurrent_commands = config_.max_concurrent_commands;
  settings_.no_terminal_reason = "its agent allocates no pseudo-terminal in the guest";
  reclaim_dead_owners();
}

MicrovmBackend::~MicrovmBackend() {
  std::map<std::string, std::shared_ptr<Instance>> live;
  {
    std::lock_guard lock(live_mutex_);
    live.swap(live_);
  }
  for (const auto& [id, instance] : live) {
    (void)instance;
    teardown(id);
  }
  egress_.stop_all();
}

Isolation MicrovmBackend::isolation() const {
  return accel_.chosen == MicrovmAccel::kvm ? Isolation::microvm : Isolation::hardened_container;
}

std::optional<EgressSet> MicrovmBackend::egress_modes() const {
  return EgressSet{Egress::closed, Egress::allowlist};
}

std::optional<CapabilitySet> MicrovmBackend::capabilities() const {
  return CapabilitySet{Capability::exec,       Capability::run_code,   Capability::files_in,
                       Capability::files_out,  Capability::files_list, Capability::files_delete,
                       Capability::host_tools, Capability::snapshot};
}

std::optional<OsFamilySet> MicrovmBackend::os_families() const {
  return OsFamilySet{OsFamily::posix};
}

std::vector<std::string> MicrovmBackend::stated_residuals() const {
  std::vector<std::string> residuals;
  if (accel_.chosen != MicrovmAccel::kvm) {
    residuals.push_back(
        "the guest runs under TCG (" + accel_.reason +
        "): QEMU treats only KVM as a security boundary, so this backend declares "
        "hardened_container, not microvm");
  }
  residuals.push_back(
      "a sandbox lives as long as the process that made it: its jail's leash ends the VM "
      "when that process exits");
  return residuals;
}

fs::path MicrovmBackend::sandbox_dir(const std::string& id) const {
  return base() / "sandboxes" / id;
}

std::optional<Record> MicrovmBackend::read_record(const std::string& id) const {
  std::ifstream in(sandbox_dir(id) / "record.json");
  if (!in) return std::nullopt;
  try {
    const json::Json value = json::Json::parse(in);
    Record record;
    record.id = value.at("id").get<std::string>();
    record.instance_id = value.at("instance_id").get<std::string>();
    record.kind = value.at("kind").get<std::string>();
    record.labels = value.at("labels").get<std::map<std::string, std::string>>();
    record.egress_posture = value.at("egress_posture").get<std::string>();
    record.image = value.at("image").get<std::string>();
    record.work_dir = value.at("work_dir").get<std::string>();
    record.created_at_ms = value.at("created_at_ms").get<std::int64_t>();
    record.owner_pid = value.at("owner_pid").get<std::int64_t>();
    record.owner_start = value.at("owner_start").get<std::string>();
    return record;
  } catch (const std::exception& error) {
    spdlog::warn("microvm: unreadable record for {}: {}", id, error.what());
    return std::nullopt;
  }
}

void MicrovmBackend::write_record(const Record& record) const {
  json::Json value = {{"id", record.id},
                      {"instance_id", record.instance_id},
                      {"kind", record.kind},
                      {"labels", record.labels},
                      {"egress_posture", record.egress_posture},
                      {"image", record.image},
                      {"work_dir", record.work_dir},
                      {"created_at_ms", record.created_at_ms},
                      {"owner_pid", record.owner_pid},
                      {"owner_start", record.owner_start}};
  const fs::path target = sandbox_dir(record.id) / "record.json";
  const fs::path staging = sandbox_dir(record.id) / ".record.json.staging";
  {
    std::ofstream out(staging, std::ios::trunc);
    out << value.dump();
    if (!out) throw SystemError("could not write a record", errno, staging.string());
  }
  ::chmod(staging.c_str(), 0600);
  std::error_code error;
  fs::rename(staging, target, error);
  if (error) throw SystemError("could not write a record", error.value(), target.string());
}

std::vector<std::string> MicrovmBackend::ids() const {
  std::vector<std::string> out;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(base() / "sandboxes", error)) {
    out.push_back(entry.path().filename().string());
  }
  return out;
}

bool MicrovmBackend::owner_alive(const Record& record) const {
  if (record.owner_pid <= 0) return false;
  if (::kill(static_cast<pid_t>(record.owner_pid), 0) != 0 && errno == ESRCH) return false;
  return process_start(record.owner_pid) == record.owner_start;
}

fs::path MicrovmBackend::ensure_disk_image(const Shape& shape) {
  const std::string name = shape_hash(shape.image_id + "|" + std::to_string(shape.disk_bytes));
  const fs::path directory = base() / "disks" / name;
  const fs::path image = directory / "root.raw";
  std::error_code error;
  if (fs::exists(image, error)) return image;
  const base::UniqueFd lock = backend_kit::lock_identity(base() / "locks", "disk-" + name, "microvm");
  if (fs::exists(image, error)) return image;
  fs::create_directories(directory, error);
  ::chmod(directory.c_str(), 0755);
  const std::string suffix = random_hex(4);
  const fs::path staging = directory / (".root.raw." + suffix);
  const fs::path tree = directory / (".tree." + suffix);
  const auto cleanup = [&] {
    fs::remove_all(tree, error);
    fs::remove(staging, error);
  };
  try {
    // The store holds the image with host ids (uid_base + the guest's); the disk holds the
    // guest's own. mkfs.ext4 -d takes owners from the tree it copies, so it copies a tree whose
    // owners are shifted back.
    run_or_throw({"cp", "-a", "--reflink=auto", "--", shape.rootfs.string(), tree.string()},
                 "copy the image for its disk (cp -a)");
    unshift_ownership(tree, config_.uid_base);
    // The file system's size is the disk limit.
    run_or_throw({"mkfs.ext4", "-q", "-F", "-L", "airlock-root", "-E",
                  "lazy_itable_init=1,lazy_journal_init=1,nodiscard", "-d", tree.string(),
                  staging.string(), std::to_string(shape.disk_bytes / 1024) + "k"},
                 "build the image's disk (mkfs.ext4 -d)");
  } catch (...) {
    cleanup();
    throw;
  }
  fs::remove_all(tree, error);
  ::chmod(staging.c_str(), 0644);
  fs::rename(staging, image, error);
  if (error) throw SystemError("could not publish a disk image", error.value(), image.string());
  return image;
}

ResourceLimits MicrovmBackend::vm_limits(const Shape& shape) const {
  ResourceLimits limits;
  // The guest's RAM and QEMU's own (its code buffer, the page cache of the kernel it maps).
  limits.memory_bytes = shape.memory_bytes + config_.qemu_overhead_bytes;
  // QEMU's threads: the main loop, one per vCPU, the RCU and I/O workers.
  limits.pids = 128;
  limits.cpu_millis = std::uint64_t{shape.vcpus} * 1000;
  return limits;
}

std::vector<std::string> MicrovmBackend::cgroups_for(const std::string& name) const {
  Shape any;
  return backend_kit::plan_instance_cgroups(cgroups_, cgroup_prefix_ + "-" + name, vm_limits(any),
                                            false)
      .directories;
}

std::vector<std::string> MicrovmBackend::make_cgroups(const std::string& name, const Shape& shape) {
  const ResourceLimits limits = vm_limits(shape);
  const auto planned =
      backend_kit::plan_instance_cgroups(cgroups_, cgroup_prefix_ + "-" + name, limits, false);
  // A directory left by a crash under the same name is ended first.
  backend_kit::destroy_cgroups(planned.directories, std::chrono::seconds(5));
  backend_kit::create_instance_cgroups(cgroups_, planned, limits);
  return planned.directories;
}

VmPlan MicrovmBackend::plan_for(const Shape& shape, const fs::path& directory,
                                std::vector<std::string> cgroups) const {
  VmPlan plan;
  plan.qemu = config_.qemu_path;
  plan.jail = config_.jail_path;
  plan.kernel = config_.kernel_path;
  plan.initramfs = config_.initramfs_path;
  plan.directory = directory;
  plan.disk = directory / "disk.qcow2";
  plan.cgroups = std::move(cgroups);
  plan.uid = config_.jail_uid;
  plan.memory_bytes = shape.memory_bytes;
  plan.vcpus = shape.vcpus;
  plan.kvm = accel_.chosen == MicrovmAccel::kvm;
  plan.tsc_khz = tsc_khz_;
  return plan;
}

// A VM of `shape` booted to its agent's hello, its memory and disk saved: what every acquire of
// the shape restores from. Built once, under a lock other processes respect too.
fs::path MicrovmBackend::ensure_template(const Shape& shape, const fs::path& disk_image) {
  const std::string name = shape.key(guest_identity_);
  const fs::path directory = base() / "templates" / name;
  std::error_code error;
  if (fs::exists(directory / "ready", error)) return directory;
  const base::UniqueFd lock =
      backend_kit::lock_identity(base() / "locks", "template-" + name, "microvm");
  if (fs::exists(directory / "ready", error)) return directory;
  fs::remove_all(directory, error);
  const auto started = Clock::now();
  const fs::path staging = base() / "templates" / (name + ".staging-" + random_hex(4));
  const fs::path vm_directory = staging / "vm";
  fs::create_directories(vm_directory, error);
  ::chmod(staging.c_str(), 0700);
  run_or_throw({config_.qemu_img_path.string(), "create", "-q", "-f", "qcow2", "-F", "raw", "-b",
                disk_image.string(), (vm_directory / "disk.qcow2").string()},
               "make the template's disk layer (qemu-img create)");
  ::chown(vm_directory.c_str(), config_.jail_uid, config_.jail_uid);
  ::chown((vm_directory / "disk.qcow2").c_str(), config_.jail_uid, config_.jail_uid);
  ::chmod(vm_directory.c_str(), 0700);
  std::vector<std::string> cgroups;
  const auto cleanup = [&] {
    backend_kit::destroy_cgroups(cgroups, std::chrono::seconds(5));
    fs::remove_all(staging, error);
  };
  try {
    cgroups = make_cgroups("t-" + random_hex(6), shape);
    VmPlan plan = plan_for(shape, vm_directory, cgroups);
    plan.read_only = {disk_image};
    const auto deadline = Clock::now() + config_.boot_timeout;
    auto vm = VirtualMachine::start(std::move(plan), deadline);
    vm->await_hello(deadline);
    base::UniqueFd memory(::open((staging / "memory.mig").c_str(),
                                 O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!memory) throw SystemError("could not make the snapshot file", errno, staging.string());
    vm->save_snapshot(memory.get(), Clock::now() + config_.boot_timeout);
    vm->kill();
  } catch (...) {
    cleanup();
    throw;
  }
  backend_kit::destroy_cgroups(cgroups, std::chrono::seconds(5));
  // What QEMU wrote (its disk layer) becomes read-only and root's; the per-sandbox layers name
  // it by its final path.
  fs::rename(vm_directory / "disk.qcow2", staging / "disk.qcow2", error);
  fs::remove_all(vm_directory, error);
  seal_tree(staging);
  fs::rename(staging, directory, error);
  if (error) {
    fs::remove_all(staging, error);
    throw SystemError("could not publish a template", error.value(), directory.string());
  }
  write_text(directory / "guest", guest_identity_);
  write_text(directory / "ready", "");
  spdlog::info("microvm: template {} ({} MiB, {} vCPU) made in {} ms", name,
               shape.memory_bytes >> 20, shape.vcpus,
               std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started)
                   .count());
  return directory;
}

std::shared_ptr<MicrovmSandbox> MicrovmBackend::handle(const std::shared_ptr<Instance>& instance,
                                                       const SandboxKey& key) const {
  return std::make_shared<MicrovmSandbox>(instance, settings_, key, snapshot_place_);
}

std::shared_ptr<Sandbox> MicrovmBackend::acquire(const SandboxKey& key, const SandboxSpec& spec) {
  return obtain(key, spec, nullptr);
}

std::shared_ptr<Sandbox> MicrovmBackend::obtain(const SandboxKey& key, const SandboxSpec& spec,
                                                const SnapshotRecord* from) {
  if (spec.egress() == Egress::unrestricted) {
    throw EgressNotEnforced(
        "the microvm backend never gives a guest a network device (unrestricted); it runs "
        "closed, or allowlisted through the host's egress proxy",
        "egress");
  }
  const std::string id = sandbox_identity(key, spec.kind(), spec.egress_posture(), 24);
  const auto held = identities_.mutex_for(id);
  std::lock_guard in_process(*held);
  const base::UniqueFd across_processes = backend_kit::lock_identity(base() / "locks", id, "microvm");
  {
    std::lock_guard lock(live_mutex_);
    const auto found = live_.find(id);
    if (found != live_.end() && from == nullptr) {
      const auto& instance = found->second;
      bool usable = false;
      {
        std::lock_guard vm_lock(instance->mutex);
        usable = instance->vm && instance->vm->alive() && !instance->vm->channel()->gone();
      }
      if (usable) {
        if (auto cached = identities_.find(id, [](MicrovmSandbox&) { return true; })) {
          return cached;
        }
        auto made = handle(instance, key);
        identities_.remember(id, made);
        return made;
      }
      spdlog::info("microvm: sandbox {} has ended; replacing it", id);
    }
  }
  if (const auto record = read_record(id)) {
    if (record->owner_pid != ::getpid() && owner_alive(*record)) {
      throw BackendError(
          "the microvm sandbox for this key is held by another process",
          "pid " + std::to_string(record->owner_pid) +
              " owns it; a microVM lives in the process that made it (use airlockd to share "
              "sandboxes between processes)");
    }
  }
  teardown(id);
  auto instance = create(id, key, spec, from);
  {
    std::lock_guard lock(live_mutex_);
    live_[id] = instance;
  }
  auto made = handle(instance, key);
  identities_.remember(id, made);
  return made;
}

std::shared_ptr<Instance> MicrovmBackend::create(const std::string& id, const SandboxKey& key,
                                                 const SandboxSpec& spec,
                                                 const SnapshotRecord* from) {
  Shape shape;
  std::optional<images::ImagePin> pin;
  json::Json saved;  // a snapshot's own record: its shape and what it was made on
  if (from == nullptr) {
    const std::string reference =
        spec.image_id() ? *spec.image_id() : spec.image().value_or(config_.default_image);
    pin.emplace(images_.pin(reference));
    const ResourceLimits& asked = spec.resources();
    const ResourceLimits& fallback = config_.default_resources;
    shape.image_id = pin->image().id;
    shape.rootfs = pin->image().rootfs;
    const auto disk = asked.disk_bytes ? asked.disk_bytes : fallback.disk_bytes;
    if (!disk || *disk < (std::uint64_t{16} << 20)) {
      throw InvalidArgument("resources.disk_bytes: the microvm backend needs a disk of at least "
                            "16 MiB (it is the guest's root file system)",
                            "resources.disk_bytes");
    }
    shape.disk_bytes = *disk;
    const auto memory = asked.memory_bytes ? asked.memory_bytes : fallback.memory_bytes;
    if (!memory || *memory < (std::uint64_t{64} << 20)) {
      throw InvalidArgument("resources.memory_bytes: the microvm backend needs at least 64 MiB "
                            "of guest memory",
                            "resources.memory_bytes");
    }
    shape.memory_bytes = (*memory >> 20) << 20;
    const auto cpu = asked.cpu_millis ? asked.cpu_millis : fallback.cpu_millis;
    shape.vcpus =
        cpu ? static_cast<unsigned>(std::max<std::uint64_t>(1, (*cpu + 999) / 1000)) : 1;
  } else {
    // The snapshot's shape, whatever the spec asks: its memory image holds that much RAM and
    // that many vCPUs, and its disk that file system.
    saved = read_snapshot_json(from->id);
    const json::Json& made = saved.at("microvm");
    if (made.at("guest").get<std::string>() != guest_identity_) {
      throw BackendError("snapshot '" + from->id + "' cannot be resumed here",
                         "it was saved under another QEMU, guest kernel or agent than this "
                         "backend runs, whose memory image this one cannot load");
    }
    pin.emplace(images_.pin(made.at("image_id").get<std::string>()));
    shape.image_id = pin->image().id;
    shape.rootfs = pin->image().rootfs;
    shape.disk_bytes = made.at("disk_bytes").get<std::uint64_t>();
    shape.memory_bytes = made.at("memory_bytes").get<std::uint64_t>();
    shape.vcpus = made.at("vcpus").get<unsigned>();
  }

  Record record;
  record.id = id;
  record.instance_id = random_hex(6);
  record.kind = spec.kind();
  record.labels = sandbox_labels(key, spec);
  record.egress_posture = spec.egress_posture();
  record.image = pin->image().reference;
  record.work_dir = normalize_guest_path(spec.work_dir());
  record.created_at_ms = now_ms();
  record.owner_pid = ::getpid();
  record.owner_start = process_start(::getpid());

  const fs::path directory = sandbox_dir(id);
  const fs::path vm_directory = directory / "vm";
  std::error_code error;
  fs::create_directories(vm_directory, error);
  if (error) throw SystemError("could not make the sandbox's directory", error.value(), directory);
  ::chmod(directory.c_str(), 0700);
  write_record(record);

  auto instance = std::make_shared<Instance>();
  instance->record = record;
  instance->shape = shape;
  // Each step's time, for the debug log (and the bench's reading of where a start goes).
  const auto began = Clock::now();
  std::string steps;
  auto step = [&, last = began](const char* name) mutable {
    const auto now = Clock::now();
    steps += fmt::format("{} {:.1f} ms, ", name,
                         std::chrono::duration<double, std::milli>(now - last).count());
    last = now;
  };
  try {
    std::unique_lock shapes(shapes_mutex_);
    const fs::path disk_image = ensure_disk_image(shape);
    const bool from_template = from == nullptr && config_.snapshots;
    fs::path template_directory;
    if (from != nullptr) {
      template_directory = saved.at("microvm").at("base_disk").get<std::string>();
      template_directory = template_directory.parent_path();
    } else if (from_template) {
      template_directory = ensure_template(shape, disk_image);
    }
    shapes.unlock();
    step("shape (disk image, template)");
    if (from != nullptr) {
      instance->base_disk = saved.at("microvm").at("base_disk").get<std::string>();
      instance->base_format = saved.at("microvm").at("base_format").get<std::string>();
      if (::access(instance->base_disk.c_str(), R_OK) != 0) {
        throw BackendError("snapshot '" + from->id + "' cannot be resumed here",
                           "the disk it is a layer over is gone: " + instance->base_disk.string());
      }
    } else if (from_template) {
      instance->base_disk = template_directory / "disk.qcow2";
      instance->base_format = "qcow2";
    } else {
      instance->base_disk = disk_image;
      instance->base_format = "raw";
    }
    const fs::path layer = vm_directory / "disk.qcow2";
    // The layer is the only host disk a guest writes. Reserved whole (preallocated: its
    // clusters allocated, their subclusters still reading through to the backing file), a
    // guest filling its disk takes nothing more from the host, and a host without the room
    // refuses the acquire here instead of failing the guest's writes later.
    const auto make_layer = [&](const fs::path& backing, const std::string& format) {
      std::vector<std::string> create = {config_.qemu_img_path.string(), "create", "-q", "-f",
                                         "qcow2", "-F", format, "-b", backing.string()};
      if (config_.reserve_disk) {
        create.insert(create.end(),
                      {"-o", "preallocation=falloc,extended_l2=on,cluster_size=128k"});
      }
      create.push_back(layer.string());
      run_or_throw(create, "make the sandbox's disk layer (qemu-img create)");
    };
    if (from != nullptr) {
      // The snapshot's disk is copied into the sandbox's own layer, which then stands over the
      // same base: the sandbox never depends on the snapshot's files, which may be deleted
      // while it runs.
      make_layer(snapshot_dir(from->id) / "disk.qcow2", "qcow2");
      run_or_throw({config_.qemu_img_path.string(), "rebase", "-q", "-f", "qcow2", "-F",
                    instance->base_format, "-b", instance->base_disk.string(), layer.string()},
                   "copy the snapshot's disk into the sandbox's layer (qemu-img rebase)");
    } else {
      make_layer(instance->base_disk, instance->base_format);
    }
    step("disk layer");
    ::chown(vm_directory.c_str(), config_.jail_uid, config_.jail_uid);
    ::chown(layer.c_str(), config_.jail_uid, config_.jail_uid);
    ::chmod(vm_directory.c_str(), 0700);
    VmPlan plan = plan_for(shape, vm_directory, make_cgroups(id, shape));
    step("cgroups");
    plan.read_only = {disk_image};
    if (instance->base_disk != disk_image) plan.read_only.push_back(instance->base_disk);
    fs::path memory;
    if (from != nullptr) {
      memory = snapshot_dir(from->id) / "memory.mig";
    } else if (from_template) {
      memory = template_directory / "memory.mig";
    }
    if (!memory.empty()) {
      plan.incoming.reset(::open(memory.c_str(), O_RDONLY | O_CLOEXEC));
      if (!plan.incoming) throw SystemError("could not open a memory image", errno, memory);
    }
    const auto deadline = Clock::now() + config_.boot_timeout;
    instance->vm = VirtualMachine::start(std::move(plan), deadline);
    step("jail and QEMU up");
    if (!memory.empty()) {
      instance->vm->resume(deadline);
      step("memory loaded, running");
    } else {
      instance->vm->await_hello(deadline);
      step("booted");
    }
    // Every VM, booted or restored, gets the time, fresh randomness, its work dir and its
    // environment now: a restored one wakes with the clock and random state it was saved with.
    GuestSetup setup;
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    setup.realtime_seconds = std::chrono::duration_cast<std::chrono::seconds>(now).count();
    setup.realtime_nanoseconds =
        std::chrono::duration_cast<std::chrono::nanoseconds>(now).count() % 1000000000;
    setup.seed = random_bytes(kSeedBytes);
    setup.workdir = record.work_dir;
    setup.environment = environment_for(pin->image());
    if (spec.egress() == Egress::allowlist) {
      setup.egress_port = kEgressBridgePort;
      const std::string proxy = "http://127.0.0.1:" + std::to_string(kEgressBridgePort);
      for (const char* name : {"HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"}) {
        setup.environment.push_back(std::string(name) + "=" + proxy);
      }
      setup.environment.emplace_back("NO_PROXY=localhost,127.0.0.1");
      setup.environment.emplace_back("no_proxy=localhost,127.0.0.1");
      EgressPolicy policy = config_.egress_policy;
      policy.allowed_hosts = spec.egress_allow();
      const fs::path socket = directory / "egress.sock";
      egress_.listen(id, socket, std::move(policy), record.instance_id);
      instance->vm->channel()->set_egress_connector([directory]() -> base::UniqueFd {
        base::UniqueFd dir(::open(directory.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
        if (!dir) return {};
        const std::string path = "/proc/self/fd/" + std::to_string(dir.get()) + "/egress.sock";
        sockaddr_un address{};
        address.sun_family = AF_UNIX;
        std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
        base::UniqueFd socket_fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
        if (!socket_fd ||
            ::connect(socket_fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) !=
                0) {
          return {};
        }
        return socket_fd;
      });
    }
    instance->vm->setup(setup, deadline);
    step("setup");
    spdlog::debug("microvm: sandbox {} started in {:.1f} ms: {}", id,
                  std::chrono::duration<double, std::milli>(Clock::now() - began).count(),
                  steps.substr(0, steps.size() - 2));
  } catch (...) {
    if (instance->vm) instance->vm->kill();
    teardown(id);
    throw;
  }
  return instance;
}

bool MicrovmBackend::teardown(const std::string& id) noexcept {
  bool clean = true;
  backend_kit::contained("microvm", "teardown", [&] {
    std::shared_ptr<Instance> instance;
    {
      std::lock_guard lock(live_mutex_);
      const auto found = live_.find(id);
      if (found != live_.end()) {
        instance = found->second;
        live_.erase(found);
      }
    }
    if (instance) {
      std::lock_guard vm_lock(instance->mutex);
      if (instance->vm) instance->vm->kill();
    }
    identities_.forget(id);
    egress_.stop(id);
    // Another process's VM ends through its cgroup; ours is already gone.
    clean = backend_kit::destroy_cgroups(cgroups_for(id), std::chrono::seconds(5)) && clean;
    std::error_code error;
    fs::remove_all(sandbox_dir(id), error);
    if (error) clean = false;
  });
  return clean;
}

std::vector<std::string> MicrovmBackend::cgroup_names() const {
  std::set<std::string> names;
  const std::string prefix = cgroup_prefix_ + "-";
  for (const auto& directory : cgroups_for("x")) {
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(fs::path(directory).parent_path(), error)) {
      const std::string name = entry.path().filename().string();
      if (entry.is_directory(error) && name.rfind(prefix, 0) == 0) {
        names.insert(name.substr(prefix.size()));
      }
    }
  }
  return {names.begin(), names.end()};
}

void MicrovmBackend::reclaim_dead_owners() noexcept {
  backend_kit::contained("microvm", "reclaim", [&] {
    for (const auto& id : ids()) {
      const auto record = read_record(id);
      if (record && owner_alive(*record)) continue;
      spdlog::info("microvm: reclaiming sandbox {} (its owner is gone)", id);
      teardown(id);
    }
    // Templates made for another QEMU, kernel or agent are never restored again; once no
    // sandbox of this state directory is left (a live one's disk may still be backed by one),
    // they go.
    std::error_code error;
    if (ids().empty()) {
      for (const auto& entry : fs::directory_iterator(base() / "templates", error)) {
        const std::string name = entry.path().filename().string();
        if (name.find(".staging-") != std::string::npos) continue;
        std::string made_for;
        std::ifstream guest(entry.path() / "guest");
        std::getline(guest, made_for);
        if (made_for == guest_identity_) continue;
        const fs::path lock_path = base() / "locks" / ("template-" + name + ".lock");
        base::UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC));
        if (lock && ::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) continue;
        spdlog::info("microvm: removing template {}, made for another QEMU, kernel or agent", name);
        fs::remove_all(entry.path(), error);
      }
    }
    // Snapshots a dead process left half-saved (".snap-….staging-<pid>").
    for (const auto& entry : fs::directory_iterator(base() / "snapshots", error)) {
      const std::string name = entry.path().filename().string();
      const auto marker = name.rfind(".staging-");
      if (name.front() != '.' || marker == std::string::npos) continue;
      const long pid = std::strtol(name.c_str() + marker + 9, nullptr, 10);
      if (pid > 0 && pid != ::getpid() && ::kill(static_cast<pid_t>(pid), 0) == 0) continue;
      fs::remove_all(entry.path(), error);
    }
    // Template builds and probes a dead process left half-made.
    for (const auto& entry : fs::directory_iterator(base() / "templates", error)) {
      const std::string name = entry.path().filename().string();
      if (name.find(".staging-") == std::string::npos) continue;
      const std::string hash = name.substr(0, name.find(".staging-"));
      // Held by a live builder: its lock says so.
      const fs::path lock_path = base() / "locks" / ("template-" + hash + ".lock");
      base::UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC));
      if (lock && ::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) continue;
      fs::remove_all(entry.path(), error);
    }
    // Cgroups of sandboxes without a directory, and of template builds and probes nobody runs
    // any more (an empty cgroup is removed; a busy one belongs to a live builder).
    for (const auto& name : cgroup_names()) {
      const bool builder = name.rfind("t-", 0) == 0 || name.rfind("p-", 0) == 0;
      if (builder) {
        for (const auto& directory : cgroups_for(name)) ::rmdir(directory.c_str());
      } else if (!fs::exists(sandbox_dir(name), error)) {
        backend_kit::destroy_cgroups(cgroups_for(name), std::chrono::seconds(5));
      }
    }
  });
}

void MicrovmBackend::dispose(const SandboxKey& key) noexcept {
  backend_kit::contained("microvm", "dispose", [&] {
    const auto wanted = backend_kit::key_labels(key);
    for (const auto& id : ids()) {
      const auto record = read_record(id);
      if (record && backend_kit::labels_match(record->labels, wanted)) teardown(id);
    }
  });
}

bool MicrovmBackend::dispose_kind(const SandboxKey& key, std::string_view kind,
                                  std::optional<std::string_view> instance_id) noexcept {
  bool gone = true;
  backend_kit::contained("microvm", "dispose_kind", [&] {
    const auto wanted = backend_kit::kind_labels(key, kind);
    for (const auto& id : ids()) {
      const auto record = read_record(id);
      if (!record || !backend_kit::labels_match(record->labels, wanted)) continue;
      if (instance_id && record->instance_id != *instance_id) continue;
      gone = teardown(id) && gone;
    }
  });
  return gone;
}

int MicrovmBackend::dispose_scope(std::string_view scope,
                                  std::optional<std::string_view> thread_id) noexcept {
  int disposed = 0;
  backend_kit::contained("microvm", "dispose_scope", [&] {
    const auto wanted = backend_kit::scope_labels(scope, thread_id);
    for (const auto& id : ids()) {
      const auto record = read_record(id);
      if (record && backend_kit::labels_match(record->labels, wanted) && teardown(id)) {
        ++disposed;
      }
    }
    for (const auto& snapshot : list_snapshots()) {
      if (backend_kit::labels_match(snapshot.labels, wanted)) delete_snapshot(snapshot.id);
    }
  });
  return disposed;
}

std::vector<SandboxRecord> MicrovmBackend::list_sandboxes() {
  std::vector<SandboxRecord> out;
  for (const auto& id : ids()) {
    const auto record = read_record(id);
    if (!record) continue;
    SandboxRecord listed;
    listed.backend = "microvm";
    listed.instance_id = record->instance_id;
    listed.kind = record->kind;
    listed.labels = record->labels;
    listed.egress_posture = record->egress_posture;
    listed.state = owner_alive(*record) ? "running" : "dead";
    listed.created_at =
        std::chrono::system_clock::time_point(std::chrono::milliseconds(record->created_at_ms));
    out.push_back(std::move(listed));
  }
  return out;
}

int MicrovmBackend::purge_all() noexcept {
  int purged = 0;
  backend_kit::contained("microvm", "purge_all", [&] {
    for (const auto& id : ids()) {
      if (teardown(id)) ++purged;
    }
    for (const auto& snapshot : list_snapshots()) delete_snapshot(snapshot.id);
    for (const auto& name : cgroup_names()) {
      const bool builder = name.rfind("t-", 0) == 0 || name.rfind("p-", 0) == 0;
      if (builder) {
        for (const auto& directory : cgroups_for(name)) ::rmdir(directory.c_str());
      } else {
        backend_kit::destroy_cgroups(cgroups_for(name), std::chrono::seconds(5));
      }
    }
  });
  return purged;
}

// ---- snapshots ----

fs::path MicrovmBackend::snapshot_dir(const std::string& id) const {
  return base() / "snapshots" / id;
}

json::Json MicrovmBackend::read_snapshot_json(const std::string& id) const {
  if (!is_snapshot_id(id)) throw NotFound("no snapshot '" + id + "'");
  std::ifstream in(snapshot_dir(id) / "record.json");
  if (!in) throw NotFound("no snapshot '" + id + "'");
  try {
    return json::Json::parse(in);
  } catch (const std::exception& error) {
    throw BackendError("snapshot '" + id + "' has an unreadable record", error.what());
  }
}

std::optional<SnapshotRecord> MicrovmBackend::find_snapshot(std::string_view id) {
  if (!is_snapshot_id(id)) return std::nullopt;
  try {
    return json::parse_snapshot_record(read_snapshot_json(std::string(id)),
                                       "snapshot " + std::string(id));
  } catch (const NotFound&) {
    return std::nullopt;
  } catch (const std::exception& error) {
    spdlog::warn("microvm: snapshot {}: {}", id, error_detail(error));
    return std::nullopt;
  }
}

std::vector<SnapshotRecord> MicrovmBackend::list_snapshots() {
  std::vector<SnapshotRecord> out;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(base() / "snapshots", error)) {
    const std::string name = entry.path().filename().string();
    if (!is_snapshot_id(name)) continue;  // a staging directory, or nothing of ours
    if (auto record = find_snapshot(name)) out.push_back(std::move(*record));
  }
  return out;
}

bool MicrovmBackend::delete_snapshot(std::string_view id) noexcept {
  bool gone = true;
  backend_kit::contained("microvm", "delete_snapshot", [&] {
    if (!is_snapshot_id(id)) return;
    std::error_code error;
    fs::remove_all(snapshot_dir(std::string(id)), error);
    gone = !error;
  });
  return gone;
}

std::shared_ptr<Sandbox> MicrovmBackend::acquire_from_snapshot(const SandboxKey& key,
                                                               const SandboxSpec& spec,
                                                               const SnapshotRecord& snapshot) {
  if (snapshot.backend != "microvm" || !is_snapshot_id(snapshot.id)) {
    throw InvalidArgument("snapshot '" + snapshot.id + "' is not one of the microvm backend's",
                          "snapshot");
  }
  return obtain(key, spec, &snapshot);
}

}  // namespace airlock::microvm_backend

namespace airlock {

std::string_view to_string(MicrovmAccel accel) noexcept {
  switch (accel) {
    case MicrovmAccel::automatic:
      return "auto";
    case MicrovmAccel::kvm:
      return "kvm";
    case MicrovmAccel::tcg:
      return "tcg";
  }
  return "tcg";
}

std::shared_ptr<SandboxBackend> make_microvm_backend(MicrovmBackendConfig config) {
  return std::make_shared<microvm_backend::MicrovmBackend>(std::move(config));
}

}  // namespace airlock
