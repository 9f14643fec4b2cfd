// The Sandbox handle of one gvisor container.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "airlock/backends/gvisor.hpp"
#include "airlock/sandbox.hpp"
#include "backends/gvisor/guest_exec.hpp"

namespace airlock::gvisor_backend {

// Commands running at once in one sandbox; a caller whose deadline passes while waiting gets
// QueuedTimeout (nothing ran).
class CommandSlots {
 public:
  explicit CommandSlots(std::uint32_t slots) : free_(slots) {}
  void acquire(std::chrono::steady_clock::time_point deadline);
  void release();

 private:
  std::mutex mutex_;
  std::condition_variable freed_;
  std::uint32_t free_;
};

class GvisorSandbox final : public Sandbox {
 public:
  GvisorSandbox(std::shared_ptr<GuestChannel> channel,
                std::shared_ptr<const GvisorBackendConfig> config, std::string container_id,
                std::string instance_id, SandboxKey key, std::string kind, std::string work_dir);

  std::string instance_id() const override { return instance_id_; }
  const SandboxKey& key() const override { return key_; }
  const std::string& kind() const override { return kind_; }
  const std::string& container_id() const noexcept { return container_id_; }

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
  // The keeper socket's directory (channel_test.cpp proves what a guest can do with it).
  std::vector<std::string> backend_socket_directories() const override;

 private:
  // One helper subcommand (stat, read, …) under the command slots; returns its result whatever
  // its exit code.
  ExecResult helper(std::vector<std::string> arguments, std::string stdin_bytes, bool feed,
                    std::uint64_t max_output);
  ExecResult run_guarded(GuestCommand command);

  std::shared_ptr<GuestChannel> channel_;
  std::shared_ptr<const GvisorBackendConfig> config_;
  std::string container_id_;
  std::string instance_id_;
  SandboxKey key_;
  std::string kind_;
  std::string work_dir_;
  std::shared_ptr<CommandSlots> slots_;
};

}  // namespace airlock::gvisor_backend
