#include "backends/kit/guest/walk.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "backends/kit/guest/file_protocol.hpp"

namespace airlock::guest_kit {

Failure system_failure(int error, const std::string& what, const std::string& path) {
  return {kFileSystem,
          "errno " + std::to_string(error) + " " + what + " " + path + ": " + std::strerror(error)};
}

bool split_absolute(const std::string& path, std::vector<std::string>& components,
                    Failure& failure) {
  components.clear();
  if (path.empty() || path.front() != '/') {
    failure = {kFileUsage, "not an absolute path: " + path};
    return false;
  }
  std::size_t start = 1;
  while (start <= path.size()) {
    const std::size_t end = path.find('/', start);
    const std::string part =
        path.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (part.empty() && end == std::string::npos && start == path.size()) break;  // "/" or "a/"
    if (part.empty() || part == "." || part == "..") {
      failure = {kFileUsage, "not a normalised path: " + path};
      return false;
    }
    components.push_back(part);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return true;
}

namespace {

std::string prefix(const std::vector<std::string>& components, std::size_t count) {
  std::string out;
  for (std::size_t i = 0; i < count; ++i) out += "/" + components[i];
  return out.empty() ? "/" : out;
}

// Why openat(O_DIRECTORY | O_NOFOLLOW) refused: ELOOP and ENOTDIR are both what a link gives
// (which one depends on the kernel); an lstat of the same name tells a link from a file. The
// answer is only a classification: the refusal itself already happened in the kernel.
Failure classify(int parent, const std::string& name, int error, const std::string& path) {
  if (error == ELOOP || error == ENOTDIR) {
    struct stat info {};
    if (::fstatat(parent, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) == 0 &&
        !S_ISLNK(info.st_mode) && error == ENOTDIR) {
      return {kFileNotDirectory, "not a directory: " + path};
    }
    return {kFileLink, "a link on the path: " + path};
  }
  if (error == ENOENT) return {kFileNotFound, "no such directory: " + path};
  return system_failure(error, "open", path);
}

}  // namespace

base::UniqueFd open_directory(const std::vector<std::string>& components, std::size_t count,
                              bool create, Failure& failure) {
  base::UniqueFd current(::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!current) {
    failure = system_failure(errno, "open", "/");
    return base::UniqueFd();
  }
  constexpr int kFlags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  for (std::size_t i = 0; i < count; ++i) {
    const std::string& name = components[i];
    int next = ::openat(current.get(), name.c_str(), kFlags);
    if (next < 0 && errno == ENOENT && create) {
      if (::mkdirat(current.get(), name.c_str(), 0755) != 0 && errno != EEXIST) {
        failure = system_failure(errno, "mkdir", prefix(components, i + 1));
        return base::UniqueFd();
      }
      next = ::openat(current.get(), name.c_str(), kFlags);
    }
    if (next < 0) {
      failure = classify(current.get(), name, errno, prefix(components, i + 1));
      return base::UniqueFd();
    }
    current = base::UniqueFd(next);
  }
  return current;
}

}  // namespace airlock::guest_kit
