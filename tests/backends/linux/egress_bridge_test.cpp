// The allowlist bridge inside the sandbox: 127.0.0.1:3128 relayed to the host's egress socket.
// The host side here is a plain echo server on that socket (the real proxy is another stream's).
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "airlock/errors.hpp"
#include "linux/fixture.hpp"

namespace airlock::linux_backend::testing {
namespace {

// Accepts connections on a unix socket and echoes each one back with a prefix.
class EchoServer {
 public:
  explicit EchoServer(const std::filesystem::path& path, std::string prefix)
      : prefix_(std::move(prefix)) {
    listener_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un address {};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
    ::unlink(path.c_str());
    if (::bind(listener_, reinterpret_cast<struct sockaddr*>(&address), sizeof address) != 0 ||
        ::listen(listener_, 16) != 0) {
      throw std::runtime_error("echo server: bind failed");
    }
    // The bridge connects as the guest's root (an unprivileged host uid).
    ::chmod(path.c_str(), 0666);
    thread_ = std::thread([this] { serve(); });
  }
  ~EchoServer() {
    stopping_ = true;
    ::shutdown(listener_, SHUT_RDWR);
    thread_.join();
    ::close(listener_);
  }
  int accepted() const { return accepted_.load(); }

 private:
  void serve() {
    while (!stopping_) {
      const int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) return;
      ++accepted_;
      char buffer[4096];
      const ssize_t got = ::read(client, buffer, sizeof buffer);
      if (got > 0) {
        const std::string reply = prefix_ + std::string(buffer, static_cast<std::size_t>(got));
        ssize_t ignored = ::write(client, reply.data(), reply.size());
        (void)ignored;
      }
      ::close(client);
    }
  }
  std::string prefix_;
  int listener_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

const char* kClient =
    "python3 -c \"import socket\n"
    "s = socket.create_connection(('127.0.0.1', 3128), timeout=5)\n"
    "s.sendall(b'ping')\n"
    "print(s.recv(100).decode() or 'CLOSED')\"";

class EgressBridgeTest : public LinuxBackendTest {
 protected:
  std::shared_ptr<LinuxSandbox> allowlisted() {
    return acquire(spec("egress", [](SandboxSpec::Fields& fields) {
      fields.egress = Egress::allowlist;
      fields.egress_allow = {"example.org"};
    }));
  }
  std::filesystem::path socket_path(const LinuxSandbox& sandbox) {
    return state_->path() / "linux" / sandbox.record().id / "egress" / "egress.sock";
  }
};

TEST_F(EgressBridgeTest, TheBridgeRelaysToTheHostSocket) {
  auto sandbox = allowlisted();
  EchoServer server(socket_path(*sandbox), "echo:");
  const ExecResult result = sh(*sandbox, kClient);
  EXPECT_EQ(result.stdout_bytes, "echo:ping\n") << result.stderr_bytes;
  EXPECT_EQ(server.accepted(), 1);
  const ExecResult environment = sh(*sandbox, "echo $HTTPS_PROXY $http_proxy $NO_PROXY");
  EXPECT_EQ(environment.stdout_bytes,
            "http://127.0.0.1:3128 http://127.0.0.1:3128 localhost,127.0.0.1\n");
}

TEST_F(EgressBridgeTest, WithoutAProxyTheBridgeLeadsNowhere) {
  auto sandbox = allowlisted();
  const ExecResult result = sh(*sandbox, kClient);
  EXPECT_EQ(result.stdout_bytes.find("ping"), std::string::npos);
  EXPECT_TRUE(result.stdout_bytes == "CLOSED\n" || result.exit_code != 0) << result.stdout_bytes;
}

TEST_F(EgressBridgeTest, AProxyThatRestartsIsSeen) {
  auto sandbox = allowlisted();
  {
    EchoServer first(socket_path(*sandbox), "first:");
    EXPECT_EQ(sh(*sandbox, kClient).stdout_bytes, "first:ping\n");
  }
  EchoServer second(socket_path(*sandbox), "second:");
  EXPECT_EQ(sh(*sandbox, kClient).stdout_bytes, "second:ping\n");
}

TEST_F(EgressBridgeTest, ClosedSandboxesHaveNoBridge) {
  auto sandbox = acquire(spec());
  const ExecResult result = sh(*sandbox, kClient);
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.stderr_bytes.find("ConnectionRefusedError"), std::string::npos)
      << result.stderr_bytes;
  EXPECT_EQ(sh(*sandbox, "echo \"[$HTTPS_PROXY]\"").stdout_bytes, "[]\n");
}

}  // namespace
}  // namespace airlock::linux_backend::testing
