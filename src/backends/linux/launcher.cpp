#include "backends/linux/launcher.hpp"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "airlock/errors.hpp"
#include "backends/linux/state_store.hpp"
#include "backends/linux/syscalls.hpp"
#include "backends/linux/wire.hpp"
#include "base/syscall_error.hpp"
#include "base/unique_fd.hpp"

#ifndef AIRLOCK_LIBEXEC_DIR
#define AIRLOCK_LIBEXEC_DIR "/usr/local/libexec/airlock"
#endif

namespace airlock::linux_backend {
namespace {

bool executable(const std::filesystem::path& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
         ::access(path.c_str(), X_OK) == 0;
}

void locate_marker() {}

[[noreturn]] void launch_failed(const std::string& step, int error, const std::string& detail = {}) {
  std::string message = "the sandbox could not be started: " + step;
  if (error == 0) throw BackendError(message, detail);
  message += " failed (" + base::errno_text(error) + ")";
  throw BackendError(message, detail, base::errno_code(error));
}

}  // namespace

// Moved above the range the dup2 targets use, so that no dup2 lands on a source still needed
// (and dup2 onto itself, which would keep FD_CLOEXEC, never happens).
base::UniqueFd above_targets(int fd) {
  base::UniqueFd moved(::fcntl(fd, F_DUPFD_CLOEXEC, 10));
  if (!moved) {
    throw BackendError("the sandbox could not be started", base::errno_error("fcntl(F_DUPFD)"));
  }
  return moved;
}

MonitorHandoff prepare_handoff(const SpawnConfig& config) {
  const std::string encoded = encode_spawn_config(config);
  base::UniqueFd memory(::memfd_create("airlock-spawn-config", MFD_CLOEXEC));
  if (!memory) launch_failed("memfd_create", errno);
  if (::write(memory.get(), encoded.data(), encoded.size()) !=
      static_cast<ssize_t>(encoded.size())) {
    launch_failed("writing the spawn configuration", errno);
  }
  int status_pipe[2];
  if (::pipe2(status_pipe, O_CLOEXEC) != 0) launch_failed("pipe", errno);
  MonitorHandoff handoff;
  handoff.status_read.reset(status_pipe[0]);
  handoff.status_write = above_targets(status_pipe[1]);
  ::close(status_pipe[1]);
  handoff.config = above_targets(memory.get());
  return handoff;
}

std::filesystem::path locate_init(const std::filesystem::path& configured) {
  std::vector<std::filesystem::path> candidates;
  if (!configured.empty()) {
    if (executable(configured)) return configured;
    throw BackendError("the linux backend's init helper was not found",
                       "init_path " + configured.string() + " is not an executable file");
  }
  if (const char* from_environment = std::getenv("AIRLOCK_INIT");
      from_environment != nullptr && *from_environment != '\0') {
    candidates.emplace_back(from_environment);
  }
  std::error_code ignored;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ignored);
  if (!self.empty()) candidates.push_back(self.parent_path() / "airlock-init");
  Dl_info library{};
  if (::dladdr(reinterpret_cast<void*>(&locate_marker), &library) != 0 &&
      library.dli_fname != nullptr) {
    const auto directory = std::filesystem::absolute(library.dli_fname, ignored).parent_path();
    candidates.push_back(directory / "airlock-init");
    candidates.push_back(directory / ".." / "libexec" / "airlock" / "airlock-init");
  }
  candidates.emplace_back(std::string(AIRLOCK_LIBEXEC_DIR) + "/airlock-init");
  std::string looked;
  for (const auto& candidate : candidates) {
    if (executable(candidate)) return candidate.lexically_normal();
    looked += (looked.empty() ? "" : ", ") + candidate.string();
  }
  throw BackendError("the linux backend's init helper (airlock-init) was not found",
                     "looked in: " + looked + " (set init_path or AIRLOCK_INIT)");
}

LaunchedInit launch_init(const std::filesystem::path& init_path, const SpawnConfig& config,
                         const InitDescriptors& descriptors, std::chrono::milliseconds timeout) {
  MonitorHandoff handoff = prepare_handoff(config);
  base::UniqueFd listener = above_targets(descriptors.control_listener);
  base::UniqueFd pin;
  if (descriptors.image_pin) pin = above_targets(*descriptors.image_pin);
  base::UniqueFd slot;
  if (descriptors.id_slot) slot = above_targets(*descriptors.id_slot);
  base::UniqueFd leash;
  if (descriptors.pool_leash) leash = above_targets(*descriptors.pool_leash);
  base::UniqueFd snapshot;
  if (descriptors.snapshot) snapshot = above_targets(*descriptors.snapshot);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // The helper and the init never keep the host's stdio: a caller waiting for its own output to
  // end (a test runner, a pipeline) must not wait for a sandbox.
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, handoff.config.get(), kConfigFd);
  posix_spawn_file_actions_adddup2(&actions, handoff.status_write.get(), kStatusFd);
  posix_spawn_file_actions_adddup2(&actions, listener.get(), kControlFd);
  if (pin) posix_spawn_file_actions_adddup2(&actions, pin.get(), kImagePinFd);
  if (slot) posix_spawn_file_actions_adddup2(&actions, slot.get(), kIdSlotFd);
  if (leash) posix_spawn_file_actions_adddup2(&actions, leash.get(), kPoolLeashFd);
  if (snapshot) posix_spawn_file_actions_adddup2(&actions, snapshot.get(), kSnapshotFd);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none;
  sigemptyset(&none);
  sigset_t all;
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setsigdefault(&attributes, &all);
  // Its own session: a terminal's job control signals for the caller never reach a sandbox.
  posix_spawnattr_setflags(&attributes,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSID);
  const std::string program = init_path.string();
  char* argv[] = {const_cast<char*>("airlock-init"), const_cast<char*>("--sandbox"), nullptr};
  char* envp[] = {nullptr};
  pid_t monitor = 0;
  const int spawn_error =
      ::posix_spawn(&monitor, program.c_str(), &actions, &attributes, argv, envp);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  handoff.status_write.reset();
  handoff.config.reset();
  listener.reset();
  pin.reset();
  slot.reset();
  leash.reset();
  if (spawn_error != 0) launch_failed("spawning airlock-init", spawn_error, program);
  return await_init(handoff.status_read.get(), monitor, timeout);
}

LaunchedInit await_init(int status_read, pid_t monitor, std::chrono::milliseconds timeout) {
  // Read status records until the init is ready, or until end of stream (the monitor and the
  // init both closed it: something failed).
  std::string buffer;
  LaunchedInit launched;
  bool ready = false;
  Status failure;
  bool failed = false;
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        give_up - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    struct pollfd wait {status_read, POLLIN, 0};
    const int polled = ::poll(&wait, 1, static_cast<int>(left.count()));
    if (polled < 0 && errno == EINTR) continue;
    if (polled <= 0) break;
    char chunk[4096];
    const ssize_t got = ::read(status_read, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    buffer.append(chunk, static_cast<std::size_t>(got));
    for (;;) {
      wire::Reader length(buffer);
      const std::uint64_t size = length.u64();
      if (!length.ok() || buffer.size() < 8 + size) break;
      Status status;
      if (decode_status(buffer.substr(8, size), status)) {
        if (status.kind == StatusKind::init_pid) launched.pid = static_cast<pid_t>(status.pid);
        if (status.kind == StatusKind::step) launched.steps.emplace_back(status.step, status.pid);
        if (status.kind == StatusKind::ready) {
          ready = true;
          struct timespec now {};
          ::clock_gettime(CLOCK_MONOTONIC, &now);
          launched.ready_at_ns = static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
        }
        if (status.kind == StatusKind::failure) {
          failure = status;
          failed = true;
        }
      }
      buffer.erase(0, 8 + size);
    }
    if (ready || failed) break;
  }
  int monitor_status = 0;
  if (!ready && !failed) ::kill(monitor, SIGKILL);
  while (::waitpid(monitor, &monitor_status, 0) < 0 && errno == EINTR) {
  }
  if (ready && launched.pid > 0) {
    if (const auto start = process_start_time(launched.pid)) {
      launched.start_time = *start;
      return launched;
    }
    launch_failed("the init exited right after it started", 0);
  }
  if (launched.pid > 0) {
    // Whatever the init got to, it goes: a half-built sandbox is never left running.
    base::UniqueFd init(sys::pidfd_open(launched.pid));
    if (init) sys::pidfd_send_signal(init.get(), SIGKILL);
  }
  if (failed) {
    launch_failed(failure.step, failure.error_number,
                  "airlock-init: " + failure.step + ": " + base::errno_text(failure.error_number));
  }
  if (WIFEXITED(monitor_status) || WIFSIGNALED(monitor_status)) {
    launch_failed("airlock-init ended without reporting", 0,
                  "monitor wait status " + std::to_string(monitor_status));
  }
  launch_failed("airlock-init did not report ready in time", ETIMEDOUT);
}

}  // namespace airlock::linux_backend
