// One sandbox of the linux backend, as a handle: the Sandbox protocol over the control channel
// (commands) and the host-side file plane (files).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "airlock/backends/linux.hpp"
#include "airlock/sandbox.hpp"
#include "backends/linux/control_channel.hpp"
#include "backends/linux/file_agent.hpp"
#include "backends/linux/file_plane.hpp"
#include "backends/linux/state_store.hpp"

namespace airlock::linux_backend {

class LinuxSandbox final : public Sandbox {
 public:
  // `init_path` is airlock-init, run as the file agent for a sandbox on subordinate ids.
  LinuxSandbox(std::shared_ptr<const LinuxBackendConfig> config, RecordFile record, SandboxKey key,
               const std::filesystem::path& socket_path, base::UniqueFd init_pidfd,
               std::filesystem::path init_path);

  std::string instance_id() const override { return record_.instance_id; }
  const SandboxKey& key() const override { return key_; }
  const std::string& kind() const override { return record_.kind; }

  void write_file(std::string_view path, std::string_view content,
                  std::string_view working_directory) override;
  ExecResult exec(const Command& command, const ExecOptions& options) override;
  ExecResult run_code(std::string_view code, Milliseconds timeout) override;
  std::optional<SandboxEntry> stat_file(std::string_view path,
                                        std::string_view working_directory) override;
  std::string read_file(std::string_view path, std::string_view working_directory,
                        std::uint64_t max_bytes) override;
  std::vector<SandboxEntry> list_dir(std::string_view path,
                                     std::string_view working_directory) override;
  void remove(std::string_view path, std::string_view working_directory, bool recursive) override;
  // The sandbox's host-tools directory, read-only in the guest at /run/airlock-host-tools. It
  // lives in the sandbox's own storage, which no host path names: the host side is a descriptor
  // this handle holds (/proc/self/fd/N), valid in this process while the handle lives.
  std::optional<SocketChannel> socket_channel() override;
  // What the guest wrote (its overlay's upper layer or its work storage, and its /tmp), read
  // from the host while the sandbox is frozen (snapshots.hpp). Root only.
  SnapshotRecord snapshot() override;

  // ---- for the backend (and tests) ----
  const RecordFile& record() const noexcept { return record_; }
  const ControlChannel& channel() const noexcept { return channel_; }
  // Not disposed, and the init is still running.
  bool is_live() const noexcept;
  // Every later call refuses: the instance is gone.
  void mark_disposed() noexcept;

 private:
  void refuse_when_gone() const;
  // The descriptors the init handed over, fetched once per handle. Shared, so that a dispose in
  // another thread never closes a descriptor an operation is still using.
  struct Roots {
    base::UniqueFd root;
    base::UniqueFd host_tools;
  };
  std::shared_ptr<const Roots> roots() const;
  // A file plane together with the descriptors it borrows.
  struct BoundPlane {
    std::shared_ptr<const Roots> roots;
    FilePlane plane;
    const FilePlane* operator->() const noexcept { return &plane; }
  };
  BoundPlane plane() const;
  // The file agent, for a sandbox on subordinate ids (started on first use); null otherwise.
  // Shared, so that a dispose in another thread never ends it under a call in flight.
  std::shared_ptr<RemoteFilePlane> agent() const;

  std::shared_ptr<const LinuxBackendConfig> config_;
  RecordFile record_;
  SandboxKey key_;
  ControlChannel channel_;
  base::UniqueFd init_pidfd_;
  std::vector<std::string> environment_;
  std::filesystem::path state_directory_;
  mutable std::mutex root_mutex_;
  mutable std::shared_ptr<const Roots> roots_;  // guarded by root_mutex_
  std::filesystem::path init_path_;
  mutable std::mutex agent_mutex_;
  mutable std::shared_ptr<RemoteFilePlane> agent_;  // guarded by agent_mutex_
  std::atomic<bool> disposed_{false};
};

}  // namespace airlock::linux_backend
