// Allowlist egress on the docker backend, attacked from inside a sandbox. The sandbox sits alone
// on an internal network (no host address on it) with its proxy container; the proxy alone also
// joins an outbound network this test creates. The servers listen on the host at the gateway
// addresses of two user-defined networks, which the proxy reaches through the host (the private
// dockerd runs without iptables, so nothing NATs or filters that leg); the proxy lets those
// private ranges through only because these tests set its test knob to them.
//
// Images (built offline by scripts/engines/binary-image, see scripts/test.d/30-docker.sh):
//   AIRLOCK_DOCKER_PROXY_IMAGE  busybox + airlock-egress-proxy and its libraries
//   AIRLOCK_DOCKER_CURL_IMAGE   busybox + curl and its libraries (the suite's guest client)
// Without them the tests SKIP loudly.
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "airlock/conformance.hpp"
#include "egress/loopback.hpp"
#include "engine_fixture.hpp"

namespace airlock::docker::test {
namespace {

using egress::testing::LoopbackServer;

class DockerAllowlistTest : public EngineTest {
 protected:
  void SetUp() override {
    EngineTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    proxy_image_ = environment("AIRLOCK_DOCKER_PROXY_IMAGE");
    curl_image_ = environment("AIRLOCK_DOCKER_CURL_IMAGE");
    if (proxy_image_.empty() || curl_image_.empty()) {
      GTEST_SKIP() << "SKIPPED: AIRLOCK_DOCKER_PROXY_IMAGE and AIRLOCK_DOCKER_CURL_IMAGE are not "
                      "set (scripts/engines/binary-image builds them; the docker stage does)";
    }
    const std::map<std::string, std::string> labels{{"airlock.test-scope", scope_}};
    outbound_ = scope_ + "-out";
    elsewhere_ = scope_ + "-elsewhere";
    ensure_network(*client_, outbound_, /*internal=*/false, labels);
    ensure_network(*client_, elsewhere_, /*internal=*/false, labels);
    outbound_gateway_ = gateway(outbound_);
    elsewhere_gateway_ = gateway(elsewhere_);
    ASSERT_FALSE(outbound_gateway_.empty());
    ASSERT_FALSE(elsewhere_gateway_.empty());
  }

  void TearDown() override {
    if (egress_backend_) egress_backend_->dispose_scope(scope_, std::nullopt);
    EngineTest::TearDown();
    if (client_) {
      if (!outbound_.empty()) remove_network(*client_, outbound_);
      if (!elsewhere_.empty()) remove_network(*client_, elsewhere_);
    }
  }

  std::string gateway(const std::string& network) {
    const auto response = client_->call("GET", "/networks/" + network);
    const auto parsed = nlohmann::json::parse(response.body, nullptr, false);
    const nlohmann::json::json_pointer where("/IPAM/Config/0/Gateway");
    return parsed.is_object() && parsed.contains(where) ? parsed.at(where).get<std::string>() : "";
  }

  // A backend whose proxy may reach `ports` on both networks' ranges (the test knob).
  DockerBackend& egress_backend(std::vector<std::uint16_t> ports,
                                std::string proxy_image = std::string()) {
    DockerConfig config = test_config();
    config.default_image = curl_image_;
    config.proxy_image = proxy_image.empty() ? proxy_image_ : proxy_image;
    config.proxy_outbound_network = outbound_;
    config.proxy_allowed_ports = std::move(ports);
    config.proxy_allow_nonglobal_for_tests = {outbound_gateway_ + "/32",
                                              elsewhere_gateway_ + "/32"};
    config.proxy_ready_timeout = std::chrono::seconds(20);
    egress_backend_ = make_backend(config);
    return *egress_backend_;
  }

  static SandboxSpec egress_spec(std::vector<std::string> hosts) {
    return SandboxSpec({.kind = "egress",
                        .egress_allow = std::move(hosts),
                        .work_dir = kWork,
                        .egress = Egress::allowlist});
  }

  std::shared_ptr<Sandbox> allowlisted(DockerBackend& backend, std::vector<std::string> hosts) {
    auto sandbox = backend.acquire(key(), egress_spec(std::move(hosts)));
    // The proxy speaks CONNECT only; curl is told to tunnel http:// as it does https://.
    EXPECT_EQ(sh(*sandbox, "mkdir -p \"$HOME\" && echo proxytunnel > \"$HOME/.curlrc\"").exit_code,
              0);
    return sandbox;
  }

  static std::string url(const std::string& host, std::uint16_t port) {
    return "http://" + host + ":" + std::to_string(port) + "/";
  }

  // "<proxy's answer to CONNECT>/<server's status>", "000" where nothing answered.
  std::string curl_status(Sandbox& sandbox, const std::string& target,
                          const std::string& extra = "") {
    return sh(sandbox, "curl -s -o /dev/null -w '%{http_connect}/%{http_code}' --max-time 10 " +
                           extra + " " + target)
        .stdout_text();
  }

  std::string proxy_image_, curl_image_, outbound_, elsewhere_;
  std::string outbound_gateway_, elsewhere_gateway_;
  std::shared_ptr<DockerBackend> egress_backend_;
};

TEST_F(DockerAllowlistTest, EgressConformanceSuitePasses) {
  LoopbackServer allowed(LoopbackServer::Mode::http, outbound_gateway_);
  LoopbackServer denied(LoopbackServer::Mode::http, elsewhere_gateway_);
  auto& backend = egress_backend({allowed.port(), denied.port()});
  ASSERT_TRUE(backend.egress_modes()->contains(Egress::allowlist));
  auto sandbox = allowlisted(backend, {outbound_gateway_});
  conformance::PosixGuestSubject subject(*sandbox, kWork, *backend.capabilities(),
                                         std::chrono::seconds(30));
  std::vector<conformance::ProbeResult> results;
  try {
    results = conformance::assert_egress_conformance(
        subject, url(outbound_gateway_, allowed.port()), url(elsewhere_gateway_, denied.port()));
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
  EXPECT_EQ(allowed.accepted(), 1) << "the allowed server was not reached exactly once";
  EXPECT_EQ(denied.accepted(), 0) << "the denied server was contacted";
}

TEST_F(DockerAllowlistTest, CurlWithNoProxyCannotReachAnAllowedHost) {
  LoopbackServer server(LoopbackServer::Mode::http, outbound_gateway_);
  auto sandbox = allowlisted(egress_backend({server.port()}), {outbound_gateway_});
  const std::string target = url(outbound_gateway_, server.port());
  EXPECT_EQ(curl_status(*sandbox, target), "200/200") << "positive control: through the proxy";
  EXPECT_EQ(server.accepted(), 1);
  EXPECT_EQ(curl_status(*sandbox, target, "--noproxy '*'"), "000/000");
  EXPECT_EQ(server.accepted(), 1) << "a direct connect reached the server around the proxy";
}

TEST_F(DockerAllowlistTest, ARawTcpConnectToAHostAddressFails) {
  // Raw TCP (busybox nc) to every host address a sandbox could aim at: both gateways and the
  // sandbox network's own gateway address (which the host does not hold).
  LoopbackServer everywhere(LoopbackServer::Mode::http, "0.0.0.0");
  auto sandbox = allowlisted(egress_backend({everywhere.port()}), {outbound_gateway_});
  const std::string port = std::to_string(everywhere.port());
  const std::string own_gateway =
      sh(*sandbox, "ip route | awk '/default/ {print $3}'").stdout_text();
  for (std::string host : {outbound_gateway_, elsewhere_gateway_, own_gateway}) {
    while (!host.empty() && (host.back() == '\n' || host.back() == ' ')) host.pop_back();
    if (host.empty()) continue;
    const auto result =
        sh(*sandbox, "(printf 'GET / HTTP/1.0\\r\\n\\r\\n'; sleep 2) | timeout 5 nc " + host + " " +
                         port + " | head -c 200");
    EXPECT_EQ(result.stdout_text().find("200"), std::string::npos)
        << host << " answered directly: " << result.stdout_text();
  }
  EXPECT_EQ(everywhere.accepted(), 0) << "a raw connect reached the host around the proxy";
  // Positive control: the same server through the proxy.
  EXPECT_EQ(curl_status(*sandbox, url(outbound_gateway_, everywhere.port())), "200/200");
  EXPECT_EQ(everywhere.accepted(), 1);
}

TEST_F(DockerAllowlistTest, DisposeRemovesTheProxyAndItsNetwork) {
  auto& backend = egress_backend({443});
  auto sandbox = allowlisted(backend, {"example.org"});
  const std::string name = DockerBackend::container_name(key(), egress_spec({"example.org"}));
  ASSERT_TRUE(inspect(name + "-proxy").has_value()) << "no proxy container beside the sandbox";
  EXPECT_EQ(client_->call("GET", "/networks/" + name + "-net").status, 200);
  backend.dispose(key());
  EXPECT_FALSE(inspect(name + "-proxy").has_value()) << "the proxy outlived its sandbox";
  EXPECT_FALSE(inspect(name).has_value());
  EXPECT_EQ(client_->call("GET", "/networks/" + name + "-net").status, 404);
}

TEST_F(DockerAllowlistTest, AProxyThatCannotStartFailsTheAcquireAndLeavesNothing) {
  // The busybox test image has no airlock-egress-proxy: the proxy cannot start, and acquire must
  // fail rather than hand out a sandbox with no way out (or one with a way around).
  auto& backend = egress_backend({443}, test_image());
  const SandboxSpec spec = egress_spec({"example.org"});
  EXPECT_THROW(backend.acquire(key(), spec), BackendError);
  const std::string name = DockerBackend::container_name(key(), spec);
  EXPECT_FALSE(inspect(name + "-proxy").has_value()) << "a failed proxy was left behind";
  EXPECT_FALSE(inspect(name).has_value());
  EXPECT_EQ(client_->call("GET", "/networks/" + name + "-net").status, 404);
}

}  // namespace
}  // namespace airlock::docker::test
