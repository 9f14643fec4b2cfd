// Starting a sandbox: one posix_spawn of airlock-init (never a fork of the host, which may be a
// large multithreaded process), then reading its status pipe until the init reports ready.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backends/linux/spawn_config.hpp"
#include "base/unique_fd.hpp"

namespace airlock::linux_backend {

// Where airlock-init is: `configured` when set; else $AIRLOCK_INIT; else next to the running
// executable; else next to libairlock (the build tree); else <libdir>/../libexec/airlock; else
// the install prefix's libexec. Throws BackendError naming every place looked at.
std::filesystem::path locate_init(const std::filesystem::path& configured);

struct LaunchedInit {
  pid_t pid = 0;                  // in this process's pid namespace
  std::uint64_t start_time = 0;   // /proc/<pid>/stat field 22
  // The steps the monitor and the init reported, in order: name and CLOCK_MONOTONIC end time
  // (ns). What follows the last until ready is the rest of the init's start.
  std::vector<std::pair<std::string, std::int64_t>> steps;
  std::int64_t ready_at_ns = 0;   // CLOCK_MONOTONIC when the ready report was read
};

// What the caller hands a monitor besides its configuration and status pipe (all borrowed).
struct InitDescriptors {
  int control_listener = -1;     // placed at kControlFd
  std::optional<int> image_pin;  // kImagePinFd
  std::optional<int> id_slot;    // kIdSlotFd
  std::optional<int> pool_leash;  // kPoolLeashFd
  std::optional<int> snapshot;    // kSnapshotFd
};

// Spawns airlock-init with `config` and `descriptors`, and waits until the sandbox's init is
// ready. Throws BackendError naming the step that failed; whatever was started is killed first
// (cgroups and directories are the caller's to remove).
LaunchedInit launch_init(const std::filesystem::path& init_path, const SpawnConfig& config,
                         const InitDescriptors& descriptors, std::chrono::milliseconds timeout);

// The descriptors a monitor needs for one sandbox: the configuration (a memfd) and the status
// pipe, made here; the control listener and the image pin, the caller's.
struct MonitorHandoff {
  base::UniqueFd config;        // memfd with the encoded SpawnConfig
  base::UniqueFd status_read;   // the library's end of the status pipe
  base::UniqueFd status_write;  // the monitor's end
};
MonitorHandoff prepare_handoff(const SpawnConfig& config);

// Reads `status_read` until the init reports ready (or fails, or `timeout` passes), then reaps
// `monitor` (this process's child). On failure whatever was started is killed and BackendError
// names the step.
LaunchedInit await_init(int status_read, pid_t monitor, std::chrono::milliseconds timeout);

// A descriptor moved to 10 or above (for dup2 targets below it), close-on-exec.
base::UniqueFd above_targets(int fd);

}  // namespace airlock::linux_backend
