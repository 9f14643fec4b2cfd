#include "backends/linux/image_source.hpp"

#include <sys/stat.h>

#include "airlock/errors.hpp"

namespace airlock::linux_backend {

ResolvedImage resolve_image(std::string_view reference) {
  ResolvedImage image;
  image.reference = std::string(reference);
  if (reference == "host") {
    image.kind = RootKind::host;
    return image;
  }
  if (!reference.empty() && reference.front() == '/') {
    // The overlay's mount options are comma- and colon-separated: such a path cannot be named.
    if (reference.find_first_of(",:\\\n") != std::string_view::npos) {
      throw InvalidArgument("image '" + std::string(reference) +
                                "': a rootfs path may not contain ',', ':', '\\' or a newline",
                            "image");
    }
    struct stat info {};
    if (::stat(std::string(reference).c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
      throw InvalidArgument("image '" + std::string(reference) +
                                "' is not a directory on this host (the linux backend takes "
                                "\"host\" or an absolute path to a rootfs directory)",
                            "image");
    }
    image.kind = RootKind::directory;
    image.rootfs = std::filesystem::path(reference).lexically_normal();
    return image;
  }
  throw InvalidArgument("image '" + std::string(reference) +
                            "' is not known to the linux backend: it takes \"host\" or an "
                            "absolute path to a rootfs directory",
                        "image");
}

}  // namespace airlock::linux_backend
