// Listeners and the proxy itself coming and going: sockets removed (and only ours), tunnels
// ended, nothing leaked, one decision per connection, callbacks that re-enter.
#include <sys/stat.h>

#include <fstream>

#include "airlock/errors.hpp"
#include "egress/proxy_fixture.hpp"

namespace airlock::egress::testing {
namespace {

bool file_exists(const std::filesystem::path& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0;
}

TEST_F(EgressProxyTest, ClosingAListenerEndsItsTunnelsAndRemovesItsSocket) {
  LoopbackServer echo(LoopbackServer::Mode::echo);
  auto closing = proxy->listen(socket_path("closing.sock"), policy_for({echo.port()}), "sbx-a");
  const auto staying =
      proxy->listen(socket_path("staying.sock"), policy_for({echo.port()}), "sbx-b");
  const auto doomed = connect_unix(socket_path("closing.sock"));
  const auto survivor = connect_unix(socket_path("staying.sock"));
  std::string rest;
  ASSERT_EQ(status_of(request(doomed.get(), "allowed.test:" + echo.port_text(), rest)), 200);
  ASSERT_EQ(status_of(request(survivor.get(), "allowed.test:" + echo.port_text(), rest)), 200);
  const auto head_only = connect_unix(socket_path("closing.sock"));  // undecided when closed
  for (int i = 0; i < 500 && closing.open_connections() < 2; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(closing.open_connections(), 2u) << "the proxy did not accept the second client";

  closing.close();
  EXPECT_FALSE(closing.is_open());
  EXPECT_FALSE(file_exists(socket_path("closing.sock"))) << "the socket file was left behind";
  bool eof = false;
  read_to_eof(doomed.get(), 10s, &eof);
  EXPECT_TRUE(eof) << "a tunnel of the closed listener stayed open";
  read_to_eof(head_only.get(), 10s, &eof);
  EXPECT_TRUE(eof);

  send_all(survivor.get(), "still here");
  EXPECT_EQ(read_exactly(survivor.get(), 10), "still here");
  EXPECT_TRUE(file_exists(socket_path("staying.sock")));
  bool closed_reported = false;
  for (const auto& decision : decisions.wait_for(3)) {
    closed_reported |= decision.reason == EgressReason::listener_closed;
  }
  EXPECT_TRUE(closed_reported) << "the undecided connection got no decision";
}

TEST_F(EgressProxyTest, ClosingAListenerLeavesASocketThatReplacedItsFileAlone) {
  // Another process adopting a live sandbox re-listens at the same path; the old listener's
  // close must not unlink the new socket.
  auto old_listener = proxy->listen(socket_path("egress.sock"), policy_for({http.port()}), "sbx");
  EgressProxy::Options options;
  options.resolver_override_for_tests = dns.resolver();
  EgressProxy other(std::move(options));
  const auto new_listener =
      other.listen(socket_path("egress.sock"), policy_for({http.port()}), "sbx");
  old_listener.close();
  ASSERT_TRUE(file_exists(socket_path("egress.sock")));
  const auto client = connect_unix(socket_path("egress.sock"));
  std::string rest;
  EXPECT_EQ(status_of(request(client.get(), "allowed.test:" + http.port_text(), rest)), 200);
}

TEST_F(EgressProxyTest, AStaleSocketIsReplacedButOtherFilesAreRefused) {
  {
    EgressProxy earlier;
    auto stale = earlier.listen(socket_path("stale.sock"), policy_for({http.port()}), "sbx");
    // Simulate a crash: the file stays although nobody listens.
    ::link(socket_path("stale.sock").c_str(), socket_path("kept.sock").c_str());
  }
  ASSERT_TRUE(file_exists(socket_path("kept.sock")));
  const auto replaced = proxy->listen(socket_path("kept.sock"), policy_for({http.port()}), "sbx");
  const auto client = connect_unix(socket_path("kept.sock"));
  std::string rest;
  EXPECT_EQ(status_of(request(client.get(), "allowed.test:" + http.port_text(), rest)), 200);

  std::ofstream(socket_path("regular")) << "not a socket";
  EXPECT_THROW((void)proxy->listen(socket_path("regular"), policy_for({443}), "sbx"),
               InvalidArgument);
  std::ifstream kept(socket_path("regular"));
  std::string content;
  std::getline(kept, content);
  EXPECT_EQ(content, "not a socket") << "a regular file was replaced";
  std::filesystem::create_directory(socket_path("dir"));
  EXPECT_THROW((void)proxy->listen(socket_path("dir"), policy_for({443}), "sbx"), InvalidArgument);
}

TEST_F(EgressProxyTest, AnInvalidPolicyIsRefusedBeforeAnySocketIsMade) {
  EgressPolicy policy = policy_for({443});
  policy.allowed_hosts.push_back("bad host");
  EXPECT_THROW((void)proxy->listen(socket_path("never.sock"), policy, "sbx"), InvalidArgument);
  EXPECT_FALSE(file_exists(socket_path("never.sock")));
  EXPECT_THROW((void)proxy->listen_tcp("localhost", 0, policy_for({443}), "sbx"), InvalidArgument);
  EXPECT_THROW((void)proxy->listen(dir.path() / std::string(120, 'x'), policy_for({443}), "sbx"),
               InvalidArgument);
}

TEST_F(EgressProxyTest, TheSocketFileGetsTheRequestedMode) {
  const auto private_listener = proxy->listen(socket_path("private.sock"), policy_for({443}), "a");
  UnixSocketOptions shared;
  shared.mode = 0666;
  const auto shared_listener =
      proxy->listen(socket_path("shared.sock"), policy_for({443}), "b", shared);
  struct stat info {};
  ASSERT_EQ(::stat(socket_path("private.sock").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(socket_path("shared.sock").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0666u);
}

TEST_F(EgressProxyTest, ATcpListenerOnPortZeroReportsTheBoundPort) {
  const auto listener = proxy->listen_tcp("127.0.0.1", 0, policy_for({http.port()}), "sbx");
  ASSERT_NE(listener.port(), 0);
  EXPECT_EQ(listener.endpoint(), "127.0.0.1:" + std::to_string(listener.port()));
  const auto client = connect_tcp(listener.port());
  std::string rest;
  EXPECT_EQ(status_of(request(client.get(), "allowed.test:" + http.port_text(), rest)), 200);
}

TEST_F(EgressProxyTest, EveryConnectionYieldsExactlyOneDecision) {
  EgressPolicy policy = policy_for({http.port()});
  policy.header_timeout = 300ms;
  const auto listener = proxy->listen(socket_path("egress.sock"), policy, "sbx");
  const std::string port = http.port_text();
  const std::vector<std::string> requests = {
      "CONNECT allowed.test:" + port + " HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n",  // allow
      "CONNECT denied.test:" + port + " HTTP/1.1\r\n\r\n",                         // host
      "CONNECT allowed.test:1 HTTP/1.1\r\n\r\n",                                   // port
      "GET / HTTP/1.1\r\n\r\n",                                                    // method
      "CONNECT bad host HTTP/1.1\r\n\r\n",                                         // malformed
      "CONNECT allowed.test:" + port,  // never finished: timeout
      "",                              // connects and leaves at once
  };
  for (const auto& raw : requests) {
    const auto client = connect_unix(socket_path("egress.sock"));
    if (raw.empty()) continue;  // closed right away
    send_all(client.get(), raw);
    read_to_eof(client.get(), 10s);
  }
  const auto all = decisions.wait_for(requests.size());
  std::this_thread::sleep_for(500ms);  // room for a duplicate to show up, were there one
  const auto settled = decisions.snapshot();
  ASSERT_EQ(settled.size(), requests.size());
  std::vector<EgressReason> reasons;
  for (const auto& decision : settled) reasons.push_back(decision.reason);
  for (const auto reason :
       {EgressReason::allowed, EgressReason::host_not_allowed, EgressReason::port_not_allowed,
        EgressReason::method_not_allowed, EgressReason::malformed_request,
        EgressReason::header_timeout, EgressReason::client_closed}) {
    EXPECT_EQ(std::count(reasons.begin(), reasons.end(), reason), 1) << to_string(reason);
  }
}

TEST_F(EgressProxyTest, ADecisionCallbackMayCloseItsOwnListener) {
  std::mutex mutex;
  EgressListener* to_close = nullptr;
  EgressProxy::Options options;
  options.resolver_override_for_tests = dns.resolver();
  options.on_decision = [&](const EgressDecision& decision) {
    std::lock_guard lock(mutex);
    if (decision.reason == EgressReason::host_not_allowed && to_close != nullptr) {
      to_close->close();
    }
  };
  EgressProxy reentrant(std::move(options));
  auto listener = reentrant.listen(socket_path("egress.sock"), policy_for({http.port()}), "sbx");
  {
    std::lock_guard lock(mutex);
    to_close = &listener;
  }
  const auto client = connect_unix(socket_path("egress.sock"));
  send_all(client.get(), "CONNECT denied.test:" + http.port_text() + " HTTP/1.1\r\n\r\n");
  bool eof = false;
  read_to_eof(client.get(), 10s, &eof);
  EXPECT_TRUE(eof);
  for (int i = 0; i < 200 && file_exists(socket_path("egress.sock")); ++i) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_FALSE(file_exists(socket_path("egress.sock")));
  std::lock_guard lock(mutex);
  to_close = nullptr;
}

TEST_F(EgressProxyTest, AListenerHandleMayOutliveItsProxy) {
  auto listener = proxy->listen(socket_path("egress.sock"), policy_for({443}), "sbx");
  proxy.reset();
  EXPECT_FALSE(file_exists(socket_path("egress.sock"))) << "stopping left the socket file";
  listener.close();  // nothing left to close; must not crash
  EXPECT_FALSE(listener.is_open());
}

TEST(EgressProxyLifecycle, StoppingTheProxyWithOpenTunnelsLeaksNoDescriptorOrThread) {
  TempDir dir;
  TestDns dns;
  dns.set("allowed.test", {"127.0.0.1"});
  dns.set("slow.test", {"127.0.0.1"}, 300ms);
  LoopbackServer echo(LoopbackServer::Mode::echo);
  std::vector<base::UniqueFd> clients;
  const std::size_t descriptors_before = open_descriptor_count();
  const std::size_t threads_before = thread_count();
  {
    EgressProxy::Options options;
    options.resolver_override_for_tests = dns.resolver();
    EgressProxy proxy(std::move(options));
    EgressPolicy policy;
    policy.allowed_hosts = {"allowed.test", "slow.test"};
    policy.allowed_ports = {echo.port()};
    policy.allow_nonglobal_for_tests = {"127.0.0.0/8"};
    const auto unix_listener = proxy.listen(dir.path() / "egress.sock", policy, "sbx");
    const auto tcp_listener = proxy.listen_tcp("127.0.0.1", 0, policy, "sbx");
    const std::string target = "allowed.test:" + std::to_string(echo.port());
    for (int i = 0; i < 8; ++i) {
      clients.push_back(i % 2 ? connect_unix(dir.path() / "egress.sock")
                              : connect_tcp(tcp_listener.port()));
      send_all(clients.back().get(), "CONNECT " + target + " HTTP/1.1\r\n\r\n");
      std::string rest;
      ASSERT_EQ(status_of(read_head(clients.back().get(), rest)), 200);
      send_all(clients.back().get(), "x");
      ASSERT_EQ(read_exactly(clients.back().get(), 1), "x");
    }
    clients.push_back(connect_unix(dir.path() / "egress.sock"));  // mid-head
    send_all(clients.back().get(), "CONNECT allowed");
    clients.push_back(connect_unix(dir.path() / "egress.sock"));  // mid-lookup
    send_all(clients.back().get(),
             "CONNECT slow.test:" + std::to_string(echo.port()) + " HTTP/1.1\r\n\r\n");
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(proxy.open_connections(), 10u);
  }  // the proxy stops with 8 tunnels, one head and one lookup in flight
  for (auto& client : clients) {
    bool eof = false;
    read_to_eof(client.get(), 10s, &eof);
    EXPECT_TRUE(eof) << "a client was not disconnected when the proxy stopped";
  }
  clients.clear();
  // The echo server's own workers wind down once the proxy's side of each tunnel is gone.
  for (int i = 0; i < 500; ++i) {
    if (open_descriptor_count() == descriptors_before && thread_count() == threads_before) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(open_descriptor_count(), descriptors_before);
  EXPECT_EQ(thread_count(), threads_before);
}

}  // namespace
}  // namespace airlock::egress::testing
