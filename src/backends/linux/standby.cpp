#include "backends/linux/standby.hpp"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "airlock/errors.hpp"
#include "airlock/json.hpp"
#include "backends/linux/protocol.hpp"
#include "backends/linux/syscalls.hpp"
#include "backends/linux/wire.hpp"
#include "base/syscall_error.hpp"

namespace airlock::linux_backend {
namespace {

std::filesystem::path standby_directory(const StateStore& store) { return store.base() / "standby"; }

std::filesystem::path record_path(const StateStore& store, const std::string& instance_id) {
  return standby_directory(store) / (instance_id + ".json");
}

// The process that records a standby owns it: a standby dies with its owner (PR_SET_PDEATHSIG
// on the owner's thread), so a record whose owner is gone names nothing anyone will claim.
void write_record(const StateStore& store, const std::string& instance_id,
                  const std::vector<std::string>& cgroups, pid_t pid, std::uint64_t start) {
  static const pid_t owner = ::getpid();
  static const std::uint64_t owner_start = process_start_time(owner).value_or(0);
  const json::Json value = {{"instance_id", instance_id}, {"cgroups", cgroups},
                            {"pid", pid},                 {"start_time", start},
                            {"owner_pid", owner},         {"owner_start_time", owner_start},
                            {"boot_id", current_boot_id()}};
  const auto path = record_path(store, instance_id);
  const auto temporary = path.string() + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << value.dump() << "\n";
    if (!out) {
      throw BackendError("a standby sandbox could not be recorded",
                         base::errno_error("write", temporary));
    }
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    throw BackendError("a standby sandbox could not be recorded",
                       base::errno_error("rename", path.string()));
  }
}

void wait_for_exit(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

std::unique_ptr<StandbyMonitor> StandbyMonitor::prepare(const Options& options) {
  std::unique_ptr<StandbyMonitor> standby(new StandbyMonitor());
  standby->store_ = options.store;
  standby->instance_id_ = "lx-" + random_hex(8);
  if (options.layout != nullptr) {
    standby->cgroups_ = plan_instance_cgroups(*options.layout, standby->instance_id_,
                                              options.limits, options.per_command_cgroups);
  }
  if (::mkdir(standby_directory(*options.store).c_str(), 0700) != 0 && errno != EEXIST) {
    throw BackendError("a standby sandbox could not be recorded",
                       base::errno_error("mkdir", standby_directory(*options.store).string()));
  }
  // First the record (so purge finds whatever follows), then the cgroups, then the process.
  write_record(*options.store, standby->instance_id_, standby->cgroups_.directories, 0, 0);
  try {
    if (options.layout != nullptr) {
      create_instance_cgroups(*options.layout, standby->cgroups_, options.limits);
    }
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
      throw BackendError("a standby sandbox could not be started", base::errno_error("socketpair"));
    }
    standby->channel_.reset(pair[0]);
    base::UniqueFd theirs = above_targets(pair[1]);
    ::close(pair[1]);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, theirs.get(), 3);
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    sigset_t none;
    sigemptyset(&none);
    sigset_t all;
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attributes, &none);
    posix_spawnattr_setsigdefault(&attributes, &all);
    posix_spawnattr_setflags(&attributes,
                             POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSID);
    const std::string parent = std::to_string(::getpid());
    const std::string program = options.init_path.string();
    char* argv[] = {const_cast<char*>("airlock-init"), const_cast<char*>("--standby"),
                    const_cast<char*>(parent.c_str()), nullptr};
    char* envp[] = {nullptr};
    const int spawn_error =
        ::posix_spawn(&standby->pid_, program.c_str(), &actions, &attributes, argv, envp);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    theirs.reset();
    if (spawn_error != 0) {
      standby->pid_ = -1;
      throw BackendError("a standby sandbox could not be started",
                         base::SyscallError(spawn_error, "posix_spawn", program));
    }
    write_record(*options.store, standby->instance_id_, standby->cgroups_.directories,
                 standby->pid_, process_start_time(standby->pid_).value_or(0));
    // Join the cgroups now, while nobody waits for it.
    wire::Writer join;
    join.strings(standby->cgroups_.procs_files);
    if (const int error = protocol::send_message(standby->channel_.get(), join.data(), nullptr, 0);
        error != 0) {
      throw BackendError("a standby sandbox could not be started",
                         base::SyscallError(error, "sendmsg"));
    }
    struct pollfd wait {standby->channel_.get(), POLLIN, 0};
    char answer = 0;
    if (::poll(&wait, 1, static_cast<int>(options.timeout.count())) != 1 ||
        ::read(standby->channel_.get(), &answer, 1) != 1 || answer != 'j') {
      throw BackendError("a standby sandbox could not join its cgroups", "standby answered no");
    }
  } catch (...) {
    standby.reset();  // discards: kills, reaps, removes the cgroups and the record
    throw;
  }
  return standby;
}

StandbyMonitor::~StandbyMonitor() { discard(); }

bool StandbyMonitor::usable() const noexcept {
  if (claimed_ || pid_ <= 0 || !channel_) return false;
  struct pollfd hangup {channel_.get(), POLLIN, 0};
  // The standby never writes after its join answer: anything readable is end of stream.
  return ::poll(&hangup, 1, 0) == 0;
}

LaunchedInit StandbyMonitor::claim(const SpawnConfig& config, const InitDescriptors& descriptors,
                                   std::chrono::milliseconds timeout) {
  if (!usable()) throw BackendError("the standby sandbox is gone", instance_id_);
  MonitorHandoff handoff = prepare_handoff(config);
  // The descriptors, and (in the message) the number each one is to become in the monitor.
  std::vector<int> fds{handoff.config.get(), handoff.status_write.get(),
                       descriptors.control_listener};
  wire::Writer targets;
  std::vector<std::string> numbers{std::to_string(kConfigFd), std::to_string(kStatusFd),
                                   std::to_string(kControlFd)};
  if (descriptors.image_pin) {
    fds.push_back(*descriptors.image_pin);
    numbers.push_back(std::to_string(kImagePinFd));
  }
  if (descriptors.id_slot) {
    fds.push_back(*descriptors.id_slot);
    numbers.push_back(std::to_string(kIdSlotFd));
  }
  targets.strings(numbers);
  if (const int error = protocol::send_message(channel_.get(), targets.data(), fds.data(),
                                               fds.size());
      error != 0) {
    throw BackendError("the standby sandbox is gone", base::SyscallError(error, "sendmsg"));
  }
  claimed_ = true;
  handoff.status_write.reset();
  handoff.config.reset();
  channel_.reset();
  const pid_t monitor = std::exchange(pid_, -1);
  return await_init(handoff.status_read.get(), monitor, timeout);
}

void StandbyMonitor::forget_record() noexcept {
  if (store_ != nullptr) ::unlink(record_path(*store_, instance_id_).c_str());
}

void StandbyMonitor::discard() noexcept {
  channel_.reset();  // end of stream: an unclaimed standby exits by itself
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    wait_for_exit(pid_);
    pid_ = -1;
  }
  if (claimed_ || store_ == nullptr) return;  // the cgroups belong to a sandbox now
  if (!cgroups_.directories.empty()) {
    backend_kit::destroy_cgroups(cgroups_.directories, std::chrono::seconds(5));
  }
  forget_record();
}

namespace {

// Whether `pid` is still the process that started at `start` (this boot).
bool still_running(long pid, std::uint64_t start, const std::string& boot_id) {
  RecordFile as_record;
  as_record.init_pid = pid;
  as_record.init_start_time = start;
  as_record.boot_id = boot_id;
  return init_is_alive(as_record);
}

// Kills what a standby record names, removes its cgroups and the record.
void reclaim(const std::filesystem::path& path, const json::Json& value) {
  try {
    RecordFile as_record;
    as_record.init_pid = value.at("pid").get<long>();
    as_record.init_start_time = value.at("start_time").get<std::uint64_t>();
    as_record.boot_id = value.at("boot_id").get<std::string>();
    if (base::UniqueFd process = open_verified_init(as_record)) {
      sys::pidfd_send_signal(process.get(), SIGKILL);
      struct pollfd exited {process.get(), POLLIN, 0};
      ::poll(&exited, 1, 5000);
    }
    backend_kit::destroy_cgroups(value.at("cgroups").get<std::vector<std::string>>(),
                                 std::chrono::seconds(5));
  } catch (...) {
  }
  std::error_code error;
  std::filesystem::remove(path, error);
}

// Every record and half-written record (<id>.json.tmp: its owner died while writing it) in the
// standby directory, parsed (null when it cannot be: a write cut short).
template <typename Visit>
void for_each_record(const StateStore& store, Visit visit) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(standby_directory(store), error)) {
    const std::string name = entry.path().filename().string();
    const bool complete = name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0;
    const bool partial = name.size() > 9 && name.compare(name.size() - 9, 9, ".json.tmp") == 0;
    if (!complete && !partial) continue;
    json::Json value;
    try {
      std::ifstream file(entry.path());
      std::stringstream text;
      text << file.rdbuf();
      value = json::Json::parse(text.str());
    } catch (...) {
      value = nullptr;
    }
    visit(entry.path(), value, partial);
  }
}

}  // namespace

int StandbyMonitor::reclaim_all(const StateStore& store) noexcept {
  int reclaimed = 0;
  try {
    for_each_record(store, [&](const std::filesystem::path& path, const json::Json& value,
                               bool partial) {
      reclaim(path, value);
      if (!partial) ++reclaimed;
    });
  } catch (...) {
  }
  return reclaimed;
}

int StandbyMonitor::reclaim_orphans(const StateStore& store) noexcept {
  int reclaimed = 0;
  try {
    for_each_record(store, [&](const std::filesystem::path& path, const json::Json& value,
                               bool partial) {
      if (!value.is_object()) {
        // Cut short while being written: its owner died mid-write, or is writing it right now.
        // Only a file that stayed this way for a minute is a leftover.
        std::error_code error;
        const auto written = std::filesystem::last_write_time(path, error);
        if (!error && std::filesystem::file_time_type::clock::now() - written >
                          std::chrono::minutes(1)) {
          std::filesystem::remove(path, error);
        }
        return;
      }
      const std::string boot = value.value("boot_id", std::string());
      const long pid = value.value("pid", 0L);
      const bool standby_alive =
          pid > 0 && still_running(pid, value.value("start_time", std::uint64_t{0}), boot);
      const bool owner_alive = still_running(value.value("owner_pid", 0L),
                                             value.value("owner_start_time", std::uint64_t{0}),
                                             boot);
      // A standby that was started and is gone will never be claimed; one not started yet is
      // its owner's to finish. Nothing of an owner that is gone is kept: its standby may still
      // be running for a moment after the owner's death (PR_SET_PDEATHSIG is delivered, not
      // instant), and is killed here rather than left to outlive this pass.
      if (owner_alive && (standby_alive || pid == 0 || partial)) return;
      reclaim(path, value);
      if (!partial) ++reclaimed;
    });
  } catch (...) {
  }
  return reclaimed;
}

}  // namespace airlock::linux_backend
