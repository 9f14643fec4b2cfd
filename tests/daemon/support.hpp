// What the daemon's tests share: a scripted backend whose commands behave like real ones where
// the daemon's guarantees depend on it (they run until their deadline, honour cancellation, can
// flood output or lose their result), an in-process daemon on a temporary socket, an HTTP client
// over that socket, and raw-socket helpers for the attacks no well-behaved client would make.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "airlock/json.hpp"
#include "airlock/router.hpp"
#include "airlock/testing.hpp"
#include "daemon/daemon.hpp"

namespace airlock::daemon::test {

// Polls `condition` until it holds or `within` passes (a liveness bound, not a speed target).
template <typename Condition>
bool eventually(Condition condition,
                std::chrono::milliseconds within = std::chrono::milliseconds(20000)) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return condition();
}

using namespace std::chrono_literals;

// A temporary directory removed with everything in it.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

class ScriptedBackend;

// An in-memory sandbox (files as InProcessSandbox keeps them) whose exec understands:
//   sleep MS      runs MS milliseconds, or until the timeout (Timeout) or cancellation
//                 (Timeout "cancelled"), whichever is first; the kill is confirmed
//   flood BYTES   prints BYTES bytes of 'x' (refused or truncated past max_output_bytes; the
//                 kill of a refused one is confirmed)
//   sleep MS unconfirmed, flood BYTES unconfirmed
//                 the same, but the backend cannot confirm the kill (kill_confirmed unset)
//   chunks A MS B prints "A\n" on stdout, waits MS ms, prints "B\n" on stderr; streamed to
//                 ExecOptions::on_output as printed (any other verb hands over at its end)
//   fail          loses its result: BackendError whose detail names a host path
//   echo ARGS…    prints ARGS joined by spaces, and a newline
//   stdin         prints what it was fed
//   binary        prints bytes that are not UTF-8
//   pwd           prints the working directory it was given
//   exit N        exits with N
// A shell line (sh -c) runs in the in-process sandbox's emulated shell over the same files, so the
// core's shell roads work here too. Reads of "denied" (any directory) fail with EACCES, as an
// unreadable file does.
class ScriptedSandbox : public testing::InProcessSandbox {
 public:
  ScriptedSandbox(ScriptedBackend& backend, std::string instance_id, SandboxKey key,
                  std::string kind);
  ExecResult exec(const Command& command, const ExecOptions& options) override;
  std::string read_file(std::string_view path, std::string_view working_directory,
                        std::uint64_t max_bytes) override;

 private:
  ScriptedBackend& backend_;
};

class ScriptedBackend : public SandboxBackend {
 public:
  explicit ScriptedBackend(std::string name = "scripted");

  std::string name() const override { return name_; }
  Isolation isolation() const override { return Isolation::container; }
  std::optional<EgressSet> egress_modes() const override {
    return EgressSet{Egress::closed, Egress::allowlist};
  }
  std::optional<CapabilitySet> capabilities() const override {
    return CapabilitySet{Capability::exec, Capability::files_in, Capability::files_out,
                         Capability::files_list, Capability::files_delete};
  }

  std::shared_ptr<Sandbox> acquire(const SandboxKey& key, const SandboxSpec& spec) override;
  void dispose(const SandboxKey& key) noexcept override;
  bool dispose_kind(const SandboxKey& key, std::string_view kind,
                    std::optional<std::string_view> instance_id) noexcept override;
  int dispose_scope(std::string_view scope,
                    std::optional<std::string_view> thread_id) noexcept override;
  std::vector<SandboxRecord> list_sandboxes() override;

  // ---- inspection ---------------------------------------------------------------------------
  std::shared_ptr<ScriptedSandbox> live(const SandboxKey& key, const std::string& kind);
  std::size_t live_count() const;
  std::vector<std::string> disposed_instances() const;
  bool was_disposed(const std::string& instance_id) const;
  int acquires() const { return acquires_.load(); }

  // Commands running right now, and how the finished ones ended.
  std::atomic<int> running{0};
  std::atomic<int> cancelled{0};
  std::atomic<int> timed_out{0};
  std::atomic<int> completed{0};
  // Disposals the backend was asked for while a command was running in one of its sandboxes.
  std::atomic<int> disposed_while_running{0};
  // When set, acquire fails with a BackendError (the provider could not create a sandbox).
  std::atomic<bool> fail_acquire{false};

 private:
  std::string name_;
  mutable std::mutex mutex_;
  std::map<std::tuple<SandboxKey, std::string, std::string>, std::shared_ptr<ScriptedSandbox>>
      live_;
  std::vector<std::string> disposed_;
  std::map<std::string, std::map<std::string, std::string>> labels_;  // by instance id
  int next_instance_ = 1;
  std::atomic<int> acquires_{0};
};

struct Reply {
  long status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
  json::Json json() const;
  // The error object of an error reply ({} when there is none).
  json::Json error() const;
};

// HTTP over the daemon's unix socket (or TCP when `base` starts with http://).
class Client {
 public:
  explicit Client(std::string socket_path, std::string tcp_base = {});
  Reply request(const std::string& method, const std::string& target, const std::string& body = {},
                const std::vector<std::string>& headers = {}, long timeout_ms = 30'000) const;
  Reply get(const std::string& target) const { return request("GET", target); }
  Reply post(const std::string& target, const json::Json& body) const {
    return request("POST", target, body.dump(), {"Content-Type: application/json"});
  }
  Reply put(const std::string& target, const std::string& bytes) const {
    return request("PUT", target, bytes, {"Content-Type: application/octet-stream"});
  }
  Reply del(const std::string& target) const { return request("DELETE", target); }

 private:
  std::string socket_path_;
  std::string tcp_base_;
};

// Raw sockets, for the attacks.
int connect_unix(const std::string& path);
int connect_tcp(const std::string& host_port);
void send_all(int fd, std::string_view data);
// Waits until the peer closes (or resets) `fd`; returns what arrived. nullopt when `within`
// passed with the connection still open.
std::optional<std::string> read_until_closed(int fd, std::chrono::milliseconds within);

std::string url_encode(std::string_view text);

// The fds open in this process right now.
std::size_t open_fd_count();

// Processes on this host (any pid namespace below ours) whose command line is exactly `argv`.
std::size_t processes_running(const std::vector<std::string>& argv);

// Processes running an airlock helper binary (a sandbox's init or monitor: "airlock-*") of the
// build tree this test runs from, by the executable they run, wherever they were reparented to.
// Counting only this tree's helpers keeps other builds' sandboxes on the machine out of it.
std::size_t airlock_helper_processes();

// A daemon on a temporary socket over a router of `backend`, with short deadlines.
struct DaemonFixture {
  explicit DaemonFixture(std::shared_ptr<SandboxBackend> backend = nullptr,
                         std::function<void(DaemonOptions&)> adjust = nullptr);
  ~DaemonFixture();

  TempDir dir;
  std::shared_ptr<ScriptedBackend> scripted;  // the backend when it is the scripted one
  std::shared_ptr<SandboxBackend> backend;
  std::unique_ptr<Daemon> daemon;
  std::unique_ptr<Client> client;
  DaemonOptions options;

  // POST /v1/sandboxes; the handle. Fails the test on anything but 200/201.
  std::string acquire(const json::Json& key, const json::Json& spec = default_spec());
  static json::Json default_spec();
  static json::Json key(const std::string& scope, const std::string& thread = "thread-1",
                        const std::string& agent = "agent");
  Reply exec(const std::string& handle, const json::Json& body) const;
};

}  // namespace airlock::daemon::test
