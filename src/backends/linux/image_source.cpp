#include "backends/linux/image_source.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include "airlock/errors.hpp"
#include "airlock/images.hpp"

namespace airlock::linux_backend {

ResolvedImage resolve_image(std::string_view reference, const ImageStoreLocation& store) {
  ResolvedImage image;
  image.reference = std::string(reference);
  if (reference == "host") {
    image.kind = RootKind::host;
    return image;
  }
  if (!reference.empty() && reference.front() == '/') {
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
