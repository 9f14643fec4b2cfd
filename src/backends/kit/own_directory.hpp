// One directory of a backend's state, made or checked without ever following a link: another
// user could plant one where root is about to keep records, sockets or disks.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <string_view>

#include "airlock/errors.hpp"
#include "base/syscall_error.hpp"
#include "base/unique_fd.hpp"

namespace airlock::backend_kit {

// Makes `path` (its parent exists and is ours) a directory of `mode` owned by `uid`:`gid`: it
// is created, then opened with O_NOFOLLOW and checked to be a directory of root's (or already
// of `uid`'s) before its mode and owner are set through the descriptor. Something else in its
// place — a link, a file, someone else's directory — is refused with BackendError naming it.
inline void make_own_directory(const std::filesystem::path& path, mode_t mode, uid_t uid,
                               gid_t gid, std::string_view backend) {
  const std::string who = "the " + std::string(backend) + " backend";
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    throw BackendError(who + " could not create its state directory",
                       base::errno_error("mkdir", path.string()));
  }
  base::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat info {};
  if (!fd || ::fstat(fd.get(), &info) != 0) {
    const int error = errno;
    throw BackendError(who + " refuses its state directory",
                       path.string() + " is not a directory it can open without following a link: " +
                           base::errno_text(error),
                       base::errno_code(error));
  }
  if (info.st_uid != 0 && info.st_uid != uid) {
    throw BackendError(who + " refuses its state directory",
                       path.string() + " belongs to uid " + std::to_string(info.st_uid));
  }
  if (::fchown(fd.get(), uid, gid) != 0) {
    throw BackendError(who + " could not prepare its state directory",
                       base::errno_error("fchown", path.string()));
  }
  if (::fchmod(fd.get(), mode) != 0) {
    throw BackendError(who + " could not prepare its state directory",
                       base::errno_error("fchmod", path.string()));
  }
}

}  // namespace airlock::backend_kit
