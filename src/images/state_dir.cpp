#include "airlock/state_dir.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

#include "airlock/errors.hpp"
#include "base/syscall_error.hpp"

namespace airlock {

namespace {
const char* environment(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && *value != '\0') ? value : nullptr;
}
}  // namespace

namespace {

[[noreturn]] void refuse_state(const std::filesystem::path& path, const std::string& why) {
  throw InvalidArgument("the state directory " + path.string() + " is refused: " + why,
                        "state_dir");
}

bool trusted_owner(uid_t owner) { return owner == 0 || owner == ::geteuid(); }

// A directory others may not change what is in: not writable by group or others, unless sticky.
bool others_cannot_change(const struct stat& info) {
  return (info.st_mode & (S_IWGRP | S_IWOTH)) == 0 || (info.st_mode & S_ISVTX) != 0;
}

}  // namespace

void prepare_state_directory(const std::filesystem::path& requested) {
  if (!requested.is_absolute()) refuse_state(requested, "it is not an absolute path");
  const std::filesystem::path directory = requested.lexically_normal();
  std::filesystem::path walked = "/";
  std::filesystem::path shown = "/";  // the path as the caller wrote it, for messages
  bool created_any = false;
  std::vector<std::filesystem::path> parts(directory.begin(), directory.end());
  for (std::size_t index = 1; index < parts.size(); ++index) {
    const auto& part = parts[index];
    if (part.empty()) continue;
    const bool last = index + 1 == parts.size();
    shown /= part;
    struct stat parent {};
    if (::stat(walked.c_str(), &parent) != 0) refuse_state(shown, base::errno_text(errno));
    const std::filesystem::path next = walked / part;
    struct stat info {};
    if (::lstat(next.c_str(), &info) != 0) {
      if (errno != ENOENT) refuse_state(shown, base::errno_text(errno));
      if (::mkdir(next.c_str(), 0700) != 0 && errno != EEXIST) {
        refuse_state(shown, std::string("cannot create it: ") + base::errno_text(errno));
      }
      created_any = true;
      if (::lstat(next.c_str(), &info) != 0) refuse_state(shown, base::errno_text(errno));
      if (S_ISLNK(info.st_mode) || !S_ISDIR(info.st_mode) || info.st_uid != ::geteuid()) {
        refuse_state(shown, "something else appeared there while it was being created");
      }
      if (::chmod(next.c_str(), 0711) != 0) refuse_state(shown, base::errno_text(errno));
      walked = next;
      continue;
    }
    if (S_ISLNK(info.st_mode)) {
      if (last || created_any) refuse_state(shown, "it is a symbolic link");
      if (!trusted_owner(info.st_uid) || !others_cannot_change(parent)) {
        refuse_state(shown, "it is a symbolic link another user could have planted or changed");
      }
      std::error_code error;
      const auto target = std::filesystem::canonical(next, error);
      if (error) refuse_state(shown, "the link leads nowhere: " + error.message());
      walked = target;
      if (::lstat(walked.c_str(), &info) != 0) refuse_state(shown, base::errno_text(errno));
      // The target's own ancestors are the link owner's choice (root's, or the caller's).
    } else {
      walked = next;
    }
    if (!S_ISDIR(info.st_mode)) refuse_state(shown, "it is not a directory");
    if (!trusted_owner(info.st_uid)) {
      refuse_state(shown, "it is owned by another user (uid " + std::to_string(info.st_uid) +
                              "), who could swap what lies beneath");
    }
    if (last) {
      if (info.st_uid != ::geteuid()) {
        refuse_state(shown, "it is not owned by this user (uid " + std::to_string(::geteuid()) +
                                ")");
      }
      if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        refuse_state(shown, "it is writable by its group or by others");
      }
    } else if (!others_cannot_change(info)) {
      refuse_state(shown, "it is writable by others without the sticky bit, so another user "
                          "could swap what lies beneath");
    }
  }
}

std::filesystem::path default_state_dir() {
  if (const char* configured = environment("AIRLOCK_STATE_DIR")) {
    std::filesystem::path path(configured);
    if (!path.is_absolute()) {
      throw InvalidArgument(
          "AIRLOCK_STATE_DIR must be an absolute path, not '" + std::string(configured) + "'",
          "state_dir");
    }
    return path.lexically_normal();
  }
  if (::geteuid() == 0) return "/var/lib/airlock";
  if (const char* xdg = environment("XDG_STATE_HOME")) {
    // The XDG base directory rules say a relative value is invalid and must be ignored.
    if (std::filesystem::path(xdg).is_absolute()) {
      return (std::filesystem::path(xdg) / "airlock").lexically_normal();
    }
  }
  const char* home = environment("HOME");
  if (home == nullptr || !std::filesystem::path(home).is_absolute()) {
    throw InvalidArgument(
        "cannot choose a state directory: HOME is unset or relative; set AIRLOCK_STATE_DIR",
        "state_dir");
  }
  return (std::filesystem::path(home) / ".local/state/airlock").lexically_normal();
}

}  // namespace airlock
