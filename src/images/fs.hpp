// Descriptor-relative filesystem helpers for the image store: the openat2 resolution every write
// goes through (base::openat2 with kResolveStore), tree removal that never follows a link, and
// SHA-256.
#pragma once

#include <linux/openat2.h>
#include <openssl/evp.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "base/openat2.hpp"
#include "base/unique_fd.hpp"

namespace airlock::images::detail {

// Throws airlock::SystemError carrying errno: "<action> '<path>': <strerror>".
[[noreturn]] void throw_errno(std::string_view action, std::string_view path, int error_number);
[[noreturn]] void throw_errno(std::string_view action, std::string_view path);

// How every store path is resolved (base::openat2): beneath the directory it starts from, with no
// symbolic link, magic link or mount crossing anywhere in it.
inline constexpr std::uint64_t kResolveStore = base::kResolveConfined | RESOLVE_NO_XDEV;

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
