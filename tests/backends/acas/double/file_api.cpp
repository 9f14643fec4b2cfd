#include "file_api.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "backends/linux/tree_removal.hpp"
#include "base/openat2.hpp"

namespace airlock::acas_double {
namespace {

constexpr std::uint64_t kInRoot = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;

[[noreturn]] void fail_errno(int error, const std::string& what, const std::string& path) {
  const std::string message = what + " '" + path + "': " + std::strerror(error);
  switch (error) {
    case ENOENT: throw FileApiError(404, "FileNotFound", message);
    case ENOTDIR: throw FileApiError(400, "NotADirectory", message);
    case EISDIR: throw FileApiError(400, "IsADirectory", message);
    case EEXIST: throw FileApiError(409, "AlreadyExists", message);
    case ENOTEMPTY: throw FileApiError(409, "DirectoryNotEmpty", message);
    case EACCES:
    case EPERM:
    case EROFS: throw FileApiError(403, "PermissionDenied", message);
    case ENXIO: throw FileApiError(409, "NoReader", message);
    default: throw FileApiError(500, "FileOperationFailed", message);
  }
}

// "/a/b/" → {"/a", "b"}; "/" → {"/", ""}. Relative paths are taken from the guest's root.
std::pair<std::string, std::string> split(const std::string& path) {
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  if (trimmed.empty() || trimmed == "/") return {"/", ""};
  const std::size_t slash = trimmed.rfind('/');
  if (slash == std::string::npos) return {"/", trimmed};
  return {slash == 0 ? "/" : trimmed.substr(0, slash), trimmed.substr(slash + 1)};
}

void require_path(const std::string& path) {
  if (path.empty()) throw FileApiError(400, "InvalidPath", "path is required");
  if (path.find('\0') != std::string::npos) {
    throw FileApiError(400, "InvalidPath", "path contains NUL");
  }
}

std::string join(const std::string& directory, const std::string& name) {
  if (!directory.empty() && directory.back() == '/') return directory + name;
  return directory + "/" + name;
}

// The service's FileInfo, as live groups answer it: permission bits only; a FIFO, socket or device
// looks exactly like an empty regular file; a link reports its target and the target's length.
json::Json file_info(const std::string& name, const std::string& path, const struct stat& info,
                     const std::optional<std::string>& link_target) {
  const bool is_dir = S_ISDIR(info.st_mode);
  const bool is_link = S_ISLNK(info.st_mode);
  const bool is_special = !is_dir && !is_link && !S_ISREG(info.st_mode);
  json::Json entry = {{"name", name},
                      {"path", path},
                      {"size", is_special ? 0 : static_cast<std::int64_t>(info.st_size)},
                      {"mode", static_cast<int>(info.st_mode & 0777)},
                      {"isDir", is_dir},
                      {"isSymlink", is_link},
                      {"modifiedTime", static_cast<std::int64_t>(info.st_mtim.tv_sec)}};
  if (is_link && link_target) entry["symlinkTarget"] = *link_target;
  return entry;
}

std::optional<std::string> read_link(int dir_fd, const std::string& name) {
  std::vector<char> buffer(4096);
  const ssize_t got = ::readlinkat(dir_fd, name.c_str(), buffer.data(), buffer.size());
  if (got < 0) return std::nullopt;
  return std::string(buffer.data(), static_cast<std::size_t>(got));
}

// The host id that id 0 of the map at `file` (/proc/<pid>/uid_map or gid_map) stands for.
std::optional<std::uint32_t> host_id_of_zero(const std::string& file) {
  std::ifstream map(file);
  std::uint64_t inside = 0;
  std::uint64_t outside = 0;
  std::uint64_t count = 0;
  while (map >> inside >> outside >> count) {
    if (inside == 0 && count > 0) return static_cast<std::uint32_t>(outside);
  }
  return std::nullopt;
}

}  // namespace

GuestFiles GuestFiles::of_init(long init_pid, bool unmapped_owner) {
  const std::string proc = "/proc/" + std::to_string(init_pid);
  base::UniqueFd root(::open((proc + "/root").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root) {
    throw FileApiError(500, "SandboxUnavailable",
                       "cannot open the guest root of pid " + std::to_string(init_pid) + ": " +
                           std::strerror(errno));
  }
  std::optional<std::pair<uid_t, gid_t>> owner;
  if (!unmapped_owner) {
    const auto uid = host_id_of_zero(proc + "/uid_map");
    const auto gid = host_id_of_zero(proc + "/gid_map");
    if (uid && gid) owner = std::make_pair(*uid, *gid);
  }
  return GuestFiles(std::move(root), owner);
}

base::UniqueFd GuestFiles::open_in_root(const std::string& path, std::uint64_t flags,
                                        std::uint64_t mode) const {
  base::Opened opened = base::openat2(root_.get(), path.c_str(), flags, kInRoot, mode);
  if (!opened) fail_errno(opened.error, "open", path);
  return std::move(opened.fd);
}

void GuestFiles::give_to_guest(int dir_fd, const std::string& name) const {
  if (!owner_) return;
  (void)::fchownat(dir_fd, name.c_str(), owner_->first, owner_->second, AT_SYMLINK_NOFOLLOW);
}

void GuestFiles::make_directories(const std::string& path) const {
  std::string prefix;
  std::stringstream parts(path);
  std::string part;
  while (std::getline(parts, part, '/')) {
    if (part.empty() || part == ".") continue;
    const std::string parent = prefix.empty() ? "/" : prefix;
    prefix += "/" + part;
    if (base::openat2(root_.get(), prefix.c_str(), O_PATH | O_DIRECTORY, kInRoot)) continue;
    base::UniqueFd parent_fd = open_in_root(parent, O_PATH | O_DIRECTORY);
    if (::mkdirat(parent_fd.get(), part.c_str(), 0755) != 0) {
      if (errno == EEXIST) continue;
      fail_errno(errno, "mkdir", prefix);
    }
    give_to_guest(parent_fd.get(), part);
  }
}

void GuestFiles::write(const std::string& path, const std::string& content, bool create_dirs,
                       std::optional<mode_t> mode) const {
  require_path(path);
  const auto [parent, name] = split(path);
  if (name.empty()) throw FileApiError(400, "IsADirectory", "cannot write the root directory");
  if (create_dirs) make_directories(parent);
  // Created here: owned by the guest's root. Already there (or a link to something there):
  // truncated in place, through the link, as the real service does. Non-blocking, so a FIFO
  // without a reader is refused rather than holding this thread.
  bool created = true;
  base::Opened opened = base::openat2(root_.get(), path.c_str(),
                                      O_WRONLY | O_CREAT | O_EXCL | O_NONBLOCK, kInRoot,
                                      mode.value_or(0644));
  if (!opened && opened.error == EEXIST) {
    created = false;
    opened = base::openat2(root_.get(), path.c_str(), O_WRONLY | O_TRUNC | O_NONBLOCK, kInRoot);
  }
  if (!opened) fail_errno(opened.error, "write", path);
  const int fd = opened.fd.get();
  if (created && owner_) (void)::fchown(fd, owner_->first, owner_->second);
  if (mode) (void)::fchmod(fd, *mode);
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t wrote = ::write(fd, content.data() + done, content.size() - done);
    if (wrote < 0) {
      if (errno == EINTR) continue;
      fail_errno(errno, "write", path);
    }
    done += static_cast<std::size_t>(wrote);
  }
}

std::pair<std::shared_ptr<base::UniqueFd>, std::optional<std::uint64_t>> GuestFiles::open_read(
    const std::string& path) const {
  require_path(path);
  auto fd = std::make_shared<base::UniqueFd>(open_in_root(path, O_RDONLY | O_NONBLOCK));
  struct stat info {};
  if (::fstat(fd->get(), &info) != 0) fail_errno(errno, "stat", path);
  if (S_ISDIR(info.st_mode)) {
    throw FileApiError(400, "IsADirectory", "'" + path + "' is a directory");
  }
  std::optional<std::uint64_t> size;
  if (S_ISREG(info.st_mode)) size = static_cast<std::uint64_t>(info.st_size);
  return {fd, size};
}

json::Json GuestFiles::stat(const std::string& path) const {
  require_path(path);
  const auto [parent, name] = split(path);
  struct stat info {};
  if (name.empty()) {
    if (::fstat(root_.get(), &info) != 0) fail_errno(errno, "stat", path);
    return file_info("/", "/", info, std::nullopt);
  }
  base::UniqueFd parent_fd = open_in_root(parent, O_PATH | O_DIRECTORY);
  if (::fstatat(parent_fd.get(), name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) {
    fail_errno(errno, "stat", path);
  }
  std::optional<std::string> target;
  if (S_ISLNK(info.st_mode)) target = read_link(parent_fd.get(), name);
  return file_info(name, path, info, target);
}

json::Json GuestFiles::list(const std::string& path) const {
  require_path(path);
  base::UniqueFd directory = open_in_root(path, O_RDONLY | O_DIRECTORY);
  const int listing_fd = ::dup(directory.get());
  DIR* listing = listing_fd >= 0 ? ::fdopendir(listing_fd) : nullptr;
  if (listing == nullptr) {
    if (listing_fd >= 0) ::close(listing_fd);
    fail_errno(errno, "list", path);
  }
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(listing)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(listing);
  std::sort(names.begin(), names.end());
  json::Json entries = json::Json::array();
  for (const auto& name : names) {
    struct stat info {};
    if (::fstatat(directory.get(), name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) continue;
    std::optional<std::string> target;
    if (S_ISLNK(info.st_mode)) target = read_link(directory.get(), name);
    entries.push_back(file_info(name, join(path, name), info, target));
  }
  return {{"path", path}, {"entries", entries}};
}

void GuestFiles::mkdir(const std::string& path) const {
  require_path(path);
  make_directories(path);
}

void GuestFiles::remove(const std::string& path, bool recursive) const {
  require_path(path);
  const auto [parent, name] = split(path);
  if (name.empty()) throw FileApiError(400, "InvalidPath", "cannot remove the root directory");
  base::UniqueFd parent_fd = open_in_root(parent, O_PATH | O_DIRECTORY);
  struct stat info {};
  if (::fstatat(parent_fd.get(), name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) {
    fail_errno(errno, "delete", path);
  }
  if (!S_ISDIR(info.st_mode)) {
    if (::unlinkat(parent_fd.get(), name.c_str(), 0) != 0) fail_errno(errno, "delete", path);
    return;
  }
  if (!recursive) {
    if (::unlinkat(parent_fd.get(), name.c_str(), AT_REMOVEDIR) != 0) {
      fail_errno(errno, "delete", path);
    }
    return;
  }
  const linux_backend::TreeRemoval removal = linux_backend::remove_tree(parent_fd.get(), name);
  if (removal.error_number != 0) {
    fail_errno(removal.error_number, "delete", join(path, removal.where));
  }
}

}  // namespace airlock::acas_double
