// The small guest-path steps every file plane takes around the confinement walk (paths.hpp):
// an absolute path's parent and leaf, what a caller is shown for an entry, and the kernel's name
// limits refused before a provider is asked. Guest paths only, already confined and normalised.
#pragma once

#include <cerrno>
#include <string>
#include <string_view>

#include "airlock/errors.hpp"
#include "airlock/paths.hpp"

namespace airlock::backend_kit {

// "/a/b" → "/a"; "/a" and "/" → "/".
inline std::string parent_of(const std::string& absolute) {
  const auto slash = absolute.rfind('/');
  if (slash == 0 || slash == std::string::npos) return "/";
  return absolute.substr(0, slash);
}

// "/a/b" → "b".
inline std::string leaf_of(const std::string& absolute) {
  return absolute.substr(absolute.rfind('/') + 1);
}

// What a caller sees for an entry: relative to the working directory, "." for itself.
inline std::string entry_path(const std::string& absolute, std::string_view working_directory) {
  const auto inside = guest_path_relative_to(absolute, working_directory);
  if (!inside || inside->empty()) return ".";
  return *inside;
}

// A component past NAME_MAX or a path past PATH_MAX: ENAMETOOLONG, before any provider is asked
// (what a provider answers to one is its own, and rarely something a caller can act on).
inline void refuse_overlong(std::string_view path, const std::string& absolute) {
  std::size_t component = 0;
  for (char c : absolute) {
    component = c == '/' ? 0 : component + 1;
    if (component > 255) {
      throw SystemError("a component of '" + std::string(path).substr(0, 64) +
                            "…' is longer than 255 bytes",
                        ENAMETOOLONG, absolute.substr(0, 256));
    }
  }
  if (absolute.size() >= 4096) {
    throw SystemError("'" + std::string(path).substr(0, 64) + "…' is longer than 4095 bytes",
                      ENAMETOOLONG, absolute.substr(0, 256));
  }
}

}  // namespace airlock::backend_kit
