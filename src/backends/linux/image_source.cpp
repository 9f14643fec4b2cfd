#include "backends/linux/image_source.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include "airlock/errors.hpp"
#include "airlock/images.hpp"

namespace airlock::linux_backend {
namespace {

// The overlay's mount options are comma- and colon-separated: such a path cannot be named.
void check_overlay_safe(const std::string& path, std::string_view reference) {
  if (path.find_first_of(",:\\\n") != std::string::npos) {
    throw InvalidArgument("image '" + std::string(reference) +
                              "': its rootfs path may not contain ',', ':', '\\' or a newline",
                          "image");
  }
}

}  // namespace

ResolvedImage resolve_image(std::string_view reference, const ImageStoreLocation& store) {
  ResolvedImage image;
  image.reference = std::string(reference);
  if (reference == "host") {
    image.kind = RootKind::host;
    return image;
  }
  if (!reference.empty() && reference.front() == '/') {
    check_overlay_safe(std::string(reference), reference);
    struct stat info {};
    if (::stat(std::string(reference).c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
      throw InvalidArgument("image '" + std::string(reference) +
                                "' is not a directory on this host (the linux backend takes "
                                "\"host\", an absolute path to a rootfs directory, or an image "
                                "store reference)",
                            "image");
    }
    image.kind = RootKind::directory;
    image.rootfs = std::filesystem::path(reference).lexically_normal();
    return image;
  }
  const images::ImageStore images(store.root,
                                  images::OwnershipMap::for_current_process(store.uid_base));
  images::ImagePin pin = images.pin(reference);
  check_overlay_safe(pin.image().rootfs.string(), reference);
  // The pin is a shared flock held through an open file description: a duplicate carries it
  // into the sandbox's init, which holds it for exactly as long as the sandbox lives.
  image.pin.reset(::fcntl(pin.fd(), F_DUPFD_CLOEXEC, 0));
  if (!image.pin) throw SystemError("cannot hold the image's pin", errno);
  image.kind = RootKind::directory;
  image.rootfs = pin.image().rootfs;
  image.reference = pin.image().reference + " (" + pin.image().id + ")";
  return image;
}

}  // namespace airlock::linux_backend
