// The HTTP layer under attack: huge bodies, slow clients, connection floods, TCP without the
// token. Each test then proves the daemon still answers.
#include <unistd.h>

#include <fstream>
#include <random>
#include <thread>

#include "daemon/support.hpp"

namespace airlock::daemon::test {
namespace {

std::string health_request() {
  return "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n";
}

TEST(DaemonHttp, DeclaredHugeBodyIsRefusedWith413BeforeItIsRead) {
  DaemonFixture fixture;
  const int fd = connect_unix(fixture.options.socket_path);
  // Ten gigabytes announced, a handful sent: the answer cannot have waited for the rest.
  send_all(fd,
           "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           "Content-Length: 10737418240\r\n\r\n{\"key\":");
  const auto answer = read_until_closed(fd, 10s);
  close(fd);
  ASSERT_TRUE(answer.has_value()) << "the daemon closes the connection after refusing";
  EXPECT_EQ(answer->rfind("HTTP/1.1 413", 0), 0u) << *answer;
  EXPECT_NE(answer->find("RequestBodyTooLarge"), std::string::npos);
  EXPECT_EQ(fixture.client->get("/v1/health").status, 200);
}

TEST(DaemonHttp, ChunkedBodyPastTheCapClosesTheConnection) {
  DaemonFixture fixture(nullptr,
                        [](DaemonOptions& options) { options.server.max_json_body_bytes = 1024; });
  const int fd = connect_unix(fixture.options.socket_path);
  send_all(fd, "POST /v1/check HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
  const std::string chunk(512, ' ');
  bool closed = false;
  for (int i = 0; i < 64 && !closed; ++i) {
    try {
      send_all(fd, "200\r\n" + chunk + "\r\n");
    } catch (const std::exception&) {
      closed = true;
    }
  }
  const auto answer = read_until_closed(fd, 10s);
  close(fd);
  EXPECT_TRUE(closed || answer.has_value()) << "the connection was closed past the cap";
  EXPECT_EQ(fixture.client->get("/v1/health").status, 200);
}

TEST(DaemonHttp, SlowClientIsCutOffByTheHeaderDeadline) {
  DaemonFixture fixture(nullptr, [](DaemonOptions& options) {
    options.server.header_deadline = 500ms;
    options.server.idle_timeout_seconds = 60;  // the dribble keeps the idle timer happy
  });
  const int fd = connect_unix(fixture.options.socket_path);
  const std::string request = health_request();
  bool cut_off = false;
  // One byte every 100 ms: never idle, never finished. The deadline must end it.
  for (std::size_t i = 0; i < request.size() - 2; ++i) {
    try {
      send_all(fd, request.substr(i, 1));
    } catch (const std::exception&) {
      cut_off = true;
      break;
    }
    if (read_until_closed(fd, 100ms).has_value()) {
      cut_off = true;
      break;
    }
  }
  close(fd);
  EXPECT_TRUE(cut_off) << "a request dribbled over " << request.size() / 10.0
                       << " s outlived a 0.5 s header deadline";
  EXPECT_EQ(fixture.client->get("/v1/health").status, 200);
}

TEST(DaemonHttp, SlowBodyIsCutOffByTheBodyDeadline) {
  DaemonFixture fixture(nullptr,
                        [](DaemonOptions& options) { options.server.body_deadline = 500ms; });
  const int fd = connect_unix(fixture.options.socket_path);
  send_all(fd, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{");
  bool cut_off = false;
  for (int i = 0; i < 50; ++i) {
    try {
      send_all(fd, " ");
    } catch (const std::exception&) {
      cut_off = true;
      break;
    }
    if (read_until_closed(fd, 100ms).has_value()) {
      cut_off = true;
      break;
    }
  }
  close(fd);
  EXPECT_TRUE(cut_off);
  EXPECT_EQ(fixture.client->get("/v1/health").status, 200);
}

TEST(DaemonHttp, ConnectionFloodIsBoundedAndTheDaemonRecovers) {
  DaemonFixture fixture(nullptr, [](DaemonOptions& options) {
    options.server.max_connections = 8;
    options.server.header_deadline = 500ms;
  });
  std::vector<int> idle;
  for (int i = 0; i < 32; ++i) {
    try {
      idle.push_back(connect_unix(fixture.options.socket_path));
    } catch (const std::exception&) {
      break;  // the backlog is full: refused, which is fine
    }
  }
  // Held open without a byte: the header deadline reaps them, and new clients get through.
  bool answered = false;
  for (int attempt = 0; attempt < 100 && !answered; ++attempt) {
    try {
      answered = fixture.client->request("GET", "/v1/health", {}, {}, 1000).status == 200;
    } catch (const std::exception&) {
      std::this_thread::sleep_for(100ms);
    }
  }
  for (int fd : idle) close(fd);
  EXPECT_TRUE(answered);
}

TEST(DaemonHttp, ExecLongerThanTheIdleTimeoutStillAnswers) {
  DaemonFixture fixture(nullptr,
                        [](DaemonOptions& options) { options.server.idle_timeout_seconds = 1; });
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  const Reply reply = fixture.exec(handle, {{"argv", {"sleep", "2500"}}});
  EXPECT_EQ(reply.status, 200) << reply.body;
}

TEST(DaemonHttp, KeepAliveServesManyRequestsOnOneConnection) {
  DaemonFixture fixture;
  const int fd = connect_unix(fixture.options.socket_path);
  std::string all;
  for (int i = 0; i < 3; ++i) all += health_request();
  all += "GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  send_all(fd, all);
  const auto answer = read_until_closed(fd, 10s);
  close(fd);
  ASSERT_TRUE(answer.has_value());
  std::size_t count = 0;
  for (auto at = answer->find("HTTP/1.1 200"); at != std::string::npos;
       at = answer->find("HTTP/1.1 200", at + 1)) {
    ++count;
  }
  EXPECT_EQ(count, 4u);
}

TEST(DaemonHttp, GarbageRequestLineDoesNotTakeTheDaemonDown) {
  DaemonFixture fixture;
  for (const std::string& garbage :
       {std::string("\x00\x01\x02\r\n\r\n", 7), std::string("GET\r\n\r\n"),
        std::string("GET / HTTP/9.9\r\n\r\n"), std::string(40000, 'A') + "\r\n\r\n"}) {
    const int fd = connect_unix(fixture.options.socket_path);
    try {
      send_all(fd, garbage);
    } catch (const std::exception&) {
    }
    read_until_closed(fd, 5s);
    close(fd);
  }
  EXPECT_EQ(fixture.client->get("/v1/health").status, 200);
}

// Not a fuzzer (that is libFuzzer's job, under the fuzz preset), but a fixed-seed storm of
// malformed requests through the real HTTP layer: every one gets an answer with a status and a
// JSON error naming something, nothing crashes, and the daemon still serves afterwards.
TEST(DaemonHttp, MalformedRequestsAreAnsweredAndNeverTakeTheDaemonDown) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  std::mt19937 random(20261130);
  const std::vector<std::string> fragments = {"{",
                                              "}",
                                              "[",
                                              "]",
                                              "\"argv\"",
                                              "\"shell\"",
                                              ":",
                                              ",",
                                              "\"timeout_ms\"",
                                              "-1",
                                              "1e309",
                                              "null",
                                              "true",
                                              "\"\\u0000\"",
                                              "\"\\ud800\"",
                                              "\"spec\"",
                                              "\"key\"",
                                              "{\"kind\":\"k\"}",
                                              "\"max_output_bytes\"",
                                              "18446744073709551616",
                                              "\"stdin_base64\"",
                                              "\"===\"",
                                              "\"environment\"",
                                              std::string("\xff\xfe", 2),
                                              std::string(1, '\0'),
                                              "\"overflow\"",
                                              "\"truncate\"",
                                              "0.5"};
  const std::vector<std::string> targets = {
      "/v1/sandboxes",
      "/v1/check",
      "/v1/purge",
      "/v1/sandboxes/" + handle + "/exec",
      "/v1/sandboxes/" + handle + "/outputs",
      "/v1/sandboxes/" + handle + "/files?path=",
      "/v1/sandboxes/" + handle + "/stat?path=%2e%2e%2f",
      "/v1/sandboxes/%ff/exec",
      "/v1/sandboxes/" + handle + "/files?path=a&max_bytes=-3",
      "/v1//sandboxes"};
  const std::vector<std::string> methods = {"POST", "PUT", "GET", "DELETE"};
  for (int i = 0; i < 600; ++i) {
    std::string body;
    const int pieces = static_cast<int>(random() % 12);
    for (int p = 0; p < pieces; ++p) body += fragments[random() % fragments.size()];
    const std::string& target = targets[random() % targets.size()];
    const std::string& method = methods[random() % methods.size()];
    const Reply reply =
        fixture.client->request(method, target, body, {"Content-Type: application/json"});
    ASSERT_GE(reply.status, 200) << method << " " << target << " " << body;
    ASSERT_LT(reply.status, 600);
    if (reply.status >= 400) {
      const json::Json error = reply.error();
      ASSERT_TRUE(error.contains("type") && error.contains("message"))
          << method << " " << target << " " << body << " -> " << reply.body;
      EXPECT_NE(reply.status, 500) << "an unexpected failure: " << reply.body;
    }
  }
  EXPECT_EQ(fixture.client->get("/v1/health").status, 200);
}

class DaemonTcp : public ::testing::Test {
 protected:
  static constexpr const char* kToken = "a-token-of-at-least-16-characters";
};

TEST_F(DaemonTcp, RequestsNeedTheBearerToken) {
  DaemonFixture fixture(nullptr, [](DaemonOptions& options) {
    options.tcp = "127.0.0.1:0";
    options.token = kToken;
  });
  ASSERT_FALSE(fixture.daemon->tcp_address().empty());
  const Client tcp(fixture.options.socket_path, "http://" + fixture.daemon->tcp_address());
  const Reply none = tcp.get("/v1/health");
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.headers.at("www-authenticate"), "Bearer realm=\"airlockd\"");
  EXPECT_EQ(tcp.request("GET", "/v1/health", {}, {"Authorization: Bearer wrong-token-wrong-token"})
                .status,
            401);
  EXPECT_EQ(
      tcp.request("GET", "/v1/health", {}, {std::string("Authorization: Bearer ") + kToken + "x"})
          .status,
      401);
  EXPECT_EQ(
      tcp.request("GET", "/v1/health", {}, {std::string("Authorization: bearer ") + kToken}).status,
      401);
  EXPECT_EQ(
      tcp.request("GET", "/v1/health", {}, {std::string("Authorization: Bearer ") + kToken}).status,
      200);
  // A refused request never reaches a route: an acquire without the token creates nothing.
  const Reply sneaky = tcp.request(
      "POST", "/v1/sandboxes",
      json::Json{{"key", DaemonFixture::key("s")}, {"spec", DaemonFixture::default_spec()}}.dump());
  EXPECT_EQ(sneaky.status, 401);
  EXPECT_EQ(fixture.scripted->acquires(), 0);
  // The unix socket relies on its mode, not the token.
  EXPECT_EQ(fixture.client->get("/v1/health").status, 200);
}

TEST_F(DaemonTcp, ServingTcpWithoutATokenIsRefusedAtStart) {
  auto backend = std::make_shared<ScriptedBackend>();
  TempDir dir;
  DaemonOptions options;
  options.socket_path = (dir.path() / "s.sock").string();
  options.state_dir = dir.path() / "state";
  options.tcp = "127.0.0.1:0";
  RouterOptions router_options;
  router_options.min_isolation = Isolation::container;
  Daemon daemon(options,
                std::make_unique<SandboxRouter>(
                    std::vector<std::shared_ptr<SandboxBackend>>{backend}, router_options));
  try {
    daemon.start();
    FAIL() << "TCP without a token started";
  } catch (const InvalidArgument& refused) {
    EXPECT_EQ(refused.check(), "tcp");
  }
}

TEST_F(DaemonTcp, TheDangerousFlagServesTcpWithoutAToken) {
  DaemonFixture fixture(nullptr, [](DaemonOptions& options) {
    options.tcp = "127.0.0.1:0";
    options.dangerously_allow_tcp_without_token = true;
  });
  const Client tcp(fixture.options.socket_path, "http://" + fixture.daemon->tcp_address());
  EXPECT_EQ(tcp.get("/v1/health").status, 200);
}

TEST(DaemonSocket, ALiveSocketIsNeverTakenOverAndAFileIsNeverReplaced) {
  DaemonFixture fixture;
  auto backend = std::make_shared<ScriptedBackend>();
  RouterOptions router_options;
  router_options.min_isolation = Isolation::container;
  DaemonOptions second = fixture.options;
  second.state_dir = fixture.dir.path() / "state-2";
  Daemon intruder(
      second, std::make_unique<SandboxRouter>(std::vector<std::shared_ptr<SandboxBackend>>{backend},
                                              router_options));
  EXPECT_THROW(intruder.start(), InvalidArgument);
  EXPECT_EQ(fixture.client->get("/v1/health").status, 200);

  const auto file = fixture.dir.path() / "not-a-socket";
  std::ofstream(file) << "precious";
  DaemonOptions third = second;
  third.socket_path = file.string();
  Daemon misdirected(
      third, std::make_unique<SandboxRouter>(std::vector<std::shared_ptr<SandboxBackend>>{backend},
                                             router_options));
  EXPECT_THROW(misdirected.start(), InvalidArgument);
  std::ifstream kept(file);
  std::string content;
  kept >> content;
  EXPECT_EQ(content, "precious");
}

}  // namespace
}  // namespace airlock::daemon::test
