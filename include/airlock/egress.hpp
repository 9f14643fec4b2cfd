// airlock's egress allowlist: a CONNECT proxy that is the only way out of an `allowlist` sandbox.
//
// A sandbox under `Egress::allowlist` has a network namespace with no route out. Its one road is
// a unix socket (or, for a container engine, a TCP port on an internal network) served by an
// `EgressProxy` on the host side. For every connection the proxy:
//
//   1. reads the request head within `header_timeout` and `max_header_bytes`      → 408 / 431
//   2. parses it strictly: `CONNECT host:port HTTP/1.x`, a well-formed header block  → 400
//      (any other method                                                             → 405)
//   3. matches the host against `allowed_hosts` (wildcards below)                     → 403
//   4. checks the port against `allowed_ports` (default {443})                        → 403
//   5. resolves the name itself — never trusting the guest's resolver — off the event
//      loop; an IP literal skips resolution and is judged the same way               → 502 / 504
//   6. refuses the request if ANY resolved address is not globally reachable
//      (loopback, RFC 1918, CGNAT, link-local incl. 169.254.169.254, ULA, multicast,
//      documentation and reserved ranges, and the IPv4-mapped / NAT64 / 6to4 forms
//      that embed one of those)                                                      → 403
//   7. dials the checked addresses in order within `dial_timeout`                     → 502 / 504
//   8. answers `HTTP/1.1 200 Connection Established` and relays bytes both ways
//      (half-close relayed) until both sides are done or the tunnel idles past
//      `idle_timeout`.
//
// Every accepted connection produces exactly one `EgressDecision`: logged through spdlog (allow at
// info, deny and error at warn) and handed to `EgressProxy::Options::on_decision` when set.
//
// Host patterns (the seeds' semantics: case-insensitive shell-style wildcards):
//   `*` matches any run of characters INCLUDING dots: `*.x.com` matches `a.x.com` and
//   `a.b.x.com`, but NOT `x.com` itself — list `x.com` as well to allow the apex. `?` matches
//   one character; `[abc]`, `[a-z]` and `[!abc]` match one character of (or not of) a set.
//   The host compared is the CONNECT target, lowercased, without a trailing dot, and for an
//   IPv6 literal without its brackets. A pattern never widens the address rule: `*` allows
//   every name, and still no name that resolves to a non-global address.
//
// Why refuse a name when any one of its addresses is non-global (instead of skipping those and
// dialling the rest): a name that mixes public and internal addresses is either misconfigured or
// a rebinding attempt, and refusing makes the outcome independent of record order.
//
// Threads: one event-loop thread per `EgressProxy` serves all of its listeners; name resolution
// runs on a small pool of resolver threads. `listen*`, `EgressListener::close` and the
// destructor are safe from any thread. Hazard: `on_decision` runs on the event-loop thread — it
// must be quick and must not destroy the proxy; it may open or close listeners.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace airlock {

class SandboxSpec;

// What one listener allows. Validated when a listener opens (InvalidArgument naming the field).
struct EgressPolicy {
  // Host patterns (see the header comment). Empty means every CONNECT is refused.
  std::vector<std::string> allowed_hosts;
  // Destination ports a tunnel may reach; 1..65535.
  std::vector<std::uint16_t> allowed_ports = {443};

  // WEAKENS THE BOUNDARY — for tests only. CIDR ranges ("127.0.0.0/8", "fd00::/8") whose
  // addresses are let through although they are not globally reachable. It exists so that tests
  // can reach servers they start on loopback; a production policy leaves it empty. The name is
  // meant to be found by `grep allow_nonglobal_for_tests`.
  std::vector<std::string> allow_nonglobal_for_tests;

  // The request head (request line, headers, blank line) may be at most this long.
  std::size_t max_header_bytes = 8 * 1024;
  // The whole head must arrive within this long after accept, however it is dribbled.
  std::chrono::milliseconds header_timeout{10'000};
  // Name resolution plus every connection attempt must finish within this long.
  std::chrono::milliseconds dial_timeout{20'000};
  // A tunnel that moves no byte in either direction for this long is closed.
  std::chrono::milliseconds idle_timeout{300'000};
  // Connections open at once on one listener (any phase); the next one gets a 503.
  std::size_t max_connections = 256;

  // The policy a spec asks for: its `egress_allow` as the host patterns, every other field at
  // its default. Refuses (InvalidArgument) a spec whose egress is not `allowlist`.
  static EgressPolicy for_spec(const SandboxSpec& spec);
};

enum class EgressVerdict : std::uint8_t {
  allow,  // the tunnel was established
  deny,   // the request was refused by policy or by a bound (size, time, capacity)
  error,  // the request was allowed but could not be served (resolution, dial, shutdown)
};

enum class EgressReason : std::uint8_t {
  allowed,             // 200
  malformed_request,   // 400
  method_not_allowed,  // 405
  header_timeout,      // 408
  header_too_large,    // 431
  host_not_allowed,    // 403
  port_not_allowed,    // 403
  nonglobal_address,   // 403
  over_capacity,       // 503
  resolution_failed,   // 502
  resolution_timeout,  // 504
  dial_failed,         // 502
  dial_timeout,        // 504
  client_closed,       // the client left before a complete request; nothing answered
  listener_closed,     // the listener or the proxy closed before a decision; nothing answered
};

std::string_view to_string(EgressVerdict verdict) noexcept;
std::string_view to_string(EgressReason reason) noexcept;

// One connection's outcome. `host`/`port` are empty/0 when the request never named them;
// `address` is the dialled address for `allow`, the offending one for `nonglobal_address`, the
// last one tried for dial failures, and empty otherwise.
struct EgressDecision {
  EgressVerdict verdict = EgressVerdict::deny;
  EgressReason reason = EgressReason::malformed_request;
  int http_status = 0;  // the status answered, 0 when nothing was answered
  std::string sandbox_id;
  std::string host;
  std::uint16_t port = 0;
  std::string address;
  std::string detail;  // what exactly was wrong, for logs; never shown to the guest verbatim
};

using EgressDecisionCallback = std::function<void(const EgressDecision&)>;

// Where a unix-socket listener's file is made and who may connect to it.
struct UnixSocketOptions {
  unsigned mode = 0600;
  std::optional<unsigned> owner_uid;  // chown the socket after bind when set
  std::optional<unsigned> owner_gid;
};

class EgressProxy;

// An open listener. Closing it (or destroying it) stops accepting, ends every connection and
// tunnel it accepted, and unlinks its socket file — unless the path has since been taken by a
// different socket (another process re-listening after an adopt). Move-only. Safe to outlive
// its proxy: closing then does nothing (the proxy closed everything when it stopped).
class EgressListener {
 public:
  EgressListener() = default;
  EgressListener(EgressListener&& other) noexcept;
  EgressListener& operator=(EgressListener&& other) noexcept;
  EgressListener(const EgressListener&) = delete;
  EgressListener& operator=(const EgressListener&) = delete;
  ~EgressListener();

  void close() noexcept;
  bool is_open() const noexcept { return id_ != 0; }
  // "unix:/run/x/egress.sock" or "127.0.0.1:3128" / "[::1]:3128".
  const std::string& endpoint() const noexcept { return endpoint_; }
  // The bound TCP port (useful after asking for port 0); 0 for a unix socket.
  std::uint16_t port() const noexcept { return port_; }
  // Connections this listener holds open right now (any phase).
  std::size_t open_connections() const;

 private:
  friend class EgressProxy;
  struct Shared;
  EgressListener(std::weak_ptr<Shared> proxy, std::uint64_t id, std::string endpoint,
                 std::uint16_t port);

  std::weak_ptr<Shared> proxy_;
  std::uint64_t id_ = 0;
  std::string endpoint_;
  std::uint16_t port_ = 0;
};

class EgressProxy {
 public:
  // Resolves a host name to IP address literals; throws (any std::exception) for a failure.
  using Resolver = std::function<std::vector<std::string>(const std::string& host)>;

  struct Options {
    EgressDecisionCallback on_decision;
    // Threads running blocking name resolution; at least 1.
    std::size_t resolver_threads = 2;
    // TEST ONLY: replaces the system resolver (getaddrinfo) so that tests can make a name
    // resolve to any address without touching /etc/hosts. Its answers are judged exactly like
    // the system resolver's. Leave empty in production.
    Resolver resolver_override_for_tests;
  };

  EgressProxy();
  explicit EgressProxy(Options options);
  // Closes every listener and connection, then joins the event loop and the resolver threads.
  // A lookup already inside getaddrinfo is waited for (bounded by the system resolver's own
  // timeouts); queued lookups are dropped.
  ~EgressProxy();
  EgressProxy(const EgressProxy&) = delete;
  EgressProxy& operator=(const EgressProxy&) = delete;

  // Listens on a unix socket at `path`. A stale socket at the path is replaced; any other kind
  // of file there is refused (InvalidArgument). Syscall failures raise SystemError (errno, path).
  [[nodiscard]] EgressListener listen(const std::filesystem::path& path, EgressPolicy policy,
                                      std::string sandbox_id, UnixSocketOptions options = {});
  // Listens on TCP at an IP literal (`0.0.0.0`, `127.0.0.1`, `::`) and port (0 = ephemeral).
  [[nodiscard]] EgressListener listen_tcp(const std::string& address, std::uint16_t port,
                                          EgressPolicy policy, std::string sandbox_id);

  // Connections open across all listeners (any phase).
  std::size_t open_connections() const;

 private:
  std::shared_ptr<EgressListener::Shared> shared_;
};

}  // namespace airlock
