// What a spec's image names, as the linux backend builds a root from it. The one place that
// knows how references resolve, so a new source of images is one change here.
//
//   "host"                the host's own root, read-only
//   an absolute path      a rootfs directory on this host (lower layer of an overlay)
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "backends/linux/spawn_config.hpp"
#include "backends/linux/unique_fd.hpp"

namespace airlock::linux_backend {

struct ResolvedImage {
  RootKind kind = RootKind::host;
  std::filesystem::path rootfs;  // directory images
  std::string reference;         // as recorded ("host", the path, or a store reference)
  UniqueFd pin;                  // keeps stored content from removal while the sandbox lives
};

// InvalidArgument naming the reference and what is accepted when it cannot be resolved.
ResolvedImage resolve_image(std::string_view reference);

}  // namespace airlock::linux_backend
