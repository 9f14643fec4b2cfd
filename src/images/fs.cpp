#include "images/fs.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "airlock/errors.hpp"
#include "base/syscall_error.hpp"

namespace airlock::images::detail {

void throw_errno(std::string_view action, std::string_view path, int error_number) {
  std::string message(action);
  if (!path.empty()) message += " '" + std::string(path) + "'";
  message += ": ";
  // Of the store's calls, only openat2 (Linux 5.6) may be missing from a kernel: say so.
  message += base::errno_text(error_number, error_number == ENOSYS ? "openat2" : "");
  throw SystemError(std::move(message), error_number, std::string(path));
}

void throw_errno(std::string_view action, std::string_view path) {
  throw_errno(action, path, errno);
}

namespace {

void remove_children(int fd, std::string_view path, int depth);

void remove_entry(int dirfd, const char* name, std::string_view path, int depth) {
  struct stat st {};
  if (::fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return;
    throw_errno("cannot inspect", path);
  }
  if (!S_ISDIR(st.st_mode)) {
    if (::unlinkat(dirfd, name, 0) != 0 && errno != ENOENT) throw_errno("cannot remove", path);
    return;
  }
  // Extraction refuses paths deeper than this, so a deeper tree is not ours to walk.
  if (depth > 512) throw SystemError("directory tree too deep to remove", ELOOP, std::string(path));
  base::UniqueFd child(::openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!child && errno == EACCES) {
    // A read-only directory of our own (an image's 0555 dir, stored without privilege).
    ::fchmodat(dirfd, name, 0700, 0);
    child.reset(::openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  }
  if (!child) {
    if (errno == ENOENT) return;
    throw_errno("cannot open for removal", path);
  }
  if (::geteuid() != 0) ::fchmod(child.get(), 0700);
  remove_children(child.get(), path, depth + 1);
  child.reset();
  if (::unlinkat(dirfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT) {
    throw_errno("cannot remove directory", path);
  }
}

void remove_children(int fd, std::string_view path, int depth) {
  const int listing = ::dup(fd);
  if (listing < 0) throw_errno("cannot duplicate descriptor of", path);
  DIR* dir = ::fdopendir(listing);
  if (dir == nullptr) {
    ::close(listing);
    throw_errno("cannot list", path);
  }
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string_view name(entry->d_name);
    if (name != "." && name != "..") names.emplace_back(name);
  }
  const int listing_error = errno;
  ::closedir(dir);
  if (listing_error != 0) throw_errno("cannot list", path, listing_error);
  for (const auto& name : names) {
    remove_entry(fd, name.c_str(), std::string(path) + "/" + name, depth);
  }
}

}  // namespace

void remove_tree_at(int dirfd, const std::string& name, std::string_view path_for_errors) {
  remove_entry(dirfd, name.c_str(), path_for_errors, 0);
}

void write_all(int fd, std::string_view data, std::string_view path_for_errors) {
  while (!data.empty()) {
    const ssize_t written = ::write(fd, data.data(), data.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      throw_errno("cannot write", path_for_errors);
    }
    data.remove_prefix(static_cast<std::size_t>(written));
  }
}

std::string read_small_file(int dirfd, const std::string& relative, std::uint64_t limit,
                            std::string_view check, std::string_view path_for_errors) {
  auto opened =
      base::openat2(dirfd, relative.empty() ? "." : relative.c_str(), O_RDONLY, kResolveStore);
  if (!opened) throw_errno("cannot open", path_for_errors, opened.error);
  const base::UniqueFd fd = std::move(opened.fd);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw_errno("cannot inspect", path_for_errors);
  if (!S_ISREG(st.st_mode)) {
    throw InvalidArgument("'" + std::string(path_for_errors) + "' is not a regular file",
                          std::string(check));
  }
  std::string contents;
  char buffer[65536];
  for (;;) {
    const ssize_t got = ::read(fd.get(), buffer, sizeof buffer);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw_errno("cannot read", path_for_errors);
    }
    if (got == 0) break;
    contents.append(buffer, static_cast<std::size_t>(got));
    if (contents.size() > limit) {
      throw InvalidArgument("'" + std::string(path_for_errors) +
                                "' is larger than the ceiling of " + std::to_string(limit) +
                                " bytes (" + std::string(check) + ")",
                            std::string(check));
    }
  }
  return contents;
}

void write_file_atomically(int dirfd, const std::string& name, std::string_view contents,
                           std::string_view path_for_errors) {
  const std::string temporary = "." + name + "." + random_hex() + ".tmp";
  base::UniqueFd fd(::openat(dirfd, temporary.c_str(),
                             O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd) throw_errno("cannot create", path_for_errors);
  try {
    write_all(fd.get(), contents, path_for_errors);
    if (::fsync(fd.get()) != 0) throw_errno("cannot sync", path_for_errors);
    fd.reset();
    if (::renameat(dirfd, temporary.c_str(), dirfd, name.c_str()) != 0) {
      throw_errno("cannot publish", path_for_errors);
    }
  } catch (...) {
    ::unlinkat(dirfd, temporary.c_str(), 0);
    throw;
  }
  if (::fsync(dirfd) != 0) throw_errno("cannot sync the directory of", path_for_errors);
}

std::string random_hex() {
  unsigned char bytes[16];
  std::size_t filled = 0;
  while (filled < sizeof bytes) {
    const ssize_t got = ::getrandom(bytes + filled, sizeof bytes - filled, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw_errno("getrandom", "");
    }
    filled += static_cast<std::size_t>(got);
  }
  return to_hex(std::string_view(reinterpret_cast<const char*>(bytes), sizeof bytes));
}

std::string to_hex(std::string_view raw) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(raw.size() * 2);
  for (const char c : raw) {
    const auto byte = static_cast<unsigned char>(c);
    out.push_back(kDigits[byte >> 4]);
    out.push_back(kDigits[byte & 0xf]);
  }
  return out;
}

Sha256::Sha256() : context_(EVP_MD_CTX_new()) {
  if (context_ == nullptr || EVP_DigestInit_ex(context_, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(context_);
    throw SystemError("cannot initialise SHA-256");
  }
}

Sha256::~Sha256() {
  EVP_MD_CTX_free(context_);
}

void Sha256::update(const void* data, std::size_t size) {
  if (size != 0) EVP_DigestUpdate(context_, data, size);
}

void Sha256::update_zeros(std::uint64_t count) {
  static const char kZeros[65536] = {};
  while (count > 0) {
    const std::size_t chunk =
        count < sizeof kZeros ? static_cast<std::size_t>(count) : sizeof kZeros;
    update(kZeros, chunk);
    count -= chunk;
  }
}

std::string Sha256::finish_raw() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(context_, digest, &length);
  return std::string(reinterpret_cast<const char*>(digest), length);
}

std::string Sha256::finish_hex() {
  return to_hex(finish_raw());
}

}  // namespace airlock::images::detail
