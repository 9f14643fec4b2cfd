// `airlock bench --only egress`: what the egress proxy costs a sandboxed program, measured against
// a direct loopback connection to the same server in the same run.
//
//   connect + 1 round trip   a fresh connection and one 64-byte request/response: direct TCP vs
//                            the sandbox's road (unix socket → CONNECT → proxy dials → relay),
//                            for an IP literal (no lookup) and for `localhost` (getaddrinfo)
//   warm round trip          one 64-byte request/response on an already open connection/tunnel
//   throughput               bytes pushed one way until EOF, acknowledged by the server
//
// The server is on 127.0.0.1, which the proxy refuses by default; the bench opens its listener
// with the test-only knob `allow_nonglobal_for_tests = {127.0.0.0/8}` for that reason alone.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "airlock/egress.hpp"
#include "base/unique_fd.hpp"
#include "bench.hpp"

namespace airlock::bench {
namespace {

constexpr std::size_t kMessage = 64;

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error(what + ": " + std::strerror(errno));
}

void write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      fail("send");
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

void read_exactly(int fd, char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::recv(fd, data, size, 0);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      fail("recv");
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

// A loopback server: `echo` answers each 64-byte message with itself; `sink` reads to EOF and then
// writes one byte, so the sender knows every byte arrived.
class BenchServer {
 public:
  enum class Mode { echo, sink };

  explicit BenchServer(Mode mode) : mode_(mode), listener_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(listener_.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::listen(listener_.get(), 512) != 0) {
      fail("bench server bind/listen");
    }
    socklen_t length = sizeof address;
    ::getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~BenchServer() {
    stopping_ = true;
    ::shutdown(listener_.get(), SHUT_RDWR);
    acceptor_.join();
    std::lock_guard lock(mutex_);
    for (auto& worker : workers_) worker.join();
  }
  std::uint16_t port() const { return port_; }

 private:
  void accept_loop() {
    while (!stopping_) {
      const int fd = ::accept(listener_.get(), nullptr, nullptr);
      if (fd < 0) {
        if (stopping_) return;
        continue;
      }
      const int on = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
      std::lock_guard lock(mutex_);
      workers_.emplace_back([this, fd] { serve(base::UniqueFd(fd)); });
    }
  }
  void serve(base::UniqueFd fd) {
    std::vector<char> buffer(256 * 1024);
    for (;;) {
      const ssize_t n = ::recv(fd.get(), buffer.data(), buffer.size(), 0);
      if (n <= 0) break;
      if (mode_ == Mode::echo) write_all(fd.get(), buffer.data(), static_cast<std::size_t>(n));
    }
    if (mode_ == Mode::sink) write_all(fd.get(), "k", 1);
  }

  Mode mode_;
  base::UniqueFd listener_;
  std::uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::mutex mutex_;
  std::vector<std::thread> workers_;
  std::thread acceptor_;
};

base::UniqueFd connect_tcp(std::uint16_t port) {
  base::UniqueFd fd(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    fail("connect");
  }
  const int on = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  return fd;
}

// The sandbox's road: the unix socket, a CONNECT, the proxy's 200.
base::UniqueFd open_tunnel(const std::string& socket, const std::string& target) {
  base::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, socket.c_str(), sizeof address.sun_path - 1);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    fail("connect " + socket);
  }
  const std::string request = "CONNECT " + target + " HTTP/1.1\r\n\r\n";
  write_all(fd.get(), request.data(), request.size());
  static constexpr std::string_view kEstablished = "HTTP/1.1 200 Connection Established\r\n\r\n";
  char reply[kEstablished.size()];
  read_exactly(fd.get(), reply, sizeof reply);
  if (std::string_view(reply, sizeof reply) != kEstablished) {
    throw std::runtime_error("the proxy refused " + target + ": " +
                             std::string(reply, sizeof reply));
  }
  return fd;
}

void round_trip(int fd) {
  char message[kMessage] = {'p'};
  write_all(fd, message, sizeof message);
  read_exactly(fd, message, sizeof message);
}

// Pushes `bytes` through `fd`, half-closes, waits for the sink's acknowledgement; MB/s.
double push(int fd, std::size_t bytes) {
  static std::vector<char> chunk(1024 * 1024, 'x');
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t sent = 0; sent < bytes; sent += chunk.size()) {
    write_all(fd, chunk.data(), std::min(chunk.size(), bytes - sent));
  }
  ::shutdown(fd, SHUT_WR);
  char ack;
  read_exactly(fd, &ack, 1);
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  return static_cast<double>(bytes) / 1e6 / elapsed.count();
}

void run_egress_bench(BenchRun& run) {
  BenchServer echo(BenchServer::Mode::echo);
  BenchServer sink(BenchServer::Mode::sink);
  char directory[] = "/tmp/airlock-bench-egress-XXXXXX";
  if (::mkdtemp(directory) == nullptr) fail("mkdtemp");
  const std::string socket = std::string(directory) + "/egress.sock";

  EgressPolicy policy;
  policy.allowed_hosts = {"localhost", "127.0.0.1"};
  policy.allowed_ports = {echo.port(), sink.port()};
  policy.allow_nonglobal_for_tests = {"127.0.0.0/8", "::1/128"};  // the servers are on loopback
  EgressProxy proxy;
  EgressListener listener = proxy.listen(socket, policy, "bench");

  const std::string literal = "127.0.0.1:" + std::to_string(echo.port());
  const std::string name = "localhost:" + std::to_string(echo.port());
  const int n = run.iterations(1000);

  const Stats direct = run.time("direct loopback connect + 64 B round trip", n, [&] {
    const base::UniqueFd fd = connect_tcp(echo.port());
    round_trip(fd.get());
  });
  const Stats tunnel_literal =
      run.time("egress tunnel (IP literal) connect + 64 B round trip", n, [&] {
        const base::UniqueFd fd = open_tunnel(socket, literal);
        round_trip(fd.get());
      });
  const Stats tunnel_name =
      run.time("egress tunnel (localhost, resolved) connect + round trip", n, [&] {
        const base::UniqueFd fd = open_tunnel(socket, name);
        round_trip(fd.get());
      });
  run.ratio("egress tunnel connect+RTT / direct connect+RTT (IP literal)", tunnel_literal, direct,
            4.0);
  // No target: the difference from the literal case is the system resolver's, not the proxy's.
  run.ratio("egress tunnel connect+RTT / direct connect+RTT (name lookup)", tunnel_name, direct,
            std::nullopt);
  Stats added;
  added.subject = "egress added setup latency, IP literal (p50 tunnel - p50 direct)";
  added.samples = {tunnel_literal.p50() - direct.p50()};
  run.record(added);

  {
    const base::UniqueFd direct_fd = connect_tcp(echo.port());
    const base::UniqueFd tunnel_fd = open_tunnel(socket, literal);
    const Stats warm_direct =
        run.time("direct warm 64 B round trip", n * 5, [&] { round_trip(direct_fd.get()); });
    const Stats warm_tunnel =
        run.time("egress tunnel warm 64 B round trip", n * 5, [&] { round_trip(tunnel_fd.get()); });
    // A relay hop doubles the wake-ups per round trip (four instead of two): 2x is the floor.
    run.ratio("egress tunnel warm RTT / direct warm RTT", warm_tunnel, warm_direct, 3.0);
  }

  const std::size_t bytes = run.quick() ? 32u << 20 : 256u << 20;
  const int rounds = run.iterations(10);
  Stats direct_rate{
      "direct loopback throughput (" + std::to_string(bytes >> 20) + " MiB)", "MB/s", {}};
  Stats tunnel_rate{
      "egress tunnel throughput (" + std::to_string(bytes >> 20) + " MiB)", "MB/s", {}};
  const std::string sink_target = "127.0.0.1:" + std::to_string(sink.port());
  for (int i = 0; i < rounds; ++i) {
    const base::UniqueFd direct_fd = connect_tcp(sink.port());
    direct_rate.samples.push_back(push(direct_fd.get(), bytes));
    const base::UniqueFd tunnel_fd = open_tunnel(socket, sink_target);
    tunnel_rate.samples.push_back(push(tunnel_fd.get(), bytes));
  }
  const Stats direct_recorded = run.record(direct_rate);
  const Stats tunnel_recorded = run.record(tunnel_rate);
  run.ratio("egress tunnel throughput / direct throughput", tunnel_recorded, direct_recorded, 0.5,
            /*at_most=*/false);

  listener.close();
  std::filesystem::remove_all(directory);
}

const bool kEgressBenchGroup = register_bench_group(
    "egress", "the egress proxy's added latency and throughput vs a direct loopback connection",
    run_egress_bench);

}  // namespace
}  // namespace airlock::bench
