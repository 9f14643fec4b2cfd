// What a spec's image names, as the linux backend builds a root from it. The one place that
// knows how references resolve.
//
//   "host"                  the host's own root, read-only
//   an absolute path        a rootfs directory on this host, used as it is (a developer's
//                           convenience: its files keep their host owners, so host root's files
//                           are nobody's inside)
//   anything else           a reference in the image store ("name", "name:tag", "sha256:<id>"),
//                           pinned for as long as the sandbox lives; an unknown reference is an
//                           InvalidArgument naming the store and how to import the image
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "backends/linux/spawn_config.hpp"
#include "base/unique_fd.hpp"

namespace airlock::linux_backend {

struct ResolvedImage {
  RootKind kind = RootKind::host;
  std::filesystem::path rootfs;  // directory images
  std::string reference;         // as recorded ("host", the path, or "name:tag (sha256:…)")
  base::UniqueFd pin;            // keeps stored content from removal while the sandbox lives
};

struct ImageStoreLocation {
  std::filesystem::path root;  // the store's directory
  std::uint32_t uid_base = 0;  // the ownership map it is opened with (as root)
};

// InvalidArgument naming the reference and what is accepted when it cannot be resolved.
ResolvedImage resolve_image(std::string_view reference, const ImageStoreLocation& store);

}  // namespace airlock::linux_backend
