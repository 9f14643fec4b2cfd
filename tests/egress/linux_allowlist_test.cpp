// The allowlist on the linux backend, attacked from inside a sandbox. The sandbox's network
// namespace has only its own loopback; its one road out is the init's bridge (127.0.0.1:3128) to
// the backend's egress proxy. The servers these tests start listen on the HOST's loopback
// (127.0.0.2 / 127.0.0.3) or on every host interface: from inside, the only way to them is the
// proxy, and the proxy only lets loopback through because these backends set the test-only
// `allow_nonglobal_for_tests` knob to 127.0.0.0/8 — except where a test proves that, without the
// knob, a private address is refused.
//
// Every refusal is proven twice: the guest's client fails, and the server it aimed at never
// accepted a connection (or received a datagram). A positive control beside each one shows the
// same client succeeding through the proxy, so a failure is the boundary's doing, not a broken
// client.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "airlock/conformance.hpp"
#include "airlock/errors.hpp"
#include "airlock/json.hpp"
#include "egress/loopback.hpp"
#include "egress/proxy_fixture.hpp"
#include "linux/fixture.hpp"

namespace airlock::linux_backend::testing {
namespace {

using egress::testing::DecisionLog;
using egress::testing::LoopbackServer;

constexpr const char* kAllowedHost = "127.0.0.2";
constexpr const char* kDeniedHost = "127.0.0.3";

// The first IPv4 address of a non-loopback host interface, or "" when there is none.
std::string host_interface_address() {
  struct ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return {};
  std::string found;
  for (auto* entry = list; entry != nullptr && found.empty(); entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET) continue;
    const auto* address = reinterpret_cast<const sockaddr_in*>(entry->ifa_addr);
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &address->sin_addr, text, sizeof text);
    if (std::string(text).rfind("127.", 0) != 0) found = text;
  }
  ::freeifaddrs(list);
  return found;
}

// A UDP socket on every host interface that counts the datagrams it receives.
class UdpSink {
 public:
  UdpSink() : fd_(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_ANY);
    if (!fd_ || ::bind(fd_.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      throw std::runtime_error("udp sink: bind failed");
    }
    socklen_t length = sizeof address;
    ::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
  }
  std::uint16_t port() const { return port_; }
  // Datagrams that arrived within `wait`.
  int received(std::chrono::milliseconds wait) {
    int count = 0;
    struct pollfd ready {
      fd_.get(), POLLIN, 0
    };
    while (::poll(&ready, 1, static_cast<int>(wait.count())) > 0) {
      char buffer[2048];
      while (::recv(fd_.get(), buffer, sizeof buffer, 0) > 0) ++count;
      wait = std::chrono::milliseconds(0);
    }
    return count;
  }

 private:
  base::UniqueFd fd_;
  std::uint16_t port_ = 0;
};

class EgressAllowlistTest : public LinuxBackendTest {
 protected:
  void TearDown() override {
    egress_backend_.reset();
    LinuxBackendTest::TearDown();
  }

  // A backend whose allowlisted sandboxes may reach `ports`; with `loopback_knob`, the proxy lets
  // 127.0.0.0/8 through (the test-only weakening); without it, production's address rule holds.
  SandboxBackend& egress_backend(
      std::vector<std::uint16_t> ports, bool loopback_knob = true,
      std::chrono::milliseconds header_timeout = std::chrono::seconds(10)) {
    egress_backend_ = make_backend([&](LinuxBackendConfig& config) {
      config.egress_policy.allowed_ports = ports;
      if (loopback_knob) config.egress_policy.allow_nonglobal_for_tests = {"127.0.0.0/8"};
      config.egress_policy.header_timeout = header_timeout;
      config.egress_decisions = decisions_.callback();
    });
    return *egress_backend_;
  }

  std::shared_ptr<LinuxSandbox> allowlisted(SandboxBackend& backend,
                                            std::vector<std::string> hosts = {kAllowedHost},
                                            std::optional<SandboxKey> key = std::nullopt) {
    return acquire(spec("egress",
                        [&](SandboxSpec::Fields& fields) {
                          fields.egress = Egress::allowlist;
                          fields.egress_allow = hosts;
                        }),
                   key, &backend);
  }

  // Runs a python program in the guest (written to a file: no shell quoting to get wrong).
  static ExecResult python(Sandbox& sandbox, const std::string& program) {
    sandbox.write_file("probe.py", program, kWork);
    return sh(sandbox, "python3 probe.py", std::chrono::seconds(40));
  }

  // curl through the proxy, tunnelling (the proxy speaks CONNECT only, as the reference's does;
  // --proxytunnel makes curl CONNECT for an http:// URL just as it does for https://). Returns
  // "<the proxy's answer to CONNECT>/<the server's HTTP status>", "000" where nothing answered:
  // "200/200" reached the server, "403/000" was refused by the proxy.
  static std::string curl_status(Sandbox& sandbox, const std::string& host, std::uint16_t port,
                                 const std::string& extra = "--proxytunnel") {
    const ExecResult result =
        sh(sandbox, "curl -s -o /dev/null -w '%{http_connect}/%{http_code}' --max-time 10 " +
                        extra + " http://" + host + ":" + std::to_string(port) + "/");
    return result.stdout_text();
  }

  // The status line of the proxy's answer to the bytes `head_expression` (a python expression)
  // sent over the bridge, or CLOSED / TIMEOUT.
  static std::string proxy_answer(Sandbox& sandbox, const std::string& head_expression) {
    const ExecResult result =
        python(sandbox,
               "import socket\n"
               "s = socket.create_connection(('127.0.0.1', 3128), timeout=20)\n"
               "try:\n"
               "    s.sendall(" +
                   head_expression +
                   ")\n"
                   "    data = b''\n"
                   "    while b'\\r\\n' not in data:\n"
                   "        chunk = s.recv(4096)\n"
                   "        if not chunk:\n"
                   "            break\n"
                   "        data += chunk\n"
                   "    print(data.split(b'\\r\\n')[0].decode() or 'CLOSED')\n"
                   "except (ConnectionResetError, BrokenPipeError) as e:\n"
                   "    print('CLOSED', type(e).__name__)\n"
                   "except socket.timeout:\n"
                   "    print('TIMEOUT')\n");
    return result.stdout_text() + result.stderr_text();
  }

  DecisionLog decisions_;
  std::shared_ptr<SandboxBackend> egress_backend_;
};

// Config mistakes are refused when the config is read, naming the key — not at the first acquire.
TEST(EgressAllowlistConfig, BadPortsAndRangesAreRefusedNamingTheKey) {
  const auto refusal = [](const char* text) -> std::string {
    try {
      (void)parse_linux_backend_config(json::parse_text(text, "test"), "linux");
    } catch (const InvalidArgument& error) {
      return error.what();
    }
    return "accepted";
  };
  EXPECT_NE(refusal(R"({"egress_ports": [0]})").find("linux.egress_ports"), std::string::npos);
  EXPECT_NE(refusal(R"({"egress_ports": [70000]})").find("linux.egress_ports"), std::string::npos);
  EXPECT_NE(refusal(R"({"egress_ports": 443})").find("linux.egress_ports"), std::string::npos);
  EXPECT_NE(refusal(R"({"egress_ports": []})").find("allowed_ports"), std::string::npos);
  EXPECT_NE(refusal(R"({"egress_allow_nonglobal_for_tests": ["not-a-range"]})")
                .find("allow_nonglobal_for_tests"),
            std::string::npos);
  const LinuxBackendConfig parsed = parse_linux_backend_config(
      json::parse_text(
          R"({"egress_ports": [443, 8443], "egress_allow_nonglobal_for_tests": ["127.0.0.0/8"]})",
          "test"),
      "linux");
  EXPECT_EQ(parsed.egress_policy.allowed_ports, (std::vector<std::uint16_t>{443, 8443}));
  EXPECT_EQ(parsed.egress_policy.allow_nonglobal_for_tests,
            std::vector<std::string>{"127.0.0.0/8"});
  EXPECT_TRUE(LinuxBackendConfig{}.egress_policy.allow_nonglobal_for_tests.empty())
      << "the test knob must be off unless configured";
  EXPECT_EQ(LinuxBackendConfig{}.egress_policy.allowed_ports, std::vector<std::uint16_t>{443});
}

TEST_F(EgressAllowlistTest, TheBackendDeclaresAllowlist) {
  ASSERT_TRUE(backend_->egress_modes());
  EXPECT_TRUE(backend_->egress_modes()->contains(Egress::allowlist));
  EXPECT_TRUE(backend_->egress_modes()->contains(Egress::closed));
}

TEST_F(EgressAllowlistTest, AnAllowedHostIsReachedThroughTheProxy) {
  LoopbackServer server(LoopbackServer::Mode::http, kAllowedHost);
  auto sandbox = allowlisted(egress_backend({server.port()}));
  const ExecResult fetched =
      sh(*sandbox, "curl -s --max-time 10 --proxytunnel http://" + std::string(kAllowedHost) + ":" +
                       std::to_string(server.port()) + "/");
  EXPECT_EQ(fetched.exit_code, 0) << fetched.stderr_text();
  EXPECT_NE(fetched.stdout_text().find(LoopbackServer::kHttpBody), std::string::npos)
      << fetched.stdout_text();
  EXPECT_EQ(server.accepted(), 1);
  const EgressDecision decision = decisions_.last(1);
  EXPECT_EQ(decision.verdict, EgressVerdict::allow);
  EXPECT_EQ(decision.host, kAllowedHost);
  EXPECT_EQ(decision.sandbox_id, sandbox->record().instance_id);
}

TEST_F(EgressAllowlistTest, CurlWithNoProxyCannotReachAnAllowedHost) {
  LoopbackServer server(LoopbackServer::Mode::http, kAllowedHost);
  auto sandbox = allowlisted(egress_backend({server.port()}));
  EXPECT_EQ(curl_status(*sandbox, kAllowedHost, server.port(), "--noproxy '*'"), "000/000");
  EXPECT_EQ(server.accepted(), 0) << "a connection bypassing the proxy reached the host";
  // Positive control: the same host through the proxy.
  EXPECT_EQ(curl_status(*sandbox, kAllowedHost, server.port()), "200/200");
  EXPECT_EQ(server.accepted(), 1);
}

TEST_F(EgressAllowlistTest, ARawTcpConnectToAHostAddressFails) {
  const std::string host_ip = host_interface_address();
  if (host_ip.empty()) GTEST_SKIP() << "SKIPPED: this host has no non-loopback IPv4 interface";
  LoopbackServer server(LoopbackServer::Mode::http, "0.0.0.0");
  // Positive control on the host: the server accepts there.
  ASSERT_TRUE(egress::testing::connect_tcp(server.port()));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (server.accepted() < 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const int before = server.accepted();
  ASSERT_EQ(before, 1);
  auto sandbox = allowlisted(egress_backend({server.port()}, true));
  const ExecResult attack = python(*sandbox,
                                   "import socket\n"
                                   "for target in [('" +
                                       host_ip + "', " + std::to_string(server.port()) +
                                       "),\n"
                                       "               ('1.1.1.1', 443), ('10.255.255.53', 53)]:\n"
                                       "    try:\n"
                                       "        socket.create_connection(target, timeout=3)\n"
                                       "        print('CONNECTED', target)\n"
                                       "    except OSError as e:\n"
                                       "        print('FAILED', target, e.errno)\n");
  EXPECT_EQ(attack.stdout_text().find("CONNECTED"), std::string::npos) << attack.stdout_text();
  EXPECT_NE(attack.stdout_text().find("FAILED"), std::string::npos)
      << attack.stdout_text() << attack.stderr_text();
  EXPECT_EQ(server.accepted(), before) << "a raw connect from inside reached the host";
}

TEST_F(EgressAllowlistTest, AUdpDnsQueryNeverLeavesTheSandbox) {
  const std::string host_ip = host_interface_address();
  UdpSink sink;
  auto sandbox = allowlisted(egress_backend({443}));
  // A well-formed DNS query for example.org, sent to the host's resolver, a public resolver, and
  // a UDP socket of this test on every host interface (the one place a leak would be seen).
  std::string targets =
      "[('8.8.8.8', 53), ('10.255.255.53', 53), ('127.0.0.1', " + std::to_string(sink.port()) + ")";
  if (!host_ip.empty()) targets += ", ('" + host_ip + "', " + std::to_string(sink.port()) + ")";
  targets += "]";
  const ExecResult attack =
      python(*sandbox,
             "import socket\n"
             "query = bytes.fromhex('abcd01000001000000000000076578616d706c65036f72670000010001')\n"
             "for target in " +
                 targets +
                 ":\n"
                 "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                 "    s.settimeout(2)\n"
                 "    try:\n"
                 "        s.sendto(query, target)\n"
                 "        s.recvfrom(512)\n"
                 "        print('ANSWERED', target)\n"
                 "    except OSError as e:\n"
                 "        print('FAILED', target, e)\n"
                 "try:\n"
                 "    socket.getaddrinfo('example.org', 443)\n"
                 "    print('RESOLVED')\n"
                 "except OSError as e:\n"
                 "    print('UNRESOLVED', e)\n");
  EXPECT_EQ(attack.stdout_text().find("ANSWERED"), std::string::npos) << attack.stdout_text();
  EXPECT_EQ(attack.stdout_text().find("RESOLVED\n"), std::string::npos) << attack.stdout_text();
  EXPECT_NE(attack.stdout_text().find("UNRESOLVED"), std::string::npos)
      << attack.stdout_text() << attack.stderr_text();
  EXPECT_EQ(sink.received(std::chrono::milliseconds(500)), 0)
      << "a datagram from inside reached the host";
}

TEST_F(EgressAllowlistTest, AnAllowedHostOnARefusedPortIsRefused) {
  LoopbackServer allowed_port(LoopbackServer::Mode::http, kAllowedHost);
  LoopbackServer refused_port(LoopbackServer::Mode::http, kAllowedHost);
  auto sandbox = allowlisted(egress_backend({allowed_port.port()}));
  EXPECT_EQ(curl_status(*sandbox, kAllowedHost, refused_port.port()), "403/000");
  EXPECT_EQ(refused_port.accepted(), 0);
  EXPECT_EQ(decisions_.last(1).reason, EgressReason::port_not_allowed);
  EXPECT_EQ(curl_status(*sandbox, kAllowedHost, allowed_port.port()), "200/200");  // control
}

TEST_F(EgressAllowlistTest, ADeniedHostIsRefusedByTheProxy) {
  LoopbackServer denied(LoopbackServer::Mode::http, kDeniedHost);
  LoopbackServer allowed(LoopbackServer::Mode::http, kAllowedHost);
  auto sandbox = allowlisted(egress_backend({denied.port(), allowed.port()}));
  EXPECT_EQ(curl_status(*sandbox, kDeniedHost, denied.port()), "403/000");
  EXPECT_EQ(denied.accepted(), 0);
  EXPECT_EQ(decisions_.last(1).reason, EgressReason::host_not_allowed);
  EXPECT_EQ(curl_status(*sandbox, kAllowedHost, allowed.port()), "200/200");  // control
}

TEST_F(EgressAllowlistTest, APrivateAddressIsRefusedWithoutTheTestKnob) {
  LoopbackServer server(LoopbackServer::Mode::http, kAllowedHost);
  // The allowlist names the host and `localhost` (a name that resolves to loopback), and even
  // allows every name: without the knob, the address rule refuses all of them.
  auto sandbox = allowlisted(egress_backend({server.port(), 443}, /*loopback_knob=*/false),
                             {kAllowedHost, "localhost", "*"});
  EXPECT_EQ(curl_status(*sandbox, kAllowedHost, server.port()), "403/000");
  EXPECT_EQ(curl_status(*sandbox, "localhost", server.port(), "--proxytunnel --noproxy ''"),
            "403/000");
  EXPECT_EQ(curl_status(*sandbox, "169.254.169.254", 443), "403/000");
  EXPECT_EQ(server.accepted(), 0);
  const auto all = decisions_.wait_for(3);
  ASSERT_EQ(all.size(), 3u);
  for (const auto& decision : all) {
    EXPECT_EQ(decision.reason, EgressReason::nonglobal_address) << decision.host;
  }
}

TEST_F(EgressAllowlistTest, AnOversizedConnectHeadIsRefusedAndTheProxyServesTheNext) {
  LoopbackServer server(LoopbackServer::Mode::http, kAllowedHost);
  auto sandbox = allowlisted(egress_backend({server.port()}));
  const std::string target = std::string(kAllowedHost) + ":" + std::to_string(server.port());
  const std::string answer = proxy_answer(
      *sandbox, "b'CONNECT " + target + " HTTP/1.1\\r\\nX-Pad: ' + b'a' * 65536 + b'\\r\\n\\r\\n'");
  EXPECT_TRUE(answer.find(" 431 ") != std::string::npos || answer.rfind("CLOSED", 0) == 0)
      << answer;
  EXPECT_EQ(answer.find(" 200 "), std::string::npos) << answer;
  EXPECT_EQ(decisions_.last(1).reason, EgressReason::header_too_large);
  EXPECT_EQ(server.accepted(), 0);
  EXPECT_EQ(curl_status(*sandbox, kAllowedHost, server.port()), "200/200");
  EXPECT_EQ(server.accepted(), 1);
}

TEST_F(EgressAllowlistTest, ASlowConnectHeadIsCutOffAndTheProxyServesTheNext) {
  LoopbackServer server(LoopbackServer::Mode::http, kAllowedHost);
  auto sandbox = allowlisted(egress_backend({server.port()}, true, std::chrono::seconds(1)));
  const std::string target = std::string(kAllowedHost) + ":" + std::to_string(server.port());
  // The request line, and then nothing: the head never ends.
  const std::string answer = proxy_answer(*sandbox, "b'CONNECT " + target + " HTTP/1.1\\r\\n'");
  EXPECT_NE(answer.find(" 408 "), std::string::npos) << answer;
  EXPECT_EQ(decisions_.last(1).reason, EgressReason::header_timeout);
  EXPECT_EQ(server.accepted(), 0);
  EXPECT_EQ(curl_status(*sandbox, kAllowedHost, server.port()), "200/200");
}

TEST_F(EgressAllowlistTest, AnotherProcessAdoptingTheSandboxServesItsEgress) {
  LoopbackServer server(LoopbackServer::Mode::http, kAllowedHost);
  auto first = make_backend([&](LinuxBackendConfig& config) {
    config.egress_policy.allowed_ports = {server.port()};
    config.egress_policy.allow_nonglobal_for_tests = {"127.0.0.0/8"};
  });
  auto sandbox = allowlisted(*first);
  EXPECT_EQ(curl_status(*sandbox, kAllowedHost, server.port()), "200/200");
  // A second backend on the same state directory (as another process would be) adopts the live
  // sandbox and re-binds its socket; the first backend going away must not take that socket.
  auto adopted = allowlisted(egress_backend({server.port()}), {kAllowedHost}, key_);
  EXPECT_EQ(adopted->record().instance_id, sandbox->record().instance_id);
  sandbox.reset();
  first.reset();
  EXPECT_EQ(curl_status(*adopted, kAllowedHost, server.port()), "200/200");
  EXPECT_EQ(decisions_.last(1).verdict, EgressVerdict::allow) << "the adopter did not serve it";
  EXPECT_EQ(server.accepted(), 2);
}

TEST_F(EgressAllowlistTest, DisposingTheSandboxClosesItsProxySocket) {
  auto& backend = egress_backend({443});
  auto sandbox = allowlisted(backend);
  const auto socket = state_->path() / "linux" / sandbox->record().id / "egress" / "egress.sock";
  ASSERT_TRUE(std::filesystem::exists(socket));
  backend.dispose(key_);
  EXPECT_FALSE(std::filesystem::exists(socket));
  EXPECT_FALSE(sandbox->is_live());
}

TEST_F(EgressAllowlistTest, EgressConformanceSuitePasses) {
  LoopbackServer allowed(LoopbackServer::Mode::http, kAllowedHost);
  LoopbackServer denied(LoopbackServer::Mode::http, kDeniedHost);
  auto sandbox = allowlisted(egress_backend({allowed.port(), denied.port()}));
  // The suite runs plain curl on http:// URLs; the proxy speaks CONNECT only (like the
  // reference's), so the guest's curl is told to tunnel, as it would for https://.
  ASSERT_EQ(sh(*sandbox, "echo proxytunnel > \"$HOME/.curlrc\"").exit_code, 0);
  conformance::PosixGuestSubject subject(*sandbox, kWork, *egress_backend_->capabilities(),
                                         std::chrono::seconds(30));
  const std::string allowed_url =
      "http://" + std::string(kAllowedHost) + ":" + std::to_string(allowed.port()) + "/";
  const std::string denied_url =
      "http://" + std::string(kDeniedHost) + ":" + std::to_string(denied.port()) + "/";
  std::vector<conformance::ProbeResult> results;
  try {
    results = conformance::assert_egress_conformance(subject, allowed_url, denied_url);
  } catch (const ConformanceFailure& failure) {
    for (const auto& failed : failure.failures()) {
      ADD_FAILURE() << failed.probe << " (" << failed.why << "): " << failed.failure;
    }
    return;
  }
  ASSERT_EQ(results.size(), 2u);
  for (const auto& result : results) {
    EXPECT_EQ(result.outcome, conformance::ProbeOutcome::passed)
        << result.probe << ": " << result.detail;
  }
  EXPECT_EQ(allowed.accepted(), 1);
  EXPECT_EQ(denied.accepted(), 0);
}

}  // namespace
}  // namespace airlock::linux_backend::testing
