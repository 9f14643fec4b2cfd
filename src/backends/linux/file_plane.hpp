// The sandbox's file plane, worked from the host side beneath a held descriptor of the sandbox's
// root. Every lookup is openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
// and every leaf operation is an *at() call with AT_SYMLINK_NOFOLLOW / O_NOFOLLOW, so a link
// anywhere on a path is refused by the kernel in the very lookup that does the work: a guest
// that swaps a directory for a link between two calls gains nothing.
//
// Refusals, as the protocol says (sandbox.hpp):
//   ConfinementError  outside the working directory (lexically), a link in any parent (the
//                     working directory's ancestors included), a write or remove of the
//                     working directory itself, a write onto a link
//   NotADirectory     a parent that is a non-directory and not a link
//   NotFound          read/list of a missing path (stat answers nullopt, remove succeeds)
//   IsADirectory      read of a directory; remove of a directory without `recursive`
//   SystemError       read of a link, a FIFO, a device, a socket, or a file with other hard
//                     links (it could name a file the guest could not read); a read-only part
//                     of the sandbox (EROFS)
//   TransferCapExceeded  read of a file larger than max_bytes (refused from its size, before a
//                     byte is read; a file that grows while read is refused too), or a write
//                     larger than the backend's declared per-file ceiling
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "airlock/records.hpp"

namespace airlock::linux_backend {

class FilePlane {
 public:
  // `root_fd` is borrowed and must outlive the plane. Files and directories the plane creates are
  // owned by `owner` (the guest's root on the host) when `chown` is set. `proc_directory`, when
  // not -1, is a /proc of this process's pid namespace to reopen descriptors through (the file
  // agent has joined a mount namespace whose /proc is another pid namespace's).
  FilePlane(int root_fd, uid_t owner_uid, gid_t owner_gid, bool chown,
            std::uint64_t max_write_bytes, int proc_directory = -1)
      : root_(root_fd),
        owner_uid_(owner_uid),
        owner_gid_(owner_gid),
        chown_(chown),
        max_write_bytes_(max_write_bytes),
        proc_(proc_directory) {}

  void write_file(std::string_view path, std::string_view content,
                  std::string_view working_directory) const;
  // The same, the content being the first `size` bytes of `source` (a memfd the host filled):
  // copied in the kernel, never through this process's memory.
  void write_file_from(std::string_view path, int source, std::uint64_t size,
                       std::string_view working_directory) const;
  std::optional<SandboxEntry> stat_file(std::string_view path,
                                        std::string_view working_directory) const;
  std::string read_file(std::string_view path, std::string_view working_directory,
                        std::uint64_t max_bytes) const;
  std::vector<SandboxEntry> list_dir(std::string_view path,
                                     std::string_view working_directory) const;
  void remove(std::string_view path, std::string_view working_directory, bool recursive) const;

 private:
  // Everything a write does but filling the file: `fill(fd)` writes the content into the new
  // sibling and returns 0, or an errno.
  void write_with(std::string_view path, std::uint64_t size, std::string_view working_directory,
                  const std::function<int(int)>& fill) const;

  int root_;
  uid_t owner_uid_;
  gid_t owner_gid_;
  bool chown_;
  std::uint64_t max_write_bytes_;
  int proc_;
};

}  // namespace airlock::linux_backend
