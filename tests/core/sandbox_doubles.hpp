// Test doubles: a sandbox that forwards to another and lets a test replace any one method, so
// a test can make a backend lie, time out or race at exactly the point it attacks.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "airlock/sandbox.hpp"

namespace airlock::test {

class ForwardingSandbox : public Sandbox {
 public:
  explicit ForwardingSandbox(std::shared_ptr<Sandbox> inner) : inner_(std::move(inner)) {}

  std::function<std::optional<SandboxEntry>(std::string_view, std::string_view)> on_stat;
  std::function<std::string(std::string_view, std::string_view, std::uint64_t)> on_read;
  std::function<ExecResult(const Command&, const ExecOptions&)> on_exec;
  std::function<void(std::string_view, std::string_view, std::string_view)> on_write;
  std::atomic<int> stats{0};
  std::atomic<int> reads{0};
  std::atomic<int> execs{0};

  Sandbox& inner() { return *inner_; }

  std::string instance_id() const override { return inner_->instance_id(); }
  const SandboxKey& key() const override { return inner_->key(); }
  const std::string& kind() const override { return inner_->kind(); }
  void write_file(std::string_view path, std::string_view content,
                  std::string_view working_directory) override {
    if (on_write) return on_write(path, content, working_directory);
    inner_->write_file(path, content, working_directory);
  }
  ExecResult exec(const Command& command, const ExecOptions& options) override {
    ++execs;
    if (on_exec) return on_exec(command, options);
    return inner_->exec(command, options);
  }
  ExecResult run_code(std::string_view code, Milliseconds timeout) override {
    return inner_->run_code(code, timeout);
  }
  std::optional<SandboxEntry> stat_file(std::string_view path,
                                        std::string_view working_directory) override {
    ++stats;
    if (on_stat) return on_stat(path, working_directory);
    return inner_->stat_file(path, working_directory);
  }
  std::string read_file(std::string_view path, std::string_view working_directory,
                        std::uint64_t max_bytes) override {
    ++reads;
    if (on_read) return on_read(path, working_directory, max_bytes);
    return inner_->read_file(path, working_directory, max_bytes);
  }
  std::vector<SandboxEntry> list_dir(std::string_view path,
                                     std::string_view working_directory) override {
    return inner_->list_dir(path, working_directory);
  }
  void remove(std::string_view path, std::string_view working_directory, bool recursive) override {
    inner_->remove(path, working_directory, recursive);
  }

 private:
  std::shared_ptr<Sandbox> inner_;
};

}  // namespace airlock::test
