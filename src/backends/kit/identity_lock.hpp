// The cross-process lock of one sandbox identity: an exclusive flock on <locks>/<id>.lock, held
// while the descriptor lives. Get-or-create and dispose of one identity take it in every
// process, so two never build or tear down the same sandbox at once. The lock files stay (one
// removed while someone waits on it would break the exclusion), and one is never opened through
// a link planted in its place.
#pragma once

#include <fcntl.h>
#include <sys/file.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <string_view>

#include "airlock/errors.hpp"
#include "base/syscall_error.hpp"
#include "base/unique_fd.hpp"

namespace airlock::backend_kit {

inline base::UniqueFd lock_identity(const std::filesystem::path& locks, const std::string& id,
                                    std::string_view backend) {
  const std::filesystem::path path = locks / (id + ".lock");
  const std::string refusal = "the " + std::string(backend) + " backend could not lock a sandbox";
  base::UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) throw BackendError(refusal, base::errno_error("open", path.string()));
  while (::flock(fd.get(), LOCK_EX) != 0) {
    if (errno != EINTR) throw BackendError(refusal, base::errno_error("flock", path.string()));
  }
  return fd;
}

}  // namespace airlock::backend_kit
