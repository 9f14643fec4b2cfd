// One sandbox handle: a running container, its file plane over the archive endpoints, and exec.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "airlock/sandbox.hpp"
#include "backends/docker/containers.hpp"
#include "backends/docker/engine_context.hpp"
#include "backends/docker/host_plane.hpp"
#include "backends/docker/path_stat.hpp"

namespace airlock::docker {

struct SandboxIdentity {
  std::string container_id;
  std::string container_name;
  SandboxKey key;
  std::string kind;
  std::string work_dir;
  // Added to every exec's environment (the proxy variables of an allowlist sandbox).
  std::vector<std::pair<std::string, std::string>> environment;
  // A forced stop asks the keeper to kill every other process (and confirms it from the
  // engine's process list: at most `keeper_processes` left); otherwise it removes the container.
  bool stop_in_place = true;
  std::size_t keeper_processes = 2;
  // The storage a restart empties, and the work dir to make in it again.
  std::string storage_base;
  std::vector<std::string> work_directories;
  // Snapshots (snapshots.hpp): whether this sandbox's backend takes them, and what they read —
  // every storage place (absolute targets), of `disk_bytes` in all, on which engine.
  bool snapshots = false;
  std::vector<std::string> storage_places;
  std::uint64_t disk_bytes = 0;
  EngineFlavour flavour = EngineFlavour::docker;
};

class DockerSandbox final : public Sandbox {
 public:
  DockerSandbox(std::shared_ptr<EngineContext> engine, SandboxIdentity identity);

  std::string instance_id() const override { return identity_.container_id; }
  const SandboxKey& key() const override { return identity_.key; }
  const std::string& kind() const override { return identity_.kind; }

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
  // Its storage places, quiesced while they are read, kept on the engine as an image.
  SnapshotRecord snapshot() override;

  const std::string& container_name() const noexcept { return identity_.container_name; }

 private:
  // The engine's no-follow stat of an absolute guest path; nullopt when absent.
  std::optional<PathStat> stat_path(const std::string& absolute);
  // A memoising GuestStat for one call's walk, so the walk and the operation that follows it
  // ask the engine once per component.
  class Walk;
  // The host plane's root when it applies (see DockerConfig::file_plane), else nullptr.
  std::shared_ptr<const HostRoot> host_root();
  std::string archive_path(const std::string& absolute) const;
  // Kill every process in the container but its init and keeper: the keeper's own kill, confirmed
  // from the engine's process list (the files survive; true). Otherwise the container is removed
  // and the answer is false: the caller condemns the instance. Never throws.
  bool force_stop() noexcept;
  bool stop_in_place() noexcept;

  std::shared_ptr<EngineContext> engine_;
  SandboxIdentity identity_;
  std::mutex plane_mutex_;
  std::shared_ptr<const HostRoot> host_root_;
  std::string host_plane_refusal_;  // why the host plane does not apply, once known for good
};

}  // namespace airlock::docker
