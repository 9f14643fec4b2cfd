// Descriptor-relative filesystem helpers for the image store: owned descriptors, the openat2
// resolution every write goes through, tree removal that never follows a link, and SHA-256.
#pragma once

#include <openssl/evp.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace airlock::images::detail {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  int release() noexcept;
  void reset(int fd = -1) noexcept;

 private:
  int fd_ = -1;
};

// Throws airlock::SystemError carrying errno: "<action> '<path>': <strerror>".
[[noreturn]] void throw_errno(std::string_view action, std::string_view path, int error_number);
[[noreturn]] void throw_errno(std::string_view action, std::string_view path);

// openat2 beneath `dirfd` with no symbolic link, magic link or mount crossing anywhere in
// `relative` (which must not be absolute). Returns -1 with errno set on failure, like openat.
int open_beneath(int dirfd, const std::string& relative, int flags, unsigned mode = 0);

// Removes `name` in `dirfd` — a whole tree when it is a directory — never following a link.
// Directories the caller owns but cannot write are made writable first. A missing entry is fine.
void remove_tree_at(int dirfd, const std::string& name, std::string_view path_for_errors);

// Writes all of `data` (retrying short writes and EINTR).
void write_all(int fd, std::string_view data, std::string_view path_for_errors);
// Reads a whole file of at most `limit` bytes (more → InvalidArgument with `check`).
std::string read_small_file(int dirfd, const std::string& relative, std::uint64_t limit,
                            std::string_view check, std::string_view path_for_errors);

// Writes `contents` to `dir/name` atomically: a temporary sibling, fsync, rename, fsync of dir.
void write_file_atomically(int dirfd, const std::string& name, std::string_view contents,
                           std::string_view path_for_errors);

// 16 random bytes as 32 hex digits.
std::string random_hex();

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, std::size_t size);
  void update(std::string_view data) { update(data.data(), data.size()); }
  // Feeds `count` zero bytes (the holes of a sparse file).
  void update_zeros(std::uint64_t count);
  // 32 raw bytes; the object must not be used afterwards.
  std::string finish_raw();
  std::string finish_hex();

 private:
  EVP_MD_CTX* context_;
};

std::string to_hex(std::string_view raw);

}  // namespace airlock::images::detail
