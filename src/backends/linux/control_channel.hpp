// The host side of the control protocol (protocol.hpp): one connection per request to a
// sandbox's init, from any process that can reach <state>/linux/<id>/control.sock and holds the
// sandbox's control secret (from its record).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "airlock/records.hpp"
#include "airlock/sandbox.hpp"
#include "backends/linux/protocol.hpp"
#include "base/unique_fd.hpp"

namespace airlock::linux_backend {

// Binds and listens on `path` (a unix SEQPACKET socket). Long paths are reached through the
// directory's descriptor (/proc/self/fd/N/…), so the state directory may be deep.
base::UniqueFd listen_control_socket(const std::filesystem::path& path);

struct ExecPlan {
  std::vector<std::string> argv;
  std::vector<std::string> environment;  // complete "NAME=value" list
  std::string working_directory;
  std::chrono::steady_clock::time_point deadline;
  bool serial = false;  // run_code: one program at a time per sandbox
  std::string stdin_bytes;
  bool feed_stdin = false;
  std::optional<std::uint64_t> max_output_bytes;
  OutputOverflow overflow = OutputOverflow::refuse;
  std::uint64_t output_ceiling = 0;  // applies when max_output_bytes is unset
  std::stop_token stop;
  // Streaming: each chunk goes here as it is drained (under the same ceiling) instead of into
  // the result.
  OutputCallback on_output;
  // Live stdin: the caller's descriptor, polled and forwarded until its end of file (then the
  // command's stdin is closed; on a terminal, VEOF is typed instead). Implies feed_stdin.
  int stdin_fd = -1;
  // A pty of this size: the command's stdin, stdout, stderr and controlling terminal.
  std::optional<WindowSize> terminal;
  // With a terminal: an O_PATH descriptor of the guest's root, whose devpts the pty comes from.
  int terminal_root = -1;
  // Signals to the command's process group, resizes of its terminal.
  std::shared_ptr<ExecControl> control;
};

class ControlChannel {
 public:
  ControlChannel(const std::filesystem::path& socket_path, std::string secret);

  // A fresh connection; BackendError when the init is not there (disposed, or dead).
  base::UniqueFd connect() const;
  bool ping() const noexcept;
  // O_PATH descriptors of the sandbox's root directory and of its host-tools directory (on the
  // read-write storage; guests see it read-only at /run/airlock-host-tools).
  struct Roots {
    base::UniqueFd root;
    base::UniqueFd host_tools;
  };
  Roots fetch_roots() const;
  // The init's user and mount namespaces (nsfs descriptors), for the file agent.
  struct Namespaces {
    base::UniqueFd user;
    base::UniqueFd mount;
  };
  Namespaces fetch_namespaces() const;
  // An O_PATH descriptor of the sandbox's storage tmpfs (snapshots read the guest's writes
  // beneath it).
  base::UniqueFd fetch_storage() const;
  // Runs one command, streaming its output into the result under the plan's ceilings. Raises
  // Timeout (deadline or cancellation; says whether the kill was confirmed), QueuedTimeout,
  // ExecOutputLimitExceeded, NotFound/NotADirectory (working directory), BackendError.
  ExecResult exec(const ExecPlan& plan) const;

 private:
  // One request answered by `count` descriptors (the root, the namespaces); `what` names them
  // in the refusal.
  std::vector<base::UniqueFd> request_descriptors(protocol::Op op, std::size_t count,
                                                  const std::string& what) const;

  // Declared (so constructed) before address_, which is computed into it.
  base::UniqueFd directory_;  // held when the path is reached through /proc/self/fd
  std::string address_;       // what connect() dials
  std::string secret_;        // protocol::kSecretBytes bytes, sent with every request
};

}  // namespace airlock::linux_backend
