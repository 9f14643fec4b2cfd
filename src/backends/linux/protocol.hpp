// The control protocol between a host process and a sandbox's init, over the unix socket
// `<state>/linux/<id>/control.sock` (SOCK_SEQPACKET: one message per request or reply, file
// descriptors riding along with SCM_RIGHTS). One connection per request.
//
// Every request carries the sandbox's control secret (kSecretBytes random bytes, made when the
// sandbox is created, kept in its record — mode 0600 in a 0700 directory — and in the init's
// memory). The init answers nothing to a request without it: reaching the socket is not enough
// to command a sandbox or take its root.
//
//   ping    → ok(version)
//   root    → ok + 2 fds: O_PATH descriptors of the sandbox's root directory (the file plane) and
//             of its host-tools directory on the read-write storage (where the host creates
//             the sockets guests reach read-only at /run/airlock-host-tools)
//   namespaces → ok + 2 fds: the init's user and mount namespaces (for the file agent, which
//             joins them: the init is not dumpable, so no host process may open them through
//             /proc; only whoever holds the secret is handed them)
//   storage → ok + 1 fd: O_PATH descriptor of the sandbox's storage tmpfs (its root: upper/ or
//             work/, tmp/, …), for snapshots; the guest never sees this directory itself
//   exec    → exited | queued_timeout | spawn_failed | error
//             fds: stdout, stderr, and stdin when kStdinPipe is set (else the guest's /dev/null).
//             While the command runs, the host may send `kill` on the same connection; closing
//             the connection also kills the command (nobody is left to read its output).
//             With kTerminal the three descriptors are one pty slave (the host keeps the
//             master): the command makes it its controlling terminal.
//   signal  → (no answer) sent mid-command on an exec's connection: the init delivers the
//             signal number in the body to the command's process group, when the number is
//             one a caller may forward (airlock::forwardable_signal); anything else is dropped.
//             Queued before the command starts, it is delivered as the command starts.
//
// A request larger than kInlineLimit travels in a sealed memfd passed as the first descriptor
// (flag kBodyInMemfd in the header), because a SEQPACKET message is bounded by the socket buffer.
// Shared by the library and airlock-init; depends on nothing but the C library.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/unique_fd.hpp"

namespace airlock::linux_backend::protocol {

inline constexpr std::uint32_t kVersion = 1;
inline constexpr std::size_t kInlineLimit = 32 * 1024;
inline constexpr std::size_t kMaxRequestBytes = 8u << 20;  // argv + env, like a generous ARG_MAX
inline constexpr std::size_t kMaxFds = 5;
inline constexpr std::size_t kSecretBytes = 32;

enum class Op : std::uint32_t {
  ping = 1,
  root = 2,
  exec = 3,
  kill = 4,
  namespaces = 5,
  signal = 6,
  storage = 7,
};
enum class ReplyKind : std::uint32_t {
  ok = 1,
  error = 2,
  exited = 3,
  queued_timeout = 4,
  spawn_failed = 5,
};

// Header flags.
inline constexpr std::uint32_t kBodyInMemfd = 1u << 0;

// ExecRequest flags.
inline constexpr std::uint32_t kStdinPipe = 1u << 0;
// Serialised with every other serial request on the sandbox (run_code: one program at a time).
inline constexpr std::uint32_t kSerial = 1u << 1;
// The descriptors are a pty slave: the command's controlling terminal (requires kStdinPipe).
inline constexpr std::uint32_t kTerminal = 1u << 2;

struct ExecRequest {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "NAME=value", complete: the init adds nothing
  std::string working_directory;
  std::uint32_t flags = 0;
  // Milliseconds left of the caller's deadline when the request was sent; it covers the time
  // queued for a slot and the time running. ≤ 0 never happens (the host refuses first).
  std::int64_t deadline_ms = 0;
};

// ExitReport flags.
inline constexpr std::uint32_t kTimedOut = 1u << 0;        // the deadline passed while running
inline constexpr std::uint32_t kKilledOnRequest = 1u << 1; // the host sent `kill`
inline constexpr std::uint32_t kKillConfirmed = 1u << 2;   // after a kill: nothing of it is left
inline constexpr std::uint32_t kKillChecked = 1u << 3;     // a kill was attempted and checked

struct ExitReport {
  std::int32_t wait_status = 0;  // as from waitpid
  std::uint32_t flags = 0;
};

// Where a command failed before it could run.
enum class SpawnStage : std::uint32_t {
  fork = 1,
  cgroup = 2,
  setup = 3,
  working_directory = 4,
  execute = 5,
  request = 6,
};

struct SpawnFailure {
  SpawnStage stage = SpawnStage::setup;
  std::int32_t error_number = 0;
};

struct Reply {
  ReplyKind kind = ReplyKind::error;
  std::uint32_t version = 0;  // ok (ping)
  ExitReport exit;            // exited
  SpawnFailure failure;       // spawn_failed
  std::string message;        // error
};

// `secret` must be kSecretBytes long.
std::string encode_header(Op op, std::uint32_t header_flags, std::string_view secret);
std::string encode_exec(const ExecRequest& request);
bool decode_exec(const std::string& body, ExecRequest& request);
std::string encode_signal(int number);
bool decode_signal(const std::string& body, int& number);
std::string encode_reply(const Reply& reply);
bool decode_reply(const std::string& bytes, Reply& reply);
// A request is a header (op, flags, secret) followed by its body; returns false when malformed.
bool split_request(const std::string& bytes, Op& op, std::uint32_t& header_flags,
                   std::string& secret, std::string& body);
// Constant-time comparison of two secrets (false unless both are kSecretBytes long).
bool same_secret(std::string_view a, std::string_view b) noexcept;

// sendmsg with SCM_RIGHTS and MSG_NOSIGNAL. Returns 0 or an errno.
int send_message(int socket, const std::string& bytes, const int* fds, std::size_t fd_count);
// recvmsg of one message (descriptors received with O_CLOEXEC). Returns the byte count, 0 at
// end of stream, or -errno; EMSGSIZE when the message or its descriptors were truncated.
long receive_message(int socket, std::string& bytes, std::vector<base::UniqueFd>& fds,
                     std::size_t max_bytes = kInlineLimit + 64);

}  // namespace airlock::linux_backend::protocol
