// The boundary, attacked: what a guest can see of the host, reach on the network, and do to it
// with a fork bomb, an output flood or a command that will not end.
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <stop_token>
#include <thread>

#include "airlock/errors.hpp"
#include "gvisor/fixture.hpp"

namespace airlock::gvisor_backend::testing {
namespace {

using Isolation = GvisorBackendTest;

// A TCP listener on every host address, counting the connections it accepts.
class HostListener {
 public:
  HostListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_ANY);
    const int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::listen(fd_, 16) != 0) {
      throw std::runtime_error("listen");
    }
    socklen_t size = sizeof address;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &size);
    port_ = ntohs(address.sin_port);
  }
  ~HostListener() { ::close(fd_); }
  int port() const { return port_; }
  int accepted() {
    int count = 0;
    for (int client; (client = ::accept(fd_, nullptr, nullptr)) >= 0; ++count) ::close(client);
    return count;
  }

 private:
  int fd_ = -1;
  int port_ = 0;
};

std::vector<std::string> host_ipv4_addresses() {
  std::vector<std::string> found;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return found;
  for (ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN];
    const auto* address = reinterpret_cast<sockaddr_in*>(entry->ifa_addr);
    ::inet_ntop(AF_INET, &address->sin_addr, text, sizeof text);
    found.emplace_back(text);
  }
  ::freeifaddrs(list);
  return found;
}

TEST_F(Isolation, NoHostProcessIsVisible) {
  AIRLOCK_REQUIRE_GVISOR();
  auto sandbox = acquire(spec());
  // Every process the guest can see, by command line: only the keeper, the exec wrapper and
  // this shell — never the test, runsc, or anything else of the host.
  const ExecResult seen =
      sh(*sandbox, "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done");
  ASSERT_EQ(seen.exit_code, 0) << seen.stderr_bytes;
  int processes = 0;
  std::istringstream lines(seen.stdout_bytes);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    ++processes;
    EXPECT_TRUE(line.find("airlock-gvisor-guest") != std::string::npos ||
                line.find("sh -c") != std::string::npos || line.find("tr ") == 0)
        << "a process the guest should not see: " << line;
  }
  EXPECT_LE(processes, 6) << seen.stdout_bytes;
  EXPECT_EQ(sh(*sandbox, "test -e /proc/" + std::to_string(::getpid()) +
                             "/cmdline && "
                             "grep -q lifecycle /proc/" +
                             std::to_string(::getpid()) + "/cmdline")
                    .exit_code == 0,
            false);
}

TEST_F(Isolation, NetworkIsUnreachableWhenEgressIsClosed) {
  AIRLOCK_REQUIRE_GVISOR();
  HostListener listener;
  auto sandbox = acquire(spec());
  // No interface but loopback inside (gVisor may show none at all).
  const ExecResult links = sh(
      *sandbox, "tail -n +3 /proc/net/dev 2>/dev/null | cut -d: -f1 | tr -d ' ' | grep -v '^lo$'");
  EXPECT_EQ(links.stdout_bytes, "") << "interfaces besides lo: " << links.stdout_bytes;
  for (const auto& address : host_ipv4_addresses()) {
    const ExecResult tried =
        sh(*sandbox, "nc -w 2 " + address + " " + std::to_string(listener.port()) + " </dev/null");
    EXPECT_NE(tried.exit_code, 0) << "reached the host at " << address << ": "
                                  << tried.stdout_bytes;
  }
  EXPECT_EQ(listener.accepted(), 0) << "a guest connection reached the host listener";
}

// gVisor 20240729 lets a caller without CAP_MKNOD make device nodes; every command runs under
// the helper's filter, which refuses them — also to what a command leaves running behind it.
TEST_F(Isolation, NoGuestProcessCanMakeADeviceNode) {
  AIRLOCK_REQUIRE_GVISOR();
  auto sandbox = acquire(spec());
  const ExecResult status = sh(*sandbox, "grep -E '^Cap(Eff|Bnd):' /proc/self/status");
  EXPECT_NE(status.stdout_bytes.find("CapEff:\t0000000000000000"), std::string::npos)
      << status.stdout_bytes;
  EXPECT_NE(status.stdout_bytes.find("CapBnd:\t0000000000000000"), std::string::npos);
  const std::vector<std::string> nodes = {"mknod /tmp/null c 1 3", "mknod /tmp/tun c 10 200",
                                          "mknod /tmp/loop b 7 0",
                                          "mknod " + std::string(kWork) + "/null c 1 3"};
  for (const auto& node : nodes) {
    const ExecResult made = sh(*sandbox, node);
    EXPECT_NE(made.exit_code, 0) << node << " succeeded";
    EXPECT_NE(made.stderr_bytes.find("not permitted"), std::string::npos) << made.stderr_bytes;
  }
  // A detached process started by an earlier command is refused too (the filter is inherited).
  sh(*sandbox, "setsid sh -c 'sleep 1; mknod /tmp/late c 1 3; echo $? > /tmp/late.rc' "
               ">/dev/null 2>&1 &");
  std::string late;
  for (int attempt = 0; attempt < 40 && late.empty(); ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    late = sh(*sandbox, "cat /tmp/late.rc 2>/dev/null").stdout_bytes;
  }
  EXPECT_EQ(late, "1\n") << "the detached process made a device node (or never ran)";
  EXPECT_NE(sh(*sandbox, "test -e /tmp/late || test -e /tmp/null").exit_code, 0);
  // The control: what needs no capability still works.
  EXPECT_EQ(sh(*sandbox, "mkfifo /tmp/fifo && test -p /tmp/fifo && echo fifo").stdout_bytes,
            "fifo\n");
}

TEST_F(Isolation, ForkBombIsStoppedByPidsLimit) {
  AIRLOCK_REQUIRE_GVISOR();
  auto sandbox =
      acquire(spec("forkbomb", [](SandboxSpec::Fields& fields) { fields.resources.pids = 24; }));
  // Tries to start 200 sleepers, saying how many it has; the shell dies at the first fork
  // the limit refuses.
  const ExecResult bomb =
      sh(*sandbox, "n=0; while [ $n -lt 200 ]; do sleep 8 & n=$((n+1)); echo $n; done",
         std::chrono::seconds(60));
  EXPECT_NE(bomb.stderr_bytes.find("can't fork"), std::string::npos) << bomb.stderr_bytes;
  const auto last_line = bomb.stdout_bytes.rfind('\n', bomb.stdout_bytes.size() - 2);
  const int started =
      std::atoi(bomb.stdout_bytes.c_str() + (last_line == std::string::npos ? 0 : last_line + 1));
  EXPECT_GT(started, 5) << bomb.stdout_bytes;
  EXPECT_LT(started, 24) << "the pids limit did not stop the bomb";
  // The Sentry survived its guest's bomb: once the sleepers end, the sandbox serves again.
  std::string answer;
  for (int attempt = 0; attempt < 30 && answer != "alive\n"; ++attempt) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    try {
      answer = sh(*sandbox, "echo alive").stdout_bytes;
    } catch (const Error&) {
    }
  }
  EXPECT_EQ(answer, "alive\n");
}

TEST_F(Isolation, OutputFloodIsBoundedAndItsTreeKilled) {
  AIRLOCK_REQUIRE_GVISOR();
  auto sandbox = acquire(spec());
  ExecOptions options;
  options.working_directory = kWork;
  options.timeout = std::chrono::seconds(60);
  options.max_output_bytes = 1 << 20;
  try {
    sandbox->exec(Command::argv({"sh", "-c", "yes flood & yes flood >&2"}), options);
    ADD_FAILURE() << "an output flood was not refused";
  } catch (const ExecOutputLimitExceeded& error) {
    EXPECT_EQ(error.kill_confirmed(), std::optional<bool>(true));
  }
  EXPECT_EQ(sh(*sandbox, "pidof yes || echo none").stdout_bytes, "none\n");
  // Truncation keeps the head and kills nothing.
  options.overflow = OutputOverflow::truncate;
  options.max_output_bytes = 1000;
  const ExecResult cut = sandbox->exec(Command::argv({"sh", "-c", "seq 100000"}), options);
  EXPECT_TRUE(cut.truncated);
  EXPECT_EQ(cut.stdout_bytes.size(), 1000u);
  EXPECT_EQ(cut.stdout_bytes.substr(0, 4), "1\n2\n");
}

TEST_F(Isolation, TimeoutKillsTheWholeTreeAndConfirmsIt) {
  AIRLOCK_REQUIRE_GVISOR();
  auto sandbox = acquire(spec());
  ExecOptions options;
  options.working_directory = kWork;
  options.timeout = std::chrono::milliseconds(1500);
  try {
    // A child in its own session, one in the background, one in the foreground.
    sandbox->exec(Command::argv({"sh", "-c", "setsid sleep 300 & sleep 301 & sleep 302"}), options);
    ADD_FAILURE() << "the command outlived its timeout";
  } catch (const Timeout& error) {
    EXPECT_EQ(error.kill_confirmed(), std::optional<bool>(true));
  }
  EXPECT_EQ(sh(*sandbox, "pidof sleep || echo none").stdout_bytes, "none\n");
}

TEST_F(Isolation, CancellationStopsTheCommand) {
  AIRLOCK_REQUIRE_GVISOR();
  auto sandbox = acquire(spec());
  std::stop_source stop;
  ExecOptions options;
  options.working_directory = kWork;
  options.timeout = std::chrono::seconds(120);
  options.stop = stop.get_token();
  std::thread canceller([&stop] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    stop.request_stop();
  });
  const auto started = std::chrono::steady_clock::now();
  try {
    sandbox->exec(Command::argv({"sleep", "300"}), options);
    ADD_FAILURE() << "a cancelled command ran on";
  } catch (const Timeout& error) {
    EXPECT_EQ(std::string(error.what()).find("cancelled") != std::string::npos, true)
        << error.what();
  }
  canceller.join();
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(60));
  EXPECT_EQ(sh(*sandbox, "pidof sleep || echo none").stdout_bytes, "none\n");
}

// A daemon planted by the command — double-forked, in a session of its own, appending to a file
// for ever. After the error, either the kill is confirmed and the daemon is provably gone (the
// file stops growing, no such process is left), or the kill is not claimed.
std::string plant_daemon() {
  return "(setsid sh -c 'while :; do echo x >> planted.log; sleep 0.05; done' "
         "</dev/null >/dev/null 2>&1 &); "
         "while [ ! -s planted.log ]; do sleep 0.02; done; ";
}

class PlantedDaemon : public GvisorBackendTest {
 protected:
  static void expect_gone(Sandbox& sandbox, std::optional<bool> confirmed) {
    ASSERT_EQ(confirmed, std::optional<bool>(true)) << "the gvisor helper confirms every kill";
    const std::string first = sh(sandbox, "wc -c < planted.log").stdout_bytes;
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    EXPECT_EQ(sh(sandbox, "wc -c < planted.log").stdout_bytes, first)
        << "the planted daemon kept writing after a confirmed kill";
    EXPECT_EQ(sh(sandbox,
                 "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null | "
                 "grep -q 'planted[.]log' && echo alive; done; true")
                  .stdout_bytes,
              "");
  }
};

TEST_F(PlantedDaemon, IsGoneWhenATimeoutConfirmsTheKill) {
  AIRLOCK_REQUIRE_GVISOR();
  auto sandbox = acquire(spec());
  ExecOptions options;
  options.working_directory = kWork;
  options.timeout = std::chrono::milliseconds(3000);
  std::optional<bool> confirmed;
  try {
    sandbox->exec(Command::shell(plant_daemon() + "sleep 300"), options);
    ADD_FAILURE() << "the command outlived its timeout";
  } catch (const Timeout& error) {
    confirmed = error.kill_confirmed();
  }
  expect_gone(*sandbox, confirmed);
}

TEST_F(PlantedDaemon, IsGoneWhenAnOutputFloodConfirmsTheKill) {
  AIRLOCK_REQUIRE_GVISOR();
  auto sandbox = acquire(spec());
  ExecOptions options;
  options.working_directory = kWork;
  options.timeout = std::chrono::seconds(60);
  options.max_output_bytes = 64 * 1024;
  std::optional<bool> confirmed;
  try {
    sandbox->exec(Command::shell(plant_daemon() + "yes flood"), options);
    ADD_FAILURE() << "the flood was not refused";
  } catch (const ExecOutputLimitExceeded& error) {
    confirmed = error.kill_confirmed();
  }
  expect_gone(*sandbox, confirmed);
}

TEST_F(Isolation, OutputStreamsStdinIsLiveAndSignalsReachTheGroup) {
  AIRLOCK_REQUIRE_GVISOR();
  auto sandbox = acquire(spec());
  // Streaming: the first chunk arrives while the command still runs.
  ExecOptions streaming;
  streaming.working_directory = kWork;
  streaming.timeout = std::chrono::seconds(30);
  std::string out;
  std::optional<std::chrono::steady_clock::time_point> first;
  streaming.on_output = [&](OutputStream, std::string_view bytes) {
    if (!first) first = std::chrono::steady_clock::now();
    out += bytes;
  };
  const ExecResult streamed = sandbox->exec(Command::shell("echo a; sleep 1; echo b"), streaming);
  const auto ended = std::chrono::steady_clock::now();
  ASSERT_TRUE(first.has_value());
  EXPECT_GE(ended - *first, std::chrono::milliseconds(700));
  EXPECT_EQ(out, "a\nb\n");
  EXPECT_EQ(streamed.stdout_bytes, "");

  // Live stdin from a pipe written slowly.
  int ends[2];
  ASSERT_EQ(::pipe2(ends, O_CLOEXEC), 0);
  std::thread writer([&] {
    for (const std::string_view line : {"one\n", "two\n"}) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      (void)!::write(ends[1], line.data(), line.size());
    }
    ::close(ends[1]);
  });
  ExecOptions live;
  live.working_directory = kWork;
  live.timeout = std::chrono::seconds(30);
  live.stdin_fd = ends[0];
  const ExecResult echoed = sandbox->exec(Command::shell("cat; echo end"), live);
  writer.join();
  ::close(ends[0]);
  EXPECT_EQ(echoed.stdout_bytes, "one\ntwo\nend\n");

  // A forwarded SIGTERM ends the command with 143.
  auto control = std::make_shared<ExecControl>();
  ExecOptions controlled;
  controlled.working_directory = kWork;
  controlled.timeout = std::chrono::seconds(60);
  controlled.control = control;
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    control->signal(SIGTERM);
  });
  const ExecResult signalled = sandbox->exec(Command::argv({"sleep", "300"}), controlled);
  sender.join();
  EXPECT_EQ(signalled.exit_code, 143);
  EXPECT_EQ(signalled.term_signal, std::optional<int>(SIGTERM));

  // No terminal: said before anything runs.
  ExecOptions terminal;
  terminal.working_directory = kWork;
  terminal.terminal = WindowSize{24, 80};
  EXPECT_THROW(sandbox->exec(Command::shell("touch ran"), terminal), NotSupported);
  EXPECT_EQ(sh(*sandbox, "[ -e ran ] && echo ran; true").stdout_bytes, "");
}

}  // namespace
}  // namespace airlock::gvisor_backend::testing
