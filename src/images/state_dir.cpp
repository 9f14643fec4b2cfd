#include "airlock/state_dir.hpp"

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "airlock/errors.hpp"

namespace airlock {

namespace {
const char* environment(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && *value != '\0') ? value : nullptr;
}
}  // namespace

std::filesystem::path default_state_dir() {
  if (const char* configured = environment("AIRLOCK_STATE_DIR")) {
    std::filesystem::path path(configured);
    if (!path.is_absolute()) {
      throw InvalidArgument(
          "AIRLOCK_STATE_DIR must be an absolute path, not '" + std::string(configured) + "'",
          "state_dir");
    }
    return path.lexically_normal();
  }
  if (::geteuid() == 0) return "/var/lib/airlock";
  if (const char* xdg = environment("XDG_STATE_HOME")) {
    // The XDG base directory rules say a relative value is invalid and must be ignored.
    if (std::filesystem::path(xdg).is_absolute()) {
      return (std::filesystem::path(xdg) / "airlock").lexically_normal();
    }
  }
  const char* home = environment("HOME");
  if (home == nullptr || !std::filesystem::path(home).is_absolute()) {
    throw InvalidArgument(
        "cannot choose a state directory: HOME is unset or relative; set AIRLOCK_STATE_DIR",
        "state_dir");
  }
  return (std::filesystem::path(home) / ".local/state/airlock").lexically_normal();
}

}  // namespace airlock
