#include "backends/linux/id_slots.hpp"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "airlock/errors.hpp"
#include "base/syscall_error.hpp"

namespace airlock::linux_backend {
namespace {

constexpr std::uint64_t kIdCeiling = std::uint64_t{1} << 31;

[[noreturn]] void unusable(const std::filesystem::path& path, const std::string& why) {
  throw BackendError("the linux backend cannot hand out host id ranges",
                     path.string() + ": " + why);
}

[[noreturn]] void unusable(const std::filesystem::path& path, const char* syscall, int error) {
  throw BackendError("the linux backend cannot hand out host id ranges",
                     base::SyscallError(error, syscall, path.string()));
}

}  // namespace

base::UniqueFd open_id_slot_directory(const std::filesystem::path& path) {
  for (const auto& step : {path.parent_path(), path}) {
    if (::mkdir(step.c_str(), 0700) != 0 && errno != EEXIST) unusable(step, "mkdir", errno);
    struct stat info {};
    if (::lstat(step.c_str(), &info) != 0) unusable(step, "lstat", errno);
    if (S_ISLNK(info.st_mode) || !S_ISDIR(info.st_mode)) unusable(step, "not a directory");
    if (info.st_uid != ::geteuid() || (info.st_mode & 022) != 0) {
      unusable(step, "owned by another user or writable by others");
    }
  }
  base::UniqueFd directory(::open(path.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!directory) unusable(path, "open", errno);
  return directory;
}

std::uint32_t id_slot_count(std::uint32_t uid_base) {
  const std::uint64_t room = kIdCeiling > uid_base ? kIdCeiling - uid_base : 0;
  const std::uint64_t ranges = room / kIdsPerSandbox;
  return ranges > 1 ? static_cast<std::uint32_t>(ranges - 1) : 0;  // slot 0 is the store's
}

std::filesystem::path default_id_slot_directory() { return "/run/airlock/id-slots"; }

IdSlot claim_id_slot(int slots, const std::filesystem::path& directory, std::uint32_t uid_base) {
  const std::uint32_t count = id_slot_count(uid_base);
  if (count == 0) {
    throw BackendError("the linux backend cannot hand out host id ranges",
                       "uid_base " + std::to_string(uid_base) +
                           " leaves no room below 2^31 for a sandbox's 65536 ids");
  }
  std::uint32_t start = 0;
  if (::getrandom(&start, sizeof start, 0) != sizeof start) start = static_cast<std::uint32_t>(::getpid());
  for (std::uint32_t tried = 0; tried < count; ++tried) {
    const std::uint32_t slot = 1 + (start + tried) % count;
    const std::uint32_t base = uid_base + slot * kIdsPerSandbox;
    const std::string name = std::to_string(base) + ".lock";
    base::UniqueFd lock(
        ::openat(slots, name.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!lock) unusable(directory / name, "openat", errno);
    if (::flock(lock.get(), LOCK_EX | LOCK_NB) == 0) return IdSlot{base, std::move(lock)};
    if (errno != EWOULDBLOCK && errno != EINTR) unusable(directory / name, "flock", errno);
  }
  throw BackendError("the linux backend has no host id range left",
                     std::to_string(count) + " sandboxes hold every range above uid_base " +
                         std::to_string(uid_base));
}

}  // namespace airlock::linux_backend
