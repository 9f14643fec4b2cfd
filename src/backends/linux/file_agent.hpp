// The file plane run inside the sandbox's namespaces, for a sandbox the host process cannot
// work on from outside: an unprivileged host whose guest runs on subordinate ids. Its files are
// owned by ids that are not the host user's, who may not read a guest's 0600 file or create one
// in its directories; the guest root may — and so may a process that joins the sandbox's user
// namespace, which the host user created and so holds every capability in.
//
// The agent is airlock-init started as `airlock-init --files` with three descriptors: 3, its end
// of a SOCK_SEQPACKET pair, and 4 and 5, the init's user and mount namespaces (which the init
// hands only to a holder of its control secret: it is not dumpable, so no host process may open
// them through /proc). It joins them, becomes the guest root, drops its groups, becomes
// non-dumpable, and runs the
// same FilePlane the host runs for every other sandbox — beneath its own "/", under the same
// openat2 rules — one request at a time, until its end of the pair is closed. No guest process
// is its parent or can reach it: it is a child of the host process, in no pid namespace of the
// sandbox's.
//
// A request is one message: op, path, working directory, max_bytes, recursive, and for a write
// the content in a memfd (descriptor). A reply is one message: ok with the result (a read's
// bytes in a memfd), or the error's type, message, check, errno, path and (for a transfer cap)
// its cap, file, limit and size — rebuilt on the host as the same exception type.
#pragma once

#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "airlock/records.hpp"
#include "base/unique_fd.hpp"

namespace airlock::linux_backend {

namespace file_agent {

enum class Op : std::uint32_t { write = 1, stat = 2, read = 3, list = 4, remove = 5 };

inline constexpr int kChannelFd = 3;
inline constexpr int kUserNamespaceFd = 4;
inline constexpr int kMountNamespaceFd = 5;

}  // namespace file_agent

// The host side: one agent per handle, started on first use, spoken to one request at a time.
class RemoteFilePlane {
 public:
  // The namespace descriptors are borrowed for the spawn only.
  RemoteFilePlane(std::filesystem::path init_path, int user_namespace, int mount_namespace,
                  std::uint64_t max_write_bytes);
  ~RemoteFilePlane();
  RemoteFilePlane(const RemoteFilePlane&) = delete;
  RemoteFilePlane& operator=(const RemoteFilePlane&) = delete;

  void write_file(std::string_view path, std::string_view content,
                  std::string_view working_directory);
  std::optional<SandboxEntry> stat_file(std::string_view path, std::string_view working_directory);
  std::string read_file(std::string_view path, std::string_view working_directory,
                        std::uint64_t max_bytes);
  std::vector<SandboxEntry> list_dir(std::string_view path, std::string_view working_directory);
  void remove(std::string_view path, std::string_view working_directory, bool recursive);

 private:
  struct Reply;
  Reply call(file_agent::Op op, std::string_view path, std::string_view working_directory,
             std::uint64_t max_bytes, bool recursive, std::string_view content);

  std::mutex mutex_;
  base::UniqueFd channel_;
  pid_t agent_ = -1;
  std::uint64_t max_write_bytes_;
};

// The agent side (airlock-init --files): never returns.
[[noreturn]] void serve_file_agent();

}  // namespace airlock::linux_backend
