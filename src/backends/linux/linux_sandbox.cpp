#include "backends/linux/linux_sandbox.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <algorithm>

#include "airlock/errors.hpp"
#include "backends/linux/snapshots.hpp"
#include "backends/linux/spawn_config.hpp"

namespace airlock::linux_backend {
namespace {

constexpr const char* kGuestPath =
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

std::vector<std::string> base_environment(const RecordFile& record) {
  // HOME is the private /tmp: with image "host", /root is the host's (and unreadable).
  std::vector<std::string> environment{kGuestPath, "HOME=/tmp", "LANG=C.UTF-8"};
  if (record.egress_posture.rfind("allowlist", 0) == 0) {
    for (const char* name : {"HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"}) {
      environment.push_back(std::string(name) + "=http://127.0.0.1:3128");
    }
    environment.emplace_back("NO_PROXY=localhost,127.0.0.1");
    environment.emplace_back("no_proxy=localhost,127.0.0.1");
  }
  return environment;
}

std::vector<std::string> with_overrides(
    std::vector<std::string> environment,
    const std::vector<std::pair<std::string, std::string>>& extra) {
  for (const auto& [name, value] : extra) {
    if (name.empty() || name.find('=') != std::string::npos ||
        name.find('\0') != std::string::npos || value.find('\0') != std::string::npos) {
      throw InvalidArgument("environment: '" + name + "' is not a valid variable name",
                            "environment");
    }
    const std::string prefix = name + "=";
    environment.erase(
        std::remove_if(environment.begin(), environment.end(),
                       [&](const std::string& entry) { return entry.rfind(prefix, 0) == 0; }),
        environment.end());
    environment.push_back(prefix + value);
  }
  return environment;
}

}  // namespace

LinuxSandbox::LinuxSandbox(std::shared_ptr<const LinuxBackendConfig> config, RecordFile record,
                           SandboxKey key, const std::filesystem::path& socket_path,
                           base::UniqueFd init_pidfd, std::filesystem::path init_path)
    : config_(std::move(config)),
      record_(std::move(record)),
      key_(std::move(key)),
      channel_(socket_path, from_hex(record_.control_secret)),
      init_pidfd_(std::move(init_pidfd)),
      environment_(base_environment(record_)),
      state_directory_(socket_path.parent_path()),
      init_path_(std::move(init_path)) {}

bool LinuxSandbox::is_live() const noexcept {
  if (disposed_.load()) return false;
  if (!init_pidfd_) return false;
  struct pollfd exited {
    init_pidfd_.get(), POLLIN, 0
  };
  return ::poll(&exited, 1, 0) == 0;
}

void LinuxSandbox::mark_disposed() noexcept {
  disposed_.store(true);
  {
    std::lock_guard lock(root_mutex_);
    roots_.reset();
  }
  std::lock_guard lock(agent_mutex_);
  agent_.reset();
}

SnapshotRecord LinuxSandbox::snapshot() {
  refuse_when_gone();
  if (!record_.privileged) {
    throw NotSupported(
        "the linux backend takes snapshots only as root: unprivileged, the host user cannot "
        "read what the guest's root made unreadable, nor give a resumed guest its own ids");
  }
  if (!is_live()) throw SandboxInvalidated("the sandbox's init is gone; acquire it again");
  base::UniqueFd storage = channel_.fetch_storage();
  // <state>/linux/<id>/ → <state>/linux/snapshots/
  const SnapshotStore store(state_directory_.parent_path() / "snapshots");
  return store.capture(record_, storage.get());
}

void LinuxSandbox::refuse_when_gone() const {
  if (disposed_.load()) {
    throw BackendError("this sandbox was disposed; acquire a new one",
                       "instance " + record_.instance_id);
  }
}

std::shared_ptr<const LinuxSandbox::Roots> LinuxSandbox::roots() const {
  refuse_when_gone();
  std::lock_guard lock(root_mutex_);
  if (!roots_) {
    ControlChannel::Roots fetched = channel_.fetch_roots();
    roots_ = std::make_shared<const Roots>(
        Roots{std::move(fetched.root), std::move(fetched.host_tools)});
  }
  return roots_;
}

LinuxSandbox::BoundPlane LinuxSandbox::plane() const {
  std::shared_ptr<const Roots> held = roots();
  const int root = held->root.get();
  return BoundPlane{std::move(held),
                    FilePlane(root, record_.uid_base, record_.uid_base, record_.privileged,
                              config_->limits.files_in.max_bytes_per_file)};
}

std::shared_ptr<RemoteFilePlane> LinuxSandbox::agent() const {
  if (!record_.subordinate_ids) return nullptr;
  refuse_when_gone();
  std::lock_guard lock(agent_mutex_);
  if (!agent_) {
    const ControlChannel::Namespaces namespaces = channel_.fetch_namespaces();
    agent_ = std::make_shared<RemoteFilePlane>(init_path_, namespaces.user.get(),
                                               namespaces.mount.get(),
                                               config_->limits.files_in.max_bytes_per_file);
  }
  return agent_;
}

void LinuxSandbox::write_file(std::string_view path, std::string_view content,
                              std::string_view working_directory) {
  if (const auto remote = agent()) return remote->write_file(path, content, working_directory);
  plane()->write_file(path, content, working_directory);
}

std::optional<SandboxEntry> LinuxSandbox::stat_file(std::string_view path,
                                                    std::string_view working_directory) {
  if (const auto remote = agent()) return remote->stat_file(path, working_directory);
  return plane()->stat_file(path, working_directory);
}

std::string LinuxSandbox::read_file(std::string_view path, std::string_view working_directory,
                                    std::uint64_t max_bytes) {
  if (const auto remote = agent()) return remote->read_file(path, working_directory, max_bytes);
  return plane()->read_file(path, working_directory, max_bytes);
}

std::vector<SandboxEntry> LinuxSandbox::list_dir(std::string_view path,
                                                 std::string_view working_directory) {
  if (const auto remote = agent()) return remote->list_dir(path, working_directory);
  return plane()->list_dir(path, working_directory);
}

void LinuxSandbox::remove(std::string_view path, std::string_view working_directory,
                          bool recursive) {
  if (const auto remote = agent()) return remote->remove(path, working_directory, recursive);
  plane()->remove(path, working_directory, recursive);
}

std::optional<Sandbox::SocketChannel> LinuxSandbox::socket_channel() {
  // The descriptor stays open as long as this handle holds its roots (a dispose drops them, and
  // the directory goes with the sandbox anyway).
  std::shared_ptr<const Roots> held = roots();
  SocketChannel channel;
  channel.guest_directory = kHostToolsGuestDir;
  channel.host_directory = "/proc/self/fd/" + std::to_string(held->host_tools.get());
  return channel;
}

ExecResult LinuxSandbox::exec(const Command& command, const ExecOptions& options) {
  check_exec_options(options);
  refuse_when_gone();
  const auto started = std::chrono::steady_clock::now();
  if (options.working_directory.empty() || options.working_directory.front() != '/') {
    throw InvalidArgument("exec: working_directory must be an absolute guest path, got '" +
                              options.working_directory + "'",
                          "working_directory");
  }
  if (options.timeout.count() <= 0) {
    throw InvalidArgument("exec: timeout must be positive", "timeout");
  }
  ExecPlan plan;
  plan.argv = command.arguments();
  plan.environment = with_overrides(environment_, options.environment);
  plan.working_directory = options.working_directory;
  plan.deadline = started + options.timeout;
  plan.stdin_bytes = options.stdin_bytes;
  plan.feed_stdin = !options.stdin_bytes.empty();
  plan.max_output_bytes = options.max_output_bytes;
  plan.overflow = options.overflow;
  plan.output_ceiling = config_->output_ceiling_bytes;
  plan.stop = options.stop;
  plan.on_output = options.on_output;
  plan.stdin_fd = options.stdin_fd;
  plan.terminal = options.terminal;
  plan.control = options.control;
  // A terminal comes from the guest's devpts, reached through its root (held for the call).
  std::shared_ptr<const Roots> held;
  if (options.terminal) {
    held = roots();
    plan.terminal_root = held->root.get();
  }
  return channel_.exec(plan);
}

ExecResult LinuxSandbox::run_code(std::string_view code, Milliseconds timeout) {
  refuse_when_gone();
  const auto started = std::chrono::steady_clock::now();
  if (timeout.count() <= 0) throw InvalidArgument("run_code: timeout must be positive", "timeout");
  ExecPlan plan;
  plan.argv = {"python3", "-"};
  plan.environment = environment_;
  plan.working_directory = record_.work_dir;
  plan.deadline = started + timeout;
  plan.serial = true;
  plan.stdin_bytes = std::string(code);
  plan.feed_stdin = true;
  plan.output_ceiling = config_->output_ceiling_bytes;
  return channel_.exec(plan);
}

}  // namespace airlock::linux_backend
