// The allowlist on the gvisor backend, attacked from inside a runsc sandbox. The sandbox runs with
// --network=none (loopback only); its one road out is the keeper's bridge (127.0.0.1:3128 inside)
// to the backend's EgressProxy on the host, through the proxy socket bound into the guest and
// runsc's --host-uds=open. The servers these tests start listen on the HOST's loopback
// (127.0.0.2 / 127.0.0.3) or on every host interface; the proxy lets loopback through only
// because these backends set the test-only `allow_nonglobal_for_tests` knob to 127.0.0.0/8.
//
// Every refusal is proven twice: the guest's client fails, and the server it aimed at never
// accepted a connection. A positive control beside each one shows the same guest reaching an
// allowed server through the proxy, so a failure is the boundary's doing, not a broken client.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "airlock/conformance.hpp"
#include "airlock/errors.hpp"
#include "airlock/json.hpp"
#include "egress/loopback.hpp"
#include "egress/proxy_fixture.hpp"
#include "gvisor/fixture.hpp"

namespace airlock::gvisor_backend::testing {
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

class GvisorEgress : public GvisorBackendTest {
 protected:
  void SetUp() override {
    AIRLOCK_REQUIRE_GVISOR();
    GvisorBackendTest::SetUp();
    if (!curl_image_available()) GTEST_SKIP() << "SKIPPED: the host has no /usr/bin/curl to copy";
  }

  // A backend whose allowlisted sandboxes may reach `ports`, loopback let through (test knob).
  SandboxBackend& egress_backend(std::vector<std::uint16_t> ports) {
    backend_ = make_backend([&](GvisorBackendConfig& config) {
      config.egress_policy.allowed_ports = std::move(ports);
      config.egress_policy.allow_nonglobal_for_tests = {"127.0.0.0/8"};
      config.egress_decisions = decisions_.callback();
    });
    return *backend_;
  }

  std::shared_ptr<Sandbox> allowlisted(std::vector<std::string> hosts = {kAllowedHost}) {
    return acquire(spec("egress", [&](SandboxSpec::Fields& fields) {
      fields.image = "curl";
      fields.egress = Egress::allowlist;
      fields.egress_allow = hosts;
    }));
  }

  // "<the proxy's answer to CONNECT>/<the server's HTTP status>", "000" where nothing answered.
  static std::string curl_status(Sandbox& sandbox, const std::string& host, std::uint16_t port,
                                 const std::string& extra = "--proxytunnel") {
    return sh(sandbox, "curl -s -o /dev/null -w '%{http_connect}/%{http_code}' --max-time 10 " +
                           extra + " http://" + host + ":" + std::to_string(port) + "/")
        .stdout_text();
  }

  DecisionLog decisions_;
};

// Config mistakes are refused when the config is read, naming the key — not at the first acquire.
TEST(GvisorEgressConfig, BadPortsAndRangesAreRefusedNamingTheKey) {
  const auto refusal = [](const char* text) -> std::string {
    try {
      (void)parse_gvisor_backend_config(json::parse_text(text, "test"), "gvisor");
    } catch (const InvalidArgument& error) {
      return error.what();
    }
    return "accepted";
  };
  EXPECT_NE(refusal(R"({"egress_ports": [0]})").find("gvisor.egress_ports"), std::string::npos);
  EXPECT_NE(refusal(R"({"egress_ports": [70000]})").find("gvisor.egress_ports"), std::string::npos);
  EXPECT_NE(refusal(R"({"egress_ports": []})").find("allowed_ports"), std::string::npos);
  EXPECT_NE(refusal(R"({"egress_allow_nonglobal_for_tests": ["not-a-range"]})")
                .find("allow_nonglobal_for_tests"),
            std::string::npos);
  const GvisorBackendConfig parsed = parse_gvisor_backend_config(
      json::parse_text(R"({"egress_ports": [443, 8443]})", "test"), "gvisor");
  EXPECT_EQ(parsed.egress_policy.allowed_ports, (std::vector<std::uint16_t>{443, 8443}));
  EXPECT_TRUE(GvisorBackendConfig{}.egress_policy.allow_nonglobal_for_tests.empty())
      << "the test knob must be off unless configured";
}

TEST_F(GvisorEgress, TheBackendDeclaresAllowlist) {
  ASSERT_TRUE(backend_->egress_modes());
  EXPECT_TRUE(backend_->egress_modes()->contains(Egress::allowlist));
  EXPECT_TRUE(backend_->egress_modes()->contains(Egress::closed));
  EXPECT_FALSE(backend_->egress_modes()->contains(Egress::unrestricted));
}

TEST_F(GvisorEgress, EgressConformanceSuitePasses) {
  LoopbackServer allowed(LoopbackServer::Mode::http, kAllowedHost);
  LoopbackServer denied(LoopbackServer::Mode::http, kDeniedHost);
  auto& backend = egress_backend({allowed.port(), denied.port()});
  auto sandbox = allowlisted();
  // The suite runs plain curl on http:// URLs; the proxy speaks CONNECT only, so the guest's
  // curl is told to tunnel, as it would for https://.
  ASSERT_EQ(sh(*sandbox, "echo proxytunnel > \"$HOME/.curlrc\"").exit_code, 0);
  conformance::PosixGuestSubject subject(*sandbox, kWork, *backend.capabilities(),
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
  EXPECT_EQ(denied.accepted(), 0) << "the denied server was contacted";
  bool saw_deny = false;
  for (const auto& decision : decisions_.wait_for(2)) {
    if (decision.host == kDeniedHost) {
      saw_deny = decision.reason == EgressReason::host_not_allowed;
    } else {
      EXPECT_EQ(decision.verdict, EgressVerdict::allow) << decision.host;
      EXPECT_EQ(decision.sandbox_id, sandbox->instance_id());
    }
  }
  EXPECT_TRUE(saw_deny) << "the proxy did not refuse the denied host";
}

TEST_F(GvisorEgress, CurlWithNoProxyCannotReachAnAllowedHost) {
  LoopbackServer server(LoopbackServer::Mode::http, kAllowedHost);
  egress_backend({server.port()});
  auto sandbox = allowlisted();
  EXPECT_EQ(curl_status(*sandbox, kAllowedHost, server.port(), "--noproxy '*'"), "000/000");
  EXPECT_EQ(server.accepted(), 0) << "a connection bypassing the proxy reached the host";
  // Positive control: the same host through the proxy.
  EXPECT_EQ(curl_status(*sandbox, kAllowedHost, server.port()), "200/200");
  EXPECT_EQ(server.accepted(), 1);
}

TEST_F(GvisorEgress, ARawTcpConnectToAHostAddressFails) {
  LoopbackServer server(LoopbackServer::Mode::http, "0.0.0.0");
  egress_backend({server.port()});
  auto sandbox = allowlisted({"*"});
  std::vector<std::string> targets = {kAllowedHost, "1.1.1.1"};
  if (const auto ip = host_interface_address(); !ip.empty()) targets.push_back(ip);
  for (const auto& target : targets) {
    const ExecResult tried =
        sh(*sandbox, "echo hi | nc -w 3 " + target + " " + std::to_string(server.port()));
    EXPECT_NE(tried.exit_code, 0) << "a raw connect to " << target << " succeeded";
  }
  EXPECT_EQ(server.accepted(), 0) << "a raw connect from inside reached the host";
  // Positive control: the same server through the proxy.
  EXPECT_EQ(curl_status(*sandbox, kAllowedHost, server.port()), "200/200");
  EXPECT_EQ(server.accepted(), 1);
}

TEST_F(GvisorEgress, AnotherBackendAdoptingTheSandboxServesItsEgress) {
  LoopbackServer server(LoopbackServer::Mode::http, kAllowedHost);
  auto first = make_backend([&](GvisorBackendConfig& config) {
    config.egress_policy.allowed_ports = {server.port()};
    config.egress_policy.allow_nonglobal_for_tests = {"127.0.0.0/8"};
  });
  auto egress_spec = spec("egress", [](SandboxSpec::Fields& fields) {
    fields.image = "curl";
    fields.egress = Egress::allowlist;
    fields.egress_allow = {kAllowedHost};
  });
  auto sandbox = first->acquire(key_, egress_spec);
  EXPECT_EQ(curl_status(*sandbox, kAllowedHost, server.port()), "200/200");
  // A second backend on the same state directory (as another process would be) adopts the
  // running sandbox and re-binds its socket; the first one going away must not take it along.
  egress_backend({server.port()});
  auto adopted = allowlisted();
  EXPECT_EQ(adopted->instance_id(), sandbox->instance_id());
  sandbox.reset();
  first.reset();
  EXPECT_EQ(curl_status(*adopted, kAllowedHost, server.port()), "200/200");
  EXPECT_EQ(decisions_.last(1).verdict, EgressVerdict::allow) << "the adopter did not serve it";
  EXPECT_EQ(server.accepted(), 2);
}

// The egress directory bound into a guest is its own sandbox's, read-only, and holds one socket:
// a guest can neither use another sandbox's listener (and its allowlist) nor plant anything.
TEST_F(GvisorEgress, EachSandboxReachesOnlyItsOwnProxySocket) {
  LoopbackServer first_server(LoopbackServer::Mode::http, kAllowedHost);
  LoopbackServer second_server(LoopbackServer::Mode::http, kDeniedHost);
  egress_backend({first_server.port(), second_server.port()});
  auto first = allowlisted({kAllowedHost});
  auto second = acquire(spec("egress",
                             [](SandboxSpec::Fields& fields) {
                               fields.image = "curl";
                               fields.egress = Egress::allowlist;
                               fields.egress_allow = {kDeniedHost};
                             }),
                        SandboxKey{"gvisor-test-peer", key_.thread_id, key_.agent_dir});
  for (auto* sandbox : {first.get(), second.get()}) {
    EXPECT_EQ(sh(*sandbox, "ls -A /.airlock-egress").stdout_bytes, "egress.sock\n");
    EXPECT_NE(sh(*sandbox, "touch /.airlock-egress/planted").exit_code, 0);
    EXPECT_NE(sh(*sandbox, "rm /.airlock-egress/egress.sock").exit_code, 0);
    EXPECT_NE(sh(*sandbox, "ln -s / /.airlock-egress/link").exit_code, 0);
  }
  // Each guest is judged by its own allowlist: the first may not reach what the second may.
  EXPECT_NE(curl_status(*first, kDeniedHost, second_server.port()), "200/200");
  const EgressDecision refused = decisions_.last(1);
  EXPECT_EQ(refused.sandbox_id, first->instance_id());
  EXPECT_EQ(refused.reason, EgressReason::host_not_allowed);
  EXPECT_EQ(second_server.accepted(), 0) << "the first sandbox reached the second's host";
  EXPECT_EQ(curl_status(*second, kDeniedHost, second_server.port()), "200/200");
  EXPECT_EQ(decisions_.last(2).sandbox_id, second->instance_id());
  EXPECT_EQ(curl_status(*first, kAllowedHost, first_server.port()), "200/200");
}

// runsc --host-uds=open lets a guest connect to any host socket its filesystems reach. The guest
// looks for every socket it can see and tries each (curl exits 7 when it cannot connect): the
// proxy's answers, and the keeper socket of the command channel, which every sandbox has and
// which yields a guest nothing (channel_test.cpp attacks it). No other does.
TEST_F(GvisorEgress, AnAllowlistedGuestReachesNoHostSocketButItsProxyAndTheKeepers) {
  LoopbackServer server(LoopbackServer::Mode::http, kAllowedHost);
  egress_backend({server.port()});
  auto sandbox = allowlisted();
  const std::string expected = "/.airlock-egress/egress.sock\n/.airlock-control/keeper.sock\n";
  const ExecResult found =
      sh(*sandbox, "find / -path /proc -prune -o -path /sys -prune -o -type s -print 2>/dev/null");
  EXPECT_EQ(found.stdout_bytes, expected);
  const ExecResult reached = sh(*sandbox,
                                "for s in $(find / -path /proc -prune -o -path /sys -prune -o "
                                "-type s -print 2>/dev/null); do "
                                "curl -s -o /dev/null --max-time 3 --unix-socket $s http://x/; "
                                "[ $? -ne 7 ] && echo $s; done");
  EXPECT_EQ(reached.stdout_bytes, expected) << "the control failed, or another socket answered";
}

// The proxy's socket lies deeper than sun_path can name; the proxy binds it, and runsc's file
// proxy reaches it, through descriptors.
TEST_F(GvisorEgress, AllowlistWorksUnderADeepStateDirectory) {
  LoopbackServer server(LoopbackServer::Mode::http, kAllowedHost);
  TemporaryDirectory top("airlock-gvisor-deep");
  std::filesystem::path deep = top.path();
  for (int level = 0; level < 3; ++level) {
    deep /= std::string(60, static_cast<char>('a' + level));
    std::filesystem::create_directory(deep);
    ::chmod(deep.c_str(), 0711);
  }
  backend_->purge_all();
  backend_ = make_backend([&](GvisorBackendConfig& config) {
    config.state_dir = deep / "state";
    config.egress_policy.allowed_ports = {server.port()};
    config.egress_policy.allow_nonglobal_for_tests = {"127.0.0.0/8"};
  });
  auto sandbox = allowlisted();
  ASSERT_GT((deep / "state" / "gvisor" / "egress").string().size(), 120u);
  EXPECT_EQ(curl_status(*sandbox, kAllowedHost, server.port()), "200/200");
  EXPECT_EQ(server.accepted(), 1);
  EXPECT_EQ(backend_->purge_all(), 1);
}

TEST_F(GvisorEgress, DisposeAndPurgeCloseTheProxySocket) {
  LoopbackServer server(LoopbackServer::Mode::http, kAllowedHost);
  auto& backend = egress_backend({server.port()});
  auto sandbox = allowlisted();
  const auto egress_root = state_->path() / "gvisor" / "egress";
  auto socket_of = [&] {
    std::vector<std::filesystem::path> found;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(egress_root)) {
      if (entry.is_socket()) found.push_back(entry.path());
    }
    return found;
  };
  ASSERT_EQ(socket_of().size(), 1u);
  EXPECT_EQ(curl_status(*sandbox, kAllowedHost, server.port()), "200/200");
  backend.dispose(key_);
  EXPECT_TRUE(socket_of().empty()) << "dispose left the proxy socket";
  EXPECT_TRUE(std::filesystem::is_empty(egress_root)) << "dispose left the egress directory";

  auto again = allowlisted();
  ASSERT_EQ(socket_of().size(), 1u);
  EXPECT_EQ(backend.purge_all(), 1);
  EXPECT_TRUE(socket_of().empty()) << "purge left the proxy socket";
  EXPECT_TRUE(std::filesystem::is_empty(egress_root)) << "purge left the egress directory";
  EXPECT_EQ(server.accepted(), 1);
}

}  // namespace
}  // namespace airlock::gvisor_backend::testing
