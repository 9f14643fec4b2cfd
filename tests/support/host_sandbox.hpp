// A test double that runs real processes on the host: guest paths *are* host paths (tests pick
// paths under a temporary directory). No isolation at all — it exists so that transports that
// need a real interpreter (host tools over exec, over a socket) can be tested without a backend.
// exec streams to `on_output`, forwards `stdin_fd` live, and sends `control`'s signals to the
// command's process group; it gives no terminal (NotSupported).
#pragma once

#include <string>

#include "airlock/sandbox.hpp"

namespace airlock::test_support {

class HostSandbox : public Sandbox {
 public:
  // `socket_directory` non-empty: offer it as the socket channel (host and guest paths agree).
  explicit HostSandbox(std::string socket_directory = {});

  std::string instance_id() const override { return "host-test-double"; }
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
  std::optional<SocketChannel> socket_channel() override;

  int execs() const { return execs_; }

 private:
  SandboxKey key_{"test", "test", "test"};
  std::string kind_ = "host-test-double";
  std::string socket_directory_;
  int execs_ = 0;
};

// A fresh directory under /tmp, removed (recursively) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace airlock::test_support
