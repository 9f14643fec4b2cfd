// The airlock-egress-proxy executable, as a container backend runs it: flags and environment in,
// a readiness line out, the allowlist enforced, a clean stop on SIGTERM — and curl, the client the
// egress conformance suite uses, talking to it.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <regex>

#include "egress/proxy_fixture.hpp"

extern char** environ;

namespace airlock::egress::testing {
namespace {

// A child process with its stdout (and stderr) on a pipe; killed and reaped on destruction.
class Child {
 public:
  Child(std::vector<std::string> argv, std::vector<std::string> extra_environment = {}) {
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
    output_.reset(pipe_fds[0]);
    base::UniqueFd write_end(pipe_fds[1]);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, write_end.get(), 1);
    posix_spawn_file_actions_adddup2(&actions, write_end.get(), 2);
    std::vector<char*> args;
    for (auto& arg : argv) args.push_back(arg.data());
    args.push_back(nullptr);
    std::vector<std::string> environment;
    for (char** entry = environ; *entry != nullptr; ++entry) environment.emplace_back(*entry);
    for (auto& entry : extra_environment) environment.push_back(entry);
    std::vector<char*> envp;
    for (auto& entry : environment) envp.push_back(entry.data());
    envp.push_back(nullptr);
    const int error = ::posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (error != 0) throw std::runtime_error("posix_spawn " + argv[0] + " failed");
  }
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  // Reads output until a line matching `pattern` appears; returns it (empty on timeout / EOF).
  std::string wait_for_line(const std::regex& pattern, std::chrono::milliseconds timeout = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      std::size_t newline;
      while ((newline = buffer_.find('\n')) != std::string::npos) {
        std::string line = buffer_.substr(0, newline);
        buffer_.erase(0, newline + 1);
        seen_ += line + "\n";
        if (std::regex_search(line, pattern)) return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return {};
      pollfd entry{output_.get(), POLLIN, 0};
      if (::poll(&entry, 1, static_cast<int>(left.count())) <= 0) return {};
      char chunk[4096];
      const ssize_t n = ::read(output_.get(), chunk, sizeof chunk);
      if (n <= 0) return {};
      buffer_.append(chunk, static_cast<std::size_t>(n));
    }
  }

  // Sends `signal` and waits for the exit; returns the exit status or -1 on timeout.
  int stop(int signal, std::chrono::milliseconds timeout = 10s) {
    ::kill(pid_, signal);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = 0;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(10ms);
    }
    return -1;
  }
  int wait_exit(std::chrono::milliseconds timeout = 10s) { return stop(0, timeout); }
  const std::string& seen() const { return seen_; }

 private:
  pid_t pid_ = 0;
  base::UniqueFd output_;
  std::string buffer_;
  std::string seen_;
};

const std::regex kReadiness(R"(^listening on 127\.0\.0\.1:(\d+);)");

std::uint16_t readiness_port(Child& proxy) {
  const std::string line = proxy.wait_for_line(kReadiness);
  std::smatch match;
  if (!std::regex_search(line, match, kReadiness)) return 0;
  return static_cast<std::uint16_t>(std::stoi(match[1]));
}

std::string find_curl() {
  for (const char* path : {"/usr/bin/curl", "/usr/local/bin/curl", "/bin/curl"}) {
    if (::access(path, X_OK) == 0) return path;
  }
  return {};
}

// Runs curl through the proxy; returns "<CONNECT status> <final status>".
std::string curl_through(const std::string& curl, std::uint16_t proxy_port,
                         const std::string& url) {
  Child child({curl, "-s", "-o", "/dev/null", "--max-time", "10", "-w",
               "%{http_connect} %{http_code}\n", "-p", "-x",
               "http://127.0.0.1:" + std::to_string(proxy_port), url});
  const std::string line = child.wait_for_line(std::regex(R"(^\d+ \d+$)"), 15s);
  child.wait_exit();
  return line;
}

TEST(EgressProxyBinary, PrintsReadinessEnforcesTheAllowlistAndStopsOnSigterm) {
  LoopbackServer http(LoopbackServer::Mode::http);
  Child proxy({AIRLOCK_EGRESS_PROXY_BINARY, "--listen", "127.0.0.1:0", "--allow", "localhost",
               "--port", std::to_string(http.port()), "--allow-nonglobal-for-tests",
               "127.0.0.0/8,::1/128", "--sandbox-id", "sbx-bin"});
  const std::uint16_t port = readiness_port(proxy);
  ASSERT_NE(port, 0) << proxy.seen();

  {
    const auto client = connect_tcp(port);
    send_all(client.get(),
             "CONNECT localhost:" + std::to_string(http.port()) + " HTTP/1.1\r\n\r\n");
    std::string rest;
    ASSERT_EQ(status_of(read_head(client.get(), rest)), 200) << proxy.seen();
    send_all(client.get(), "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_NE((rest + read_to_eof(client.get())).find(LoopbackServer::kHttpBody),
              std::string::npos);
  }
  {
    const auto client = connect_tcp(port);  // the IP literal is not on the allowlist
    send_all(client.get(),
             "CONNECT 127.0.0.1:" + std::to_string(http.port()) + " HTTP/1.1\r\n\r\n");
    std::string rest;
    EXPECT_EQ(status_of(read_head(client.get(), rest)), 403);
  }
  EXPECT_FALSE(
      proxy.wait_for_line(std::regex("egress allow sandbox=sbx-bin host=localhost")).empty())
      << proxy.seen();
  EXPECT_FALSE(proxy.wait_for_line(std::regex("egress deny host_not_allowed")).empty())
      << proxy.seen();
  EXPECT_EQ(proxy.stop(SIGTERM), 0) << proxy.seen();
  EXPECT_EQ(http.accepted(), 1);
}

TEST(EgressProxyBinary, IsConfiguredThroughTheEnvironment) {
  LoopbackServer http(LoopbackServer::Mode::http);
  TempDir dir;
  const std::string socket = (dir.path() / "egress.sock").string();
  Child proxy({AIRLOCK_EGRESS_PROXY_BINARY},
              {"AIRLOCK_EGRESS_LISTEN=" + socket + ",127.0.0.1:0",
               "AIRLOCK_EGRESS_ALLOW=other.example, localhost",
               "AIRLOCK_EGRESS_PORTS=" + std::to_string(http.port()),
               "AIRLOCK_EGRESS_ALLOW_NONGLOBAL_FOR_TESTS=127.0.0.0/8"});
  const std::string ready = proxy.wait_for_line(std::regex("^listening on "));
  ASSERT_FALSE(ready.empty()) << proxy.seen();
  EXPECT_NE(ready.find("unix:" + socket), std::string::npos) << ready;
  EXPECT_NE(ready.find("allowing: other.example, localhost"), std::string::npos) << ready;
  const auto client = connect_unix(socket);
  send_all(client.get(), "CONNECT localhost:" + std::to_string(http.port()) + " HTTP/1.1\r\n\r\n");
  std::string rest;
  EXPECT_EQ(status_of(read_head(client.get(), rest)), 200) << proxy.seen();
  EXPECT_EQ(proxy.stop(SIGTERM), 0);
  EXPECT_FALSE(std::filesystem::exists(socket)) << "the socket outlived the process";
}

TEST(EgressProxyBinary, RefusesLoopbackWithoutTheTestKnob) {
  LoopbackServer http(LoopbackServer::Mode::http);
  Child proxy({AIRLOCK_EGRESS_PROXY_BINARY, "--listen", "127.0.0.1:0", "--allow", "localhost",
               "--port", std::to_string(http.port())});
  const std::uint16_t port = readiness_port(proxy);
  ASSERT_NE(port, 0) << proxy.seen();
  const auto client = connect_tcp(port);
  send_all(client.get(), "CONNECT localhost:" + std::to_string(http.port()) + " HTTP/1.1\r\n\r\n");
  std::string rest;
  EXPECT_EQ(status_of(read_head(client.get(), rest)), 403);
  EXPECT_EQ(http.accepted(), 0);
}

TEST(EgressProxyBinary, RefusesBadFlagsWithExitStatus2) {
  for (const std::vector<std::string>& flags : {std::vector<std::string>{"--allow", "bad host"},
                                                {"--port", "0"},
                                                {"--port", "https"},
                                                {"--allow-nonglobal-for-tests", "10.0.0.1/8"},
                                                {"--listen", "nowhere"},
                                                {"--no-such-flag"}}) {
    std::vector<std::string> argv{AIRLOCK_EGRESS_PROXY_BINARY, "--listen", "127.0.0.1:0"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    Child proxy(argv);
    EXPECT_EQ(proxy.wait_exit(), 2) << flags.front() << "\n" << proxy.seen();
  }
}

TEST(EgressProxyBinary, CurlReachesAnAllowedHostAndIsRefusedADeniedOne) {
  const std::string curl = find_curl();
  if (curl.empty()) GTEST_SKIP() << "SKIPPED: curl is not installed (scripts/bootstrap --test)";
  LoopbackServer http(LoopbackServer::Mode::http);
  Child proxy({AIRLOCK_EGRESS_PROXY_BINARY, "--listen", "127.0.0.1:0", "--allow", "localhost",
               "--port", std::to_string(http.port()), "--allow-nonglobal-for-tests",
               "127.0.0.0/8,::1/128"});
  const std::uint16_t port = readiness_port(proxy);
  ASSERT_NE(port, 0) << proxy.seen();
  const std::string server = std::to_string(http.port());
  EXPECT_EQ(curl_through(curl, port, "http://localhost:" + server + "/"), "200 200")
      << proxy.seen();
  EXPECT_EQ(curl_through(curl, port, "http://127.0.0.1:" + server + "/"), "403 000");
  EXPECT_EQ(curl_through(curl, port, "http://localhost:1/"), "403 000");
  EXPECT_EQ(http.accepted(), 1);
}

}  // namespace
}  // namespace airlock::egress::testing
