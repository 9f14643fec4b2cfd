// POST /v1/sandboxes/{handle}/exec/stream: output arrives as the command prints it, one NDJSON
// line a chunk, and the last line is the result or the error (with what happened to the
// sandbox); a client that hangs up mid-stream stops the command; a refusal before anything runs
// is a plain JSON error with its own status.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sstream>

#include "airlock/encoding.hpp"
#include "daemon/support.hpp"

namespace airlock::daemon::test {
namespace {

// A streaming exec over a raw socket, read as it arrives.
class RawStream {
 public:
  RawStream(const DaemonFixture& fixture, const std::string& handle, const json::Json& body)
      : fd_(connect_unix(fixture.options.socket_path)) {
    const std::string text = body.dump();
    send_all(fd_, "POST /v1/sandboxes/" + handle +
                      "/exec/stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                      "Content-Type: application/json\r\nContent-Length: " +
                      std::to_string(text.size()) + "\r\n\r\n" + text);
  }
  ~RawStream() { hang_up(); }
  RawStream(const RawStream&) = delete;
  RawStream& operator=(const RawStream&) = delete;

  void hang_up() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Reads until `needle` has arrived (true) or `within` passed or the peer closed (false).
  bool read_until(const std::string& needle, std::chrono::milliseconds within = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    char buffer[4096];
    while (received_.find(needle) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd watched{fd_, POLLIN, 0};
      if (poll(&watched, 1, static_cast<int>(left.count())) <= 0) return false;
      const ssize_t n = recv(fd_, buffer, sizeof buffer, 0);
      if (n <= 0) return received_.find(needle) != std::string::npos;
      received_.append(buffer, static_cast<std::size_t>(n));
    }
    return true;
  }
  bool read_to_end(std::chrono::milliseconds within = 10s) {
    return read_until("\r\n0\r\n\r\n", within);
  }

  const std::string& received() const { return received_; }

  // The NDJSON lines of the (chunked) body: every line that parses as a JSON object.
  std::vector<json::Json> lines() const {
    std::vector<json::Json> out;
    std::istringstream text(received_.substr(received_.find("\r\n\r\n") + 4));
    std::string line;
    while (std::getline(text, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      const std::size_t brace = line.find('{');
      if (brace == std::string::npos) continue;
      json::Json parsed = json::Json::parse(line.substr(brace), nullptr, false);
      if (parsed.is_object()) out.push_back(std::move(parsed));
    }
    return out;
  }

 private:
  int fd_;
  std::string received_;
};

std::string decoded(const json::Json& line) {
  return base64_decode(line["data_base64"].get<std::string>()).value_or("<not base64>");
}

TEST(DaemonStream, OutputArrivesWhileTheCommandRunsThenTheResult) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  RawStream stream(fixture, handle, {{"argv", {"chunks", "a", "1500", "b"}}});
  ASSERT_TRUE(stream.read_until(base64_encode("a\n"))) << stream.received();
  EXPECT_NE(stream.received().find("200 OK"), std::string::npos) << stream.received();
  EXPECT_NE(stream.received().find("application/x-ndjson"), std::string::npos);
  EXPECT_EQ(fixture.scripted->running, 1) << "the first chunk arrived before the command ended";
  ASSERT_TRUE(stream.read_to_end()) << stream.received();
  const auto lines = stream.lines();
  ASSERT_EQ(lines.size(), 3u) << stream.received();
  EXPECT_EQ(lines[0]["type"], "output");
  EXPECT_EQ(lines[0]["stream"], "stdout");
  EXPECT_EQ(decoded(lines[0]), "a\n");
  EXPECT_EQ(lines[1]["stream"], "stderr");
  EXPECT_EQ(decoded(lines[1]), "b\n");
  EXPECT_EQ(lines[2]["type"], "result");
  EXPECT_EQ(lines[2]["status"], 200);
  EXPECT_EQ(lines[2]["result"]["exit_code"], 0);
  EXPECT_EQ(lines[2]["result"]["stdout"], "") << "streamed output is not repeated";
  EXPECT_FALSE(lines[2]["instance_id"].get<std::string>().empty());
}

TEST(DaemonStream, ACommandThatCollectsHandsItsOutputOverAtTheEnd) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  RawStream stream(fixture, handle, {{"argv", {"exit", "3"}}});
  ASSERT_TRUE(stream.read_to_end()) << stream.received();
  auto lines = stream.lines();
  ASSERT_EQ(lines.size(), 1u) << stream.received();
  EXPECT_EQ(lines[0]["result"]["exit_code"], 3);

  RawStream echo(fixture, handle, {{"argv", {"echo", "hello"}}});
  ASSERT_TRUE(echo.read_to_end()) << echo.received();
  lines = echo.lines();
  ASSERT_EQ(lines.size(), 2u) << echo.received();
  EXPECT_EQ(decoded(lines[0]), "hello\n");
  EXPECT_EQ(lines[1]["type"], "result");
}

TEST(DaemonStream, ATimeoutEndsTheStreamWithTheErrorAndWhatHappenedToTheSandbox) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  const std::string before = fixture.client->get("/v1/sandboxes/" + handle).json()["instance_id"];
  {
    RawStream kept(fixture, handle, {{"argv", {"sleep", "60000"}}, {"timeout_ms", 200}});
    ASSERT_TRUE(kept.read_to_end()) << kept.received();
    const auto lines = kept.lines();
    ASSERT_EQ(lines.size(), 1u) << kept.received();
    EXPECT_EQ(lines[0]["type"], "error");
    EXPECT_EQ(lines[0]["status"], 504);
    EXPECT_EQ(lines[0]["error"]["type"], "Timeout");
    EXPECT_EQ(lines[0]["error"]["sandbox_reset"], false);
    EXPECT_NE(lines[0]["error"]["sandbox_message"].get<std::string>().find("intact"),
              std::string::npos);
  }
  EXPECT_FALSE(fixture.scripted->was_disposed(before));
  RawStream reset(fixture, handle,
                  {{"argv", {"sleep", "60000", "unconfirmed"}}, {"timeout_ms", 200}});
  ASSERT_TRUE(reset.read_to_end()) << reset.received();
  const auto lines = reset.lines();
  ASSERT_EQ(lines.size(), 1u) << reset.received();
  EXPECT_EQ(lines[0]["error"]["sandbox_reset"], true);
  EXPECT_NE(lines[0]["error"]["sandbox_message"].get<std::string>().find("reset"),
            std::string::npos);
  EXPECT_TRUE(eventually([&] { return fixture.scripted->was_disposed(before); }));
}

TEST(DaemonStream, AClientThatHangsUpMidStreamStopsTheCommand) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  const std::size_t fds_before = open_fd_count();
  {
    RawStream stream(fixture, handle,
                     {{"argv", {"sleep", "60000", "unconfirmed"}}, {"timeout_ms", 60000}});
    ASSERT_TRUE(eventually([&] { return fixture.scripted->running == 1; }));
    ASSERT_TRUE(stream.read_until("200 OK")) << "the headers go out before the command ends";
    stream.hang_up();
  }
  EXPECT_TRUE(eventually([&] { return fixture.scripted->running == 0; }))
      << "the command outlived its vanished client";
  EXPECT_EQ(fixture.scripted->cancelled, 1);
  EXPECT_TRUE(eventually([&] { return fixture.daemon->requests_in_flight() == 0; }));
  EXPECT_TRUE(eventually([&] { return fixture.scripted->live_count() == 0; }))
      << "an unconfirmed kill condemns, on the stream route too";
  EXPECT_TRUE(eventually([&] { return open_fd_count() <= fds_before; }))
      << "no descriptor outlives the connection";
}

TEST(DaemonStream, RefusalsBeforeTheCommandRunsArePlainErrors) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  const Reply unknown = fixture.client->post("/v1/sandboxes/nope/exec/stream", {{"argv", {"x"}}});
  EXPECT_EQ(unknown.status, 404) << unknown.body;
  EXPECT_EQ(unknown.error()["type"], "SandboxHandleNotFound");
  const Reply bad = fixture.client->post("/v1/sandboxes/" + handle + "/exec/stream",
                                         {{"argv", json::Json::array()}});
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_EQ(bad.error()["check"], "body.argv");
  EXPECT_EQ(fixture.scripted->completed, 0);
}

TEST(DaemonStream, ShutdownWaitsForAStreamThenCancelsItPastTheGrace) {
  DaemonFixture fixture(nullptr, [](DaemonOptions& options) { options.shutdown_grace = 200ms; });
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  RawStream stream(fixture, handle, {{"argv", {"sleep", "60000"}}, {"timeout_ms", 60000}});
  ASSERT_TRUE(eventually([&] { return fixture.scripted->running == 1; }));
  fixture.daemon->shutdown();
  EXPECT_EQ(fixture.scripted->cancelled, 1);
  EXPECT_EQ(fixture.scripted->running, 0);
  ASSERT_TRUE(stream.read_until("\"type\":\"error\"", 5s)) << stream.received();
  EXPECT_NE(stream.received().find("\"sandbox_reset\":false"), std::string::npos);
}

}  // namespace
}  // namespace airlock::daemon::test
