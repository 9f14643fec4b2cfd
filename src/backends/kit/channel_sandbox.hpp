// A Sandbox served by an agent inside the guest over a command channel (guest_exec.hpp): exec
// and run_code run as sessions there, and the file plane runs as the guest helper's
// subcommands (guest/file_commands.hpp), which walk every path without following a link. The
// gvisor and microvm backends differ in how a connection reaches their agent, not in this.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "airlock/sandbox.hpp"
#include "backends/kit/guest_exec.hpp"

namespace airlock::backend_kit {

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

struct ChannelSandboxSettings {
  std::string backend;      // the backend's name, in refusals
  std::string helper_path;  // the file plane's helper, inside the guest
  std::uint64_t output_ceiling_bytes = 0;
  std::uint64_t max_bytes_per_file_in = 0;  // the files_in cap of write_file
  std::uint32_t max_concurrent_commands = 1;
  std::vector<std::string> socket_directories;  // backend_socket_directories()
  std::string no_terminal_reason;               // why exec refuses a terminal
  // Set for every command before the caller's own environment (which wins on a clash).
  std::vector<std::pair<std::string, std::string>> base_environment;
};

class ChannelSandbox : public Sandbox {
 public:
  ChannelSandbox(std::shared_ptr<CommandChannel> channel, ChannelSandboxSettings settings,
                 std::string instance_id, SandboxKey key, std::string kind, std::string work_dir);

  std::string instance_id() const override { return instance_id_; }
  const SandboxKey& key() const override { return key_; }
  const std::string& kind() const override { return kind_; }

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
  std::vector<std::string> backend_socket_directories() const override {
    return settings_.socket_directories;
  }

 protected:
  CommandChannel& channel() const noexcept { return *channel_; }

 private:
  // One helper subcommand (stat, read, …) under the command slots; returns its result whatever
  // its exit code.
  ExecResult helper(std::vector<std::string> arguments, std::string stdin_bytes, bool feed,
                    std::uint64_t max_output);
  ExecResult run_guarded(GuestCommand command);

  std::shared_ptr<CommandChannel> channel_;
  ChannelSandboxSettings settings_;
  std::string instance_id_;
  SandboxKey key_;
  std::string kind_;
  std::string work_dir_;
  std::shared_ptr<CommandSlots> slots_;
};

}  // namespace airlock::backend_kit
