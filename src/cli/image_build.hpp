// `airlock image build`: a usable image made offline from what this Debian host has — no image
// registry is ever asked.
//
//   busybox   the host's busybox-static (/bin/busybox): every applet a link to it, /etc/passwd
//             and /etc/group for root, /tmp 1777. Seconds.
//   python    debootstrap --variant=minbase --include=python3 <this host's release> from the
//             Debian mirror this host's apt already uses, .debs removed. Minutes; needs root.
//
// The root filesystem is built in a private temporary directory, imported into the image store
// (and, with a docker engine, imported there under a tag), and removed.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

namespace airlock::cli {

// The names `image build` knows, and the references it publishes by default.
inline constexpr const char* kBuildableImages = "busybox, python";
std::string default_store_reference(const std::string& recipe);  // "busybox:latest"
// The tag a docker engine gets by default — the docker backend's default_image for busybox.
std::string default_engine_tag(const std::string& recipe);  // "airlock/busybox:latest"

// A built root filesystem in a temporary directory, removed (after detaching anything a build
// tool left mounted beneath it) when this goes.
class BuiltRootfs {
 public:
  BuiltRootfs();
  ~BuiltRootfs();
  BuiltRootfs(const BuiltRootfs&) = delete;
  BuiltRootfs& operator=(const BuiltRootfs&) = delete;
  const std::filesystem::path& rootfs() const { return rootfs_; }
  const std::filesystem::path& scratch() const { return scratch_; }

 private:
  std::filesystem::path scratch_;
  std::filesystem::path rootfs_;
};

// Builds `recipe` into `out.rootfs()`; `say` reports progress (to stderr). Refusals name what is
// missing and how to get it.
void build_rootfs(const std::string& recipe, const BuiltRootfs& out,
                  const std::function<void(const std::string&)>& say);

// Imports the tree at `rootfs` into the container engine at `host` (unix://PATH) as `tag`
// (name:tag), the way `docker import` does. Returns the engine's image id.
std::string import_into_engine(const std::filesystem::path& rootfs, const std::string& host,
                               const std::string& tag, const BuiltRootfs& scratch);

}  // namespace airlock::cli
