#include "backends/gvisor/gvisor_backend.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "airlock/paths.hpp"
#include "airlock/state_dir.hpp"
#include "backends/gvisor/bundle.hpp"
#include "backends/kit/guest/channel_frames.hpp"
#include "backends/gvisor/cleanup.hpp"
#include "backends/gvisor/guest_protocol.hpp"
#include "backends/kit/contained.hpp"
#include "backends/kit/labels.hpp"

namespace airlock::gvisor_backend {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kHostTasksPerGuestProcess = 8;

std::filesystem::path resolved_state_dir(const GvisorBackendConfig& config) {
  return config.state_dir.empty() ? default_state_dir() : config.state_dir;
}

std::filesystem::path resolved_image_store(const GvisorBackendConfig& config) {
  return config.image_store.empty() ? resolved_state_dir(config) / "images" : config.image_store;
}

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string read_tail(const std::filesystem::path& path, std::size_t limit = 4096) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  std::string all = text.str();
  return all.size() > limit ? all.substr(all.size() - limit) : all;
}

// The environment of PID 1 and so of every exec: the image's, then a PATH and HOME when the
// image names none.
std::vector<std::string> environment_for(const images::ImageInfo& image) {
  std::vector<std::string> environment = image.config.env;
  auto has = [&environment](const std::string& name) {
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

// Waits for the shepherd's "create <code>" line; nullopt on EOF or timeout.
std::optional<int> await_create(int status_fd, std::chrono::milliseconds timeout) {
  std::string text;
  const auto deadline = Clock::now() + timeout;
  char buffer[256];
  while (text.find('\n') == std::string::npos) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return std::nullopt;
    pollfd watch{status_fd, POLLIN, 0};
    const int ready = ::poll(&watch, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    const ssize_t got = ::read(status_fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return std::nullopt;
    text.append(buffer, static_cast<std::size_t>(got));
  }
  if (text.rfind("create ", 0) != 0) return std::nullopt;
  return std::atoi(text.c_str() + 7);
}

// runsc's Gofer opens the rootfs and the helper directory as the sandbox's host uid and gid
// (uid_base), so `directory` and every directory above it must let it pass: others may (o+x),
// or its group may (g+x, group uid_base — the image store's content/ is so). Refuse up front,
// naming the directory, rather than let every create fail with runsc's "permission denied".
void require_traversable(const std::filesystem::path& target, const char* what,
                         std::uint32_t uid_base) {
  std::error_code error;
  auto directory = std::filesystem::absolute(target, error);
  for (; !directory.empty(); directory = directory.parent_path()) {
    struct stat info {};
    const auto passes = [&info, uid_base] {
      return (info.st_mode & S_IXOTH) != 0 ||
             ((info.st_mode & S_IXGRP) != 0 && info.st_gid == uid_base);
    };
    if (::stat(directory.c_str(), &info) == 0 && !passes()) {
      throw InvalidArgument(std::string("the gvisor backend's ") + what + " is under " +
                                directory.string() +
                                ", which other users cannot pass through; runsc's file proxy "
                                "runs as an unprivileged uid and needs that (chmod o+x it, or "
                                "choose another directory)",
                            what);
    }
    if (directory == directory.root_path()) break;
  }
}

constexpr std::uint64_t kMinimumStorageBytes = std::uint64_t{1} << 20;

// The command channel's directory, the Gofer's (uid_base) and nobody else's, and the token the
// keeper proves itself with, host root's alone (the shepherd pipes it to the keeper's stdin). A
// sandbox restored from a snapshot takes the snapshot's token: its keeper is the one that was
// saved, and holds that token in its memory.
void prepare_control(const std::filesystem::path& directory,
                     const std::filesystem::path& token_file, std::uint32_t uid_base,
                     const std::string& given_token) {
  if ((::mkdir(directory.c_str(), 0700) != 0 && errno != EEXIST) ||
      ::chown(directory.c_str(), uid_base, uid_base) != 0 || ::chmod(directory.c_str(), 0700)) {
    throw SystemError("could not prepare the sandbox's control directory", errno,
                      directory.string());
  }
  base::UniqueFd file(
      ::open(token_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
  const std::string token =
      given_token.empty() ? random_hex(gvisor_guest::kTokenLength / 2) : given_token;
  if (!file ||
      ::write(file.get(), token.data(), token.size()) != static_cast<ssize_t>(token.size())) {
    throw SystemError("could not write the sandbox's token", errno, token_file.string());
  }
}

std::optional<std::uint64_t> optional_count(const json::Json& object, const char* name) {
  const auto found = object.find(name);
  if (found == object.end() || !found->is_number_unsigned()) return std::nullopt;
  return found->get<std::uint64_t>();
}

std::string read_token(const std::filesystem::path& file) {
  base::UniqueFd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  char text[128];
  const ssize_t size = fd ? ::read(fd.get(), text, sizeof text) : -1;
  if (size != static_cast<ssize_t>(gvisor_guest::kTokenLength)) {
    throw BackendError("a snapshot's token is missing or damaged", file.string());
  }
  return std::string(text, static_cast<std::size_t>(size));
}

}  // namespace

GvisorBackend::GvisorBackend(GvisorBackendConfig config)
    : config_(std::make_shared<const GvisorBackendConfig>(std::move(config))),
      store_(resolved_state_dir(*config_)),
      images_(resolved_image_store(*config_), images::OwnershipMap::shifted(config_->uid_base)),
      egress_(config_->egress_decisions) {
  if (::geteuid() != 0) {
    throw NotSupported(
        "the gvisor backend needs root: runsc creates namespaces and cgroups "
        "(run as root, or use another backend)");
  }
  require_traversable(store_.base(), "state_dir", config_->uid_base);
  require_traversable(resolved_image_store(*config_) / "content", "image_store", config_->uid_base);
  const auto binary = locate_runsc(config_->runsc_path);
  helper_source_ = locate_guest_helper(config_->guest_helper_path);
  store_.ensure_layout(config_->uid_base);
  runsc_ = std::make_shared<const Runsc>(binary, store_.runsc_root(), config_->runsc_timeout);
  helper_directory_ = install_helper();
  state_tag_ = sha256_hex(std::filesystem::absolute(store_.base()).string()).substr(0, 8);
  reclaim_snapshot_staging();
  if (config_->platform) {
    platform_ = *config_->platform;
  } else {
    const GvisorPlatformProbe probe = probe_gvisor_platform(binary, helper_source_);
    if (!probe.working) {
      std::string tried;
      for (const auto& failure : probe.failures) tried += (tried.empty() ? "" : "; ") + failure;
      throw BackendError("gVisor cannot run containers on this host: no platform works",
                         "tried " + tried + " (runsc " + binary.string() + ")");
    }
    platform_ = *probe.working;
    spdlog::debug("gvisor: platform {} ({:.0f} ms to probe)", to_string(platform_),
                  probe.probe_milliseconds);
  }
}

std::optional<EgressSet> GvisorBackend::egress_modes() const {
  return EgressSet{Egress::closed, Egress::allowlist};
}

std::optional<CapabilitySet> GvisorBackend::capabilities() const {
  return CapabilitySet{Capability::exec,       Capability::run_code,   Capability::files_in,
                       Capability::files_out,  Capability::files_list, Capability::files_delete,
                       Capability::host_tools, Capability::snapshot};
}

// The helper is copied (content-addressed) beside our state, so a rebuilt or removed build tree
// never changes what a running sandbox has mounted; the directory holds nothing else.
std::filesystem::path GvisorBackend::install_helper() const {
  std::ifstream in(helper_source_, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  const std::string content = bytes.str();
  if (content.empty()) {
    throw BackendError("the gvisor backend's guest helper is unreadable", helper_source_.string());
  }
  const auto directory = store_.base() / "helpers" / sha256_hex(content).substr(0, 32);
  const auto target = directory / gvisor_guest::kGuestHelperName;
  std::error_code error;
  if (std::filesystem::is_regular_file(target, error)) return directory;
  std::filesystem::create_directories(directory, error);
  const auto staging = directory / (std::string(".staging-") + random_hex(6));
  {
    std::ofstream out(staging, std::ios::binary | std::ios::trunc);
    out << content;
    if (!out) throw BackendError("could not install the guest helper", staging.string());
  }
  ::chmod(staging.c_str(), 0755);
  ::chmod(directory.c_str(), 0755);
  std::filesystem::rename(staging, target, error);
  if (error) throw BackendError("could not install the guest helper", error.message());
  return directory;
}

std::string GvisorBackend::container_id(const SandboxKey& key, std::string_view kind,
                                        std::string_view posture) const {
  return "airlock-" + state_tag_ + "-" + sandbox_identity(key, kind, posture, 24);
}

std::shared_ptr<Sandbox> GvisorBackend::acquire(const SandboxKey& key, const SandboxSpec& spec) {
  if (spec.egress() == Egress::unrestricted) {
    throw EgressNotEnforced(
        "the gvisor backend never gives a sandbox the host's network (unrestricted); it runs "
        "closed, or allowlisted through the host's egress proxy",
        "egress");
  }
  storage_bytes(spec);  // refused before anything is made
  const std::string id = container_id(key, spec.kind(), spec.egress_posture());
  const auto held = live_.mutex_for(id);
  std::lock_guard in_process(*held);
  const base::UniqueFd across_processes = store_.lock(id);

  const auto record = store_.read(id);
  if (record && record->state == "running") {
    const auto running = runsc_->state(id);
    if (running && running->status == "running") {
      // A snapshot sets the keeper socket aside under this same lock: one found aside now was
      // left by a process that died while saving, and goes back, or the keeper cannot dial.
      const auto parked = store_.parked_keeper_socket(id);
      if (::access(parked.c_str(), F_OK) == 0) {
        const auto socket = store_.control_dir(id) / kKeeperSocketName;
        if (::rename(parked.c_str(), socket.c_str()) != 0) {
          spdlog::warn("gvisor: could not give {}'s keeper socket back: {}", id,
                       std::strerror(errno));
        }
      }
      if (auto cached = live_.find(id, [&](GvisorSandbox& sandbox) {
            return sandbox.instance_id() == record->instance_id;
          })) {
        return cached;
      }
      // The proxy lives in the acquiring process: an adopter serves the sandbox's egress.
      if (spec.egress() == Egress::allowlist) listen_for_egress(id, spec, record->instance_id);
      auto adopted = adopt(*record, key);
      live_.remember(id, adopted);
      return adopted;
    }
    spdlog::info("gvisor: sandbox {} is no longer running ({}); replacing it", id,
                 running ? running->status : "unknown to runsc");
  }
  if (record || (runsc_->may_know(id) && runsc_->state(id)) || !leftover_cgroups(id).empty()) {
    teardown_locked(id);
  }
  auto created = create(id, key, spec);
  live_.remember(id, created);
  return created;
}

std::uint64_t GvisorBackend::storage_bytes(const SandboxSpec& spec) const {
  const auto disk = spec.resources().disk_bytes ? spec.resources().disk_bytes
                                                : config_->default_resources.disk_bytes;
  if (!disk) {
    throw InvalidArgument(
        "resources.disk_bytes: the gvisor backend keeps everything a guest "
        "writes in a bounded store, so it needs a size (the config's "
        "disk_bytes is unset and the spec names none)",
        "resources.disk_bytes");
  }
  if (*disk < kMinimumStorageBytes) {
    throw InvalidArgument("resources.disk_bytes: at least 1 MiB", "resources.disk_bytes");
  }
  return *disk;
}

std::shared_ptr<GvisorSandbox> GvisorBackend::adopt(const Record& record, const SandboxKey& key) {
  auto channel =
      std::make_shared<GuestChannel>(store_.broker_socket(record.id), store_.token_file(record.id));
  return std::make_shared<GvisorSandbox>(
      std::move(channel), config_, record.id, record.instance_id, key, record.kind, record.work_dir,
      record.egress_posture.rfind("allowlist", 0) == 0, weak_from_this());
}

std::shared_ptr<GvisorSandbox> GvisorBackend::create(const std::string& id, const SandboxKey& key,
                                                     const SandboxSpec& spec, const Restore* from) {
  // A restore takes what the snapshot was made of: its image (by id), its helper, its shape.
  const json::Json* made = from != nullptr ? &from->saved.at("gvisor") : nullptr;
  const std::string reference = made != nullptr   ? made->at("image_id").get<std::string>()
                                : spec.image_id() ? *spec.image_id()
                                                  : spec.image().value_or(config_->default_image);
  images::ImagePin pin = images_.pin(reference);
  const auto directory = store_.sandbox_dir(id);
  const auto bundle = directory / "bundle";
  const ResourceLimits& asked = spec.resources();
  const ResourceLimits& fallback = config_->default_resources;

  Record record;
  record.id = id;
  record.instance_id = random_hex(12);
  record.kind = spec.kind();
  record.labels = sandbox_labels(key, spec);
  record.egress_posture = spec.egress_posture();
  record.state = "creating";
  record.image =
      made != nullptr ? from->saved.at("image").get<std::string>() : pin.image().reference;
  record.image_id = pin.image().id;
  record.work_dir = normalize_guest_path(spec.work_dir());
  record.platform = std::string(to_string(platform_));
  record.created_at_ms = now_ms();
  if (made != nullptr) {
    record.helper_directory = made->at("helper_directory").get<std::string>();
    record.disk_bytes = made->at("disk_bytes").get<std::uint64_t>();
    record.memory_bytes = optional_count(*made, "memory_bytes");
    record.pids = optional_count(*made, "pids");
    record.cpu_millis = optional_count(*made, "cpu_millis");
    record.from_snapshot = from->snapshot_id;
  } else {
    record.helper_directory = helper_directory_.string();
    record.disk_bytes = storage_bytes(spec);
    record.memory_bytes = asked.memory_bytes ? asked.memory_bytes : fallback.memory_bytes;
    record.pids = asked.pids ? asked.pids : fallback.pids;
    record.cpu_millis = asked.cpu_millis ? asked.cpu_millis : fallback.cpu_millis;
  }
  store_.write(record);

  try {
    BundlePlan plan;
    plan.rootfs = pin.image().rootfs;
    plan.helper_directory = record.helper_directory;
    plan.empty_directory = store_.empty_dir();
    plan.cgroups_path = std::string("/") + kCgroupParent + "/" + id;
    // The keeper makes the work dir at its start; a restored keeper made the snapshot's.
    plan.work_dir =
        made != nullptr ? from->saved.at("work_dir").get<std::string>() : record.work_dir;
    plan.uid_base = config_->uid_base;
    plan.environment = environment_for(pin.image());
    // The command channel: the keeper proves itself with this token on every connection.
    plan.control_directory = store_.control_dir(id);
    prepare_control(
        plan.control_directory, store_.token_file(id), config_->uid_base,
        from != nullptr ? read_token(snapshot_dir(from->snapshot_id) / "token") : std::string());
    // Every sandbox has its egress directory bound and its keeper's bridge listening, so that
    // one restored under another posture than it was saved under has the mounts it was saved
    // with: under `closed` the directory stays empty and the bridge leads nowhere.
    const bool saved_allowlist =
        made != nullptr
            ? from->saved.at("egress_posture").get<std::string>().rfind("allowlist", 0) == 0
            : spec.egress() == Egress::allowlist;
    if (saved_allowlist) {
      for (const auto& [name, value] : egress_proxy_environment()) {
        plan.environment.push_back(name + "=" + value);
      }
    }
    plan.egress_directory = prepare_egress_directory(id);
    // The socket exists before the container: the Gofer binds the directory at start.
    if (spec.egress() == Egress::allowlist) listen_for_egress(id, spec, record.instance_id);
    plan.memory_bytes = record.memory_bytes;
    plan.cpu_millis = record.cpu_millis;
    if (record.pids) {
      plan.guest_pids = *record.pids;
      // Measured under systrap: each guest process costs the host several tasks (its stub and
      // the Sentry threads serving it); 24 guest processes overran a host limit of 152.
      plan.host_pids = *record.pids * kHostTasksPerGuestProcess + config_->pids_overhead;
    }
    write_bundle(bundle, plan);

    // Everything the guest writes — the root and the binds of /tmp and /dev/shm, all overlaid —
    // goes to runsc's file stores in `storage`, a tmpfs of disk_bytes that the shepherd mounts
    // in a mount namespace of its own (the host's mount table never holds it).
    const auto storage = store_.storage_dir(id);
    if (::mkdir(storage.c_str(), 0700) != 0 && errno != EEXIST) {
      throw SystemError("could not prepare the sandbox's storage", errno, storage.string());
    }
    std::vector<std::string> flags = {"--platform=" + std::string(to_string(platform_)),
                                      "--network=none", "--overlay2=all:dir=" + storage.string()};
    // Lets the guest connect to host unix sockets bound into it: the keeper socket, and the
    // proxy's under allowlist. (Creating one on the host stays refused.)
    flags.emplace_back("--host-uds=open");
    std::filesystem::path image_link;
    if (from != nullptr) {
      // The image is linked into the sandbox's own directory first, so that a delete of the
      // snapshot while runsc reads it takes nothing from under the restore.
      image_link = directory / "checkpoint";
      std::error_code error;
      std::filesystem::create_directory(image_link, error);
      std::size_t linked = 0;
      for (const auto& entry :
           std::filesystem::directory_iterator(snapshot_dir(from->snapshot_id) / "image", error)) {
        const auto target = image_link / entry.path().filename();
        std::filesystem::create_hard_link(entry.path(), target, error);
        // Another filesystem under the state directory: a copy, then.
        if (error == std::errc::cross_device_link) {
          std::filesystem::copy_file(entry.path(), target, error);
        }
        if (error) break;
        ++linked;
      }
      if (error == std::errc::no_such_file_or_directory || (!error && linked == 0)) {
        throw NotFound("no snapshot '" + from->snapshot_id + "' (deleted while it was resumed)");
      }
      if (error) {
        throw SystemError("could not take the snapshot's image for the restore", error.value(),
                          image_link.string());
      }
      for (const auto& word :
           {std::string("restore"), std::string("--detach"), "--image-path=" + image_link.string(),
            "--bundle=" + bundle.string(), id}) {
        flags.push_back(word);
      }
    } else {
      for (const auto& word :
           {std::string("run"), std::string("--detach"), "--bundle=" + bundle.string(), id}) {
        flags.push_back(word);
      }
    }
    std::vector<std::string> argv = runsc_->command(flags);
    std::vector<std::string> shepherd = {helper_source_.string(),
                                         "shepherd",
                                         "--status-fd",
                                         "3",
                                         "--storage",
                                         storage.string(),
                                         std::to_string(record.disk_bytes),
                                         "--control",
                                         (plan.control_directory / kKeeperSocketName).string(),
                                         store_.broker_socket(id).string(),
                                         store_.token_file(id).string(),
                                         "--"};
    shepherd.insert(shepherd.end(), argv.begin(), argv.end());

    const auto log_path = directory / "runsc.log";
    base::UniqueFd log(::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    Pipe status = Pipe::make();
    const pid_t first = spawn_process(
        SpawnRequest{shepherd, -1, log.get(), log.get(), {status.write.get(), pin.fd()}});
    status.write.reset();
    wait_process(first);
    const auto code = await_create(status.read.get(), config_->runsc_timeout);
    if (!image_link.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(image_link, ignored);
    }
    if (!code || *code != 0) {
      throw BackendError(
          from != nullptr ? "the gvisor sandbox could not be restored from its snapshot"
                          : "the gvisor sandbox could not be started",
          "runsc " + std::string(from != nullptr ? "restore " : "run ") + id +
              (code ? " exited " + std::to_string(*code) : std::string(" gave no answer")) + ": " +
              read_tail(log_path));
    }
    record.state = "running";
    store_.write(record);
  } catch (const std::exception& error) {
    // The caller sees the message only; the operator needs runsc's words.
    spdlog::warn("gvisor: creating {} failed: {}", id, error_detail(error));
    teardown_locked(id);
    throw;
  }
  spdlog::info("gvisor: {} sandbox {} (instance {}, image {}, platform {})",
               from != nullptr ? "restored " + from->snapshot_id + " as" : std::string("created"),
               id, record.instance_id, record.image, record.platform);
  auto sandbox = adopt(record, key);
  if (made != nullptr && record.work_dir != from->saved.at("work_dir").get<std::string>()) {
    // The restored keeper made the snapshot's work dir; the spec's is made here (a write makes
    // the missing directories on its way).
    try {
      sandbox->write_file(".airlock-work-dir", "", record.work_dir);
      sandbox->remove(".airlock-work-dir", record.work_dir, false);
    } catch (...) {
      teardown_locked(id);
      throw;
    }
  }
  return sandbox;
}

std::filesystem::path GvisorBackend::prepare_egress_directory(const std::string& id) const {
  // The guest reaches the socket through the Sentry and Gofer, which run as uid_base: that uid
  // owns the directory (0700), so no other host user can use or replace what is in it.
  const auto directory = store_.egress_dir(id);
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error || ::chown(directory.c_str(), config_->uid_base, config_->uid_base) != 0 ||
      ::chmod(directory.c_str(), 0700) != 0) {
    throw SystemError("could not prepare the sandbox's egress directory",
                      error ? error.value() : errno, directory.string());
  }
  return directory;
}

void GvisorBackend::listen_for_egress(const std::string& id, const SandboxSpec& spec,
                                      const std::string& instance_id) {
  EgressPolicy policy = config_->egress_policy;
  policy.allowed_hosts = spec.egress_allow();
  // The socket (0600) is uid_base's like its directory: no other host user can use it.
  const auto directory = prepare_egress_directory(id);
  UnixSocketOptions socket;
  socket.owner_uid = config_->uid_base;
  socket.owner_gid = config_->uid_base;
  egress_.listen(id, directory / kEgressSocketName, std::move(policy), instance_id, socket);
}

void GvisorBackend::stop_egress(const std::string& id) noexcept {
  egress_.stop(id);
}

bool GvisorBackend::teardown(const std::string& id) noexcept {
  try {
    const auto held = live_.mutex_for(id);
    std::lock_guard in_process(*held);
    const base::UniqueFd across_processes = store_.lock(id);
    return teardown_locked(id);
  } catch (const std::exception& error) {
    spdlog::warn("gvisor: could not dispose of {}: {}", id, error_detail(error));
    return false;
  }
}

bool GvisorBackend::teardown_locked(const std::string& id) noexcept {
  try {
    const auto bundle = store_.sandbox_dir(id) / "bundle";
    runsc_->destroy(id);
    const auto remaining = reclaim_leftovers(id, bundle);
    // A delete that lost to a dying sandbox: once the processes are gone runsc can finish.
    if (runsc_->may_know(id) && runsc_->state(id)) runsc_->destroy(id);
    for (const auto& what : remaining) spdlog::warn("gvisor: {} left behind by {}", what, id);
    stop_egress(id);
    store_.remove(id);
    live_.forget(id);
    return remaining.empty() && !(runsc_->may_know(id) && runsc_->state(id));
  } catch (const std::exception& error) {
    spdlog::warn("gvisor: could not dispose of {}: {}", id, error_detail(error));
    return false;
  }
}

void GvisorBackend::dispose(const SandboxKey& key) noexcept {
  backend_kit::contained("gvisor", "dispose", [&] {
    const auto wanted = backend_kit::key_labels(key);
    for (const auto& id : store_.ids()) {
      const auto record = store_.read(id);
      if (record && backend_kit::labels_match(record->labels, wanted)) teardown(id);
    }
  });
}

bool GvisorBackend::dispose_kind(const SandboxKey& key, std::string_view kind,
                                 std::optional<std::string_view> instance_id) noexcept {
  return backend_kit::contained("gvisor", "dispose_kind", false, [&] {
    const auto wanted = backend_kit::kind_labels(key, kind);
    bool all_gone = true;
    for (const auto& id : store_.ids()) {
      const auto record = store_.read(id);
      if (!record || !backend_kit::labels_match(record->labels, wanted)) continue;
      if (instance_id && record->instance_id != *instance_id) continue;
      all_gone = teardown(id) && all_gone;
    }
    return all_gone;
  });
}

int GvisorBackend::dispose_scope(std::string_view scope,
                                 std::optional<std::string_view> thread_id) noexcept {
  int disposed = 0;
  backend_kit::contained("gvisor", "dispose_scope", [&] {
    const auto wanted = backend_kit::scope_labels(scope, thread_id);
    for (const auto& id : store_.ids()) {
      const auto record = store_.read(id);
      if (record && backend_kit::labels_match(record->labels, wanted) && teardown(id)) {
        ++disposed;
      }
    }
    // The conversation's snapshots go with it.
    for (const auto& snapshot : list_snapshots()) {
      if (backend_kit::labels_match(snapshot.labels, wanted)) delete_snapshot(snapshot.id);
    }
  });
  return disposed;
}

std::vector<SandboxRecord> GvisorBackend::list_sandboxes() {
  std::map<std::string, std::string> status;
  for (const auto& container : runsc_->list()) status[container.id] = container.status;
  std::vector<SandboxRecord> out;
  std::set<std::string> seen;
  for (const auto& id : store_.ids()) {
    const auto record = store_.read(id);
    if (!record) continue;
    seen.insert(id);
    SandboxRecord listed;
    listed.backend = "gvisor";
    listed.instance_id = record->instance_id;
    listed.kind = record->kind;
    listed.labels = record->labels;
    listed.egress_posture = record->egress_posture;
    const auto found = status.find(id);
    listed.state =
        found == status.end() ? (record->state == "creating" ? "creating" : "dead") : found->second;
    listed.created_at =
        std::chrono::system_clock::time_point(std::chrono::milliseconds(record->created_at_ms));
    out.push_back(std::move(listed));
  }
  for (const auto& [id, state] : status) {
    if (seen.count(id) != 0) continue;
    SandboxRecord orphan;
    orphan.backend = "gvisor";
    orphan.instance_id = id;
    orphan.state = state + " (no record)";
    out.push_back(std::move(orphan));
  }
  return out;
}

int GvisorBackend::purge_all() noexcept {
  int purged = 0;
  try {
    std::set<std::string> ids;
    for (const auto& id : store_.ids()) ids.insert(id);
    try {
      for (const auto& container : runsc_->list()) ids.insert(container.id);
    } catch (const std::exception& error) {
      spdlog::warn("gvisor: purge could not list runsc's containers: {}", error_detail(error));
    }
    for (const auto& id : ids) {
      if (teardown(id)) ++purged;
    }
    for (const auto& snapshot : list_snapshots()) delete_snapshot(snapshot.id);
    reclaim_snapshot_staging();
  } catch (const std::exception& error) {
    spdlog::warn("gvisor: purge failed: {}", error_detail(error));
  }
  return purged;
}

}  // namespace airlock::gvisor_backend

namespace airlock {

std::shared_ptr<SandboxBackend> make_gvisor_backend(GvisorBackendConfig config) {
  return std::make_shared<gvisor_backend::GvisorBackend>(std::move(config));
}

}  // namespace airlock
