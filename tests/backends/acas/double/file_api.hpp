// The file API of one double sandbox, as the real service's file plane behaves: it acts with the
// service's own (root) authority and follows links, but every path resolves inside the guest's
// root (openat2 RESOLVE_IN_ROOT from the guest init's /proc/<pid>/root), never the host's.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "airlock/json.hpp"
#include "base/unique_fd.hpp"

namespace airlock::acas_double {

// A refusal with the HTTP status and Azure error code the route answers with.
class FileApiError : public std::runtime_error {
 public:
  FileApiError(int status, std::string code, const std::string& message)
      : std::runtime_error(message), status_(status), code_(std::move(code)) {}
  int status() const noexcept { return status_; }
  const std::string& code() const noexcept { return code_; }

 private:
  int status_;
  std::string code_;
};

class GuestFiles {
 public:
  // `owner`: the host ids new entries get (the guest root's); nullopt leaves them host root's.
  GuestFiles(base::UniqueFd root, std::optional<std::pair<uid_t, gid_t>> owner)
      : root_(std::move(root)), owner_(owner) {}

  // The guest root of the init `init_pid`, with new entries owned by the host ids its uid 0 and
  // gid 0 map to — or left as host root when `unmapped_owner`.
  static GuestFiles of_init(long init_pid, bool unmapped_owner);

  void write(const std::string& path, const std::string& content, bool create_dirs,
             std::optional<mode_t> mode) const;
  // A descriptor to stream from (opened non-blocking: a FIFO then waits in the reader, not here)
  // and the size when it is a regular file.
  std::pair<std::shared_ptr<base::UniqueFd>, std::optional<std::uint64_t>> open_read(
      const std::string& path) const;
  json::Json stat(const std::string& path) const;
  json::Json list(const std::string& path) const;
  void mkdir(const std::string& path) const;
  void remove(const std::string& path, bool recursive) const;

 private:
  base::UniqueFd open_in_root(const std::string& path, std::uint64_t flags,
                              std::uint64_t mode = 0) const;
  void make_directories(const std::string& path) const;
  void give_to_guest(int dir_fd, const std::string& name) const;

  base::UniqueFd root_;
  std::optional<std::pair<uid_t, gid_t>> owner_;
};

}  // namespace airlock::acas_double
