// Starting a sandbox: one posix_spawn of airlock-init (never a fork of the host, which may be a
// large multithreaded process), then reading its status pipe until the init reports ready.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>

#include "backends/linux/spawn_config.hpp"

namespace airlock::linux_backend {

// Where airlock-init is: `configured` when set; else $AIRLOCK_INIT; else next to the running
// executable; else next to libairlock (the build tree); else <libdir>/../libexec/airlock; else
// the install prefix's libexec. Throws BackendError naming every place looked at.
std::filesystem::path locate_init(const std::filesystem::path& configured);

struct LaunchedInit {
  pid_t pid = 0;                  // in this process's pid namespace
  std::uint64_t start_time = 0;   // /proc/<pid>/stat field 22
};

// Spawns airlock-init with `config`, the listening control socket and (optionally) an image pin,
// and waits until the sandbox's init is ready. Throws BackendError naming the step that failed;
// whatever was started is killed first (cgroups and directories are the caller's to remove).
// `on_pid` is called as soon as the init's pid is known (to record it before anything else can
// go wrong).
LaunchedInit launch_init(const std::filesystem::path& init_path, const SpawnConfig& config,
                         int control_listener, std::optional<int> image_pin,
                         std::chrono::milliseconds timeout);

}  // namespace airlock::linux_backend
