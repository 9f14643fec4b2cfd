// The live parts of exec: output streamed as it arrives, the caller's stdin forwarded while the
// command runs, a terminal, and signals and resizes in flight — and what a guest holding a host
// pty slave can and cannot reach with it.
#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <iostream>
#include <mutex>
#include <thread>

#include "airlock/errors.hpp"
#include "backends/linux/linux_backend.hpp"
#include "linux/fixture.hpp"

namespace airlock::linux_backend::testing {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

class StreamsTest : public LinuxBackendTest {
 protected:
  void SetUp() override {
    LinuxBackendTest::SetUp();
    if (IsSkipped()) return;
    sandbox_ = acquire(spec());
  }
  void TearDown() override {
    sandbox_.reset();
    LinuxBackendTest::TearDown();
  }
  ExecOptions options(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    ExecOptions result;
    result.working_directory = kWork;
    result.timeout = timeout;
    return result;
  }
  std::shared_ptr<LinuxSandbox> sandbox_;
};

// A pipe whose ends close with the test.
struct Pipe {
  Pipe() {
    int ends[2];
    if (::pipe2(ends, O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
    read_end = ends[0];
    write_end = ends[1];
  }
  ~Pipe() {
    close_read();
    close_write();
  }
  void close_read() {
    if (read_end >= 0) ::close(std::exchange(read_end, -1));
  }
  void close_write() {
    if (write_end >= 0) ::close(std::exchange(write_end, -1));
  }
  void write(std::string_view bytes) const {
    ASSERT_EQ(::write(write_end, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  }
  int read_end = -1;
  int write_end = -1;
};

TEST_F(StreamsTest, StreamedOutputArrivesBeforeTheCommandEnds) {
  ExecOptions streaming = options();
  std::vector<std::pair<OutputStream, std::string>> chunks;
  std::optional<Clock::time_point> first_chunk;
  streaming.on_output = [&](OutputStream stream, std::string_view bytes) {
    if (!first_chunk) first_chunk = Clock::now();
    chunks.emplace_back(stream, std::string(bytes));
  };
  const ExecResult result =
      sandbox_->exec(Command::shell("echo a; echo e >&2; sleep 1; echo b"), streaming);
  const auto ended = Clock::now();
  ASSERT_TRUE(first_chunk.has_value());
  EXPECT_GE(ended - *first_chunk, 700ms) << "the first chunk came only as the command ended";
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.stdout_bytes, "");
  EXPECT_EQ(result.stderr_bytes, "");
  std::string out;
  std::string err;
  for (const auto& [stream, bytes] : chunks) {
    (stream == OutputStream::stdout_stream ? out : err) += bytes;
  }
  EXPECT_EQ(out, "a\nb\n");
  EXPECT_EQ(err, "e\n");
}

TEST_F(StreamsTest, StreamingKeepsTheCeiling) {
  ExecOptions truncating = options();
  truncating.max_output_bytes = 1000;
  truncating.overflow = OutputOverflow::truncate;
  std::string delivered;
  truncating.on_output = [&](OutputStream, std::string_view bytes) { delivered += bytes; };
  const ExecResult result = sandbox_->exec(
      Command::shell("head -c 5000 /dev/zero | tr '\\0' a; echo; exit 3"), truncating);
  EXPECT_TRUE(result.truncated);
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_EQ(delivered, std::string(1000, 'a'));

  ExecOptions refusing = options();
  refusing.max_output_bytes = 1 << 20;
  std::uint64_t refused_delivered = 0;
  refusing.on_output = [&](OutputStream, std::string_view bytes) {
    refused_delivered += bytes.size();
  };
  const std::string flood = install_testcase(*sandbox_, "output_flood");
  try {
    sandbox_->exec(Command::argv({flood}), refusing);
    FAIL() << "the flood was not refused";
  } catch (const ExecOutputLimitExceeded& refused) {
    EXPECT_EQ(refused.kill_confirmed(), std::optional<bool>(true));
  }
  EXPECT_LE(refused_delivered, 1u << 20);
}

TEST_F(StreamsTest, StdinFromASlowlyWrittenPipeIsForwardedLive) {
  Pipe input;
  ExecOptions live = options();
  live.stdin_fd = input.read_end;
  std::string echoed;
  live.on_output = [&](OutputStream, std::string_view bytes) { echoed += bytes; };
  std::thread writer([&] {
    for (const std::string_view line : {"one\n", "two\n", "three\n"}) {
      std::this_thread::sleep_for(150ms);
      input.write(line);
    }
    input.close_write();
  });
  // Each line comes back before the next is written: `cat` sees them as they are sent.
  const ExecResult result = sandbox_->exec(Command::shell("cat; echo end"), live);
  writer.join();
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(echoed, "one\ntwo\nthree\nend\n");
}

TEST_F(StreamsTest, ACommandThatStopsReadingStdinDoesNotHangOrKillTheCaller) {
  Pipe input;
  ::fcntl(input.write_end, F_SETFL, O_NONBLOCK);
  ExecOptions live = options(std::chrono::seconds(20));
  live.stdin_fd = input.read_end;
  std::atomic<bool> stop_writing{false};
  std::thread writer([&] {
    const std::string block(65536, 'x');
    while (!stop_writing) {
      if (::write(input.write_end, block.data(), block.size()) < 0) {
        std::this_thread::sleep_for(5ms);
      }
    }
  });
  // The command closes its stdin while the caller keeps sending: the forwarder meets EPIPE,
  // which must neither SIGPIPE this process nor hold the call.
  const auto started = Clock::now();
  const ExecResult result =
      sandbox_->exec(Command::shell("exec </dev/null; sleep 1; echo done"), live);
  stop_writing = true;
  writer.join();
  EXPECT_EQ(result.stdout_bytes, "done\n");
  EXPECT_LT(Clock::now() - started, 15s);
}

TEST_F(StreamsTest, ControlSignalEndsACommandWithItsStatus) {
  auto control = std::make_shared<ExecControl>();
  ExecOptions controlled = options();
  controlled.control = control;
  std::thread sender([&] {
    std::this_thread::sleep_for(500ms);
    control->signal(SIGTERM);
  });
  const auto started = Clock::now();
  const ExecResult result = sandbox_->exec(Command::argv({"sleep", "30"}), controlled);
  sender.join();
  EXPECT_EQ(result.exit_code, 143);
  EXPECT_EQ(result.term_signal, std::optional<int>(SIGTERM));
  EXPECT_LT(Clock::now() - started, 10s);
  // A signal that is not forwardable is refused where it is asked for.
  EXPECT_THROW(control->signal(SIGSEGV), InvalidArgument);
  EXPECT_THROW(control->signal(SIGSTOP), InvalidArgument);
  EXPECT_THROW(control->signal(0), InvalidArgument);
}

TEST_F(StreamsTest, ASignalReachesTheWholeProcessGroupAndAHandlerSeesIt) {
  auto control = std::make_shared<ExecControl>();
  ExecOptions controlled = options();
  controlled.control = control;
  std::string out;
  bool sent = false;
  controlled.on_output = [&](OutputStream, std::string_view bytes) {
    out += bytes;
    if (!sent && out.find("ready") != std::string::npos) {
      sent = true;
      control->signal(SIGUSR1);
    }
  };
  const ExecResult result = sandbox_->exec(
      Command::shell("trap 'echo got-usr1; exit 9' USR1; echo ready; while :; do sleep 0.1; done"),
      controlled);
  EXPECT_EQ(result.exit_code, 9);
  EXPECT_NE(out.find("got-usr1"), std::string::npos) << out;
}

// Signals forwarded while the command is ending are still unread when the init answers and hangs
// up; the answer must reach the caller all the same, not turn into "the init stopped answering".
TEST_F(StreamsTest, SignalsRacingTheEndOfACommandDoNotLoseItsAnswer) {
  for (int round = 0; round < 20; ++round) {
    auto control = std::make_shared<ExecControl>();
    ExecOptions controlled = options();
    controlled.control = control;
    controlled.on_output = [&](OutputStream, std::string_view) {
      for (int i = 0; i < 8; ++i) control->signal(SIGUSR1);
    };
    const ExecResult result =
        sandbox_->exec(Command::shell("trap '' USR1; echo ready; exit 3"), controlled);
    ASSERT_EQ(result.exit_code, 3) << "round " << round;
  }
}

TEST_F(StreamsTest, ATerminalIsATtyOfTheSizeAsked) {
  ExecOptions on_terminal = options();
  on_terminal.terminal = WindowSize{40, 120};
  const ExecResult result = sandbox_->exec(
      Command::shell("[ -t 0 ] && [ -t 1 ] && [ -t 2 ] && echo tty; stty size; echo err >&2"),
      on_terminal);
  EXPECT_EQ(result.exit_code, 0);
  // A terminal's output is one stream, with the line discipline's CR LF.
  EXPECT_EQ(result.stdout_bytes, "tty\r\n40 120\r\nerr\r\n");
  EXPECT_EQ(result.stderr_bytes, "");
}

TEST_F(StreamsTest, AResizeIsSeenByTheGuest) {
  auto control = std::make_shared<ExecControl>();
  ExecOptions on_terminal = options();
  on_terminal.terminal = WindowSize{24, 80};
  on_terminal.control = control;
  std::string out;
  bool resized = false;
  on_terminal.on_output = [&](OutputStream, std::string_view bytes) {
    out += bytes;
    if (!resized && out.find("ready") != std::string::npos) {
      resized = true;
      control->resize(WindowSize{50, 132});
    }
  };
  const ExecResult result = sandbox_->exec(
      Command::shell("trap 'stty size; exit 0' WINCH; echo ready; while :; do sleep 0.1; done"),
      on_terminal);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_NE(out.find("50 132"), std::string::npos) << out;
}

TEST_F(StreamsTest, ControlCTypedIntoTheTerminalInterruptsTheCommand) {
  Pipe input;
  ExecOptions on_terminal = options();
  on_terminal.terminal = WindowSize{24, 80};
  on_terminal.stdin_fd = input.read_end;
  std::string out;
  bool typed = false;
  on_terminal.on_output = [&](OutputStream, std::string_view bytes) {
    out += bytes;
    if (!typed && out.find("go") != std::string::npos) {
      typed = true;
      input.write("\x03");
    }
  };
  const auto started = Clock::now();
  const ExecResult result = sandbox_->exec(Command::shell("echo go; exec sleep 30"), on_terminal);
  EXPECT_EQ(result.term_signal, std::optional<int>(SIGINT)) << out;
  EXPECT_EQ(result.exit_code, 130);
  EXPECT_LT(Clock::now() - started, 10s);
}

TEST_F(StreamsTest, TerminalInputEndsWithEndOfFile) {
  ExecOptions on_terminal = options(std::chrono::seconds(10));
  on_terminal.terminal = WindowSize{24, 80};
  on_terminal.stdin_bytes = "typed\n";
  const ExecResult result =
      sandbox_->exec(Command::shell("stty -echo; cat; echo end"), on_terminal);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_NE(result.stdout_bytes.find("typed\r\nend\r\n"), std::string::npos) << result.stdout_bytes;
}

TEST_F(StreamsTest, AGuestCannotInjectInputIntoItsTerminal) {
  ExecOptions on_terminal = options();
  on_terminal.terminal = WindowSize{24, 80};
  const ExecResult result =
      sandbox_->exec(Command::argv({"python3", "-c",
                                    "import fcntl, termios\n"
                                    "try:\n"
                                    "    fcntl.ioctl(0, termios.TIOCSTI, b'x')\n"
                                    "    print('injected')\n"
                                    "except OSError as e:\n"
                                    "    print('refused', e.errno)\n"
                                    "try:\n"
                                    "    fcntl.ioctl(0, termios.TIOCLINUX, b'\\x06')\n"
                                    "    print('linux-console')\n"
                                    "except OSError as e:\n"
                                    "    print('refused', e.errno)\n"}),
                     on_terminal);
  EXPECT_EQ(result.stdout_bytes, "refused 1\r\nrefused 1\r\n");
}

TEST_F(StreamsTest, AGuestReachesOnlyItsOwnTerminal) {
  // A host pty the guest was not given, open while the guest looks for it.
  const int other = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  ASSERT_GE(other, 0);
  ASSERT_EQ(::unlockpt(other), 0);
  int number = -1;
  ASSERT_EQ(::ioctl(other, TIOCGPTN, &number), 0);
  ExecOptions on_terminal = options();
  on_terminal.terminal = WindowSize{24, 80};
  const std::string probe =
      "ls -1 /dev/pts; "
      "cat /dev/pts/" +
      std::to_string(number) +
      " </dev/null >/dev/null 2>&1 && echo reached-other; "
      "own=$(readlink /proc/self/fd/0); echo \"own=$own\"; "
      "[ -e \"$own\" ] && echo own-path-exists; "
      "echo probe > /dev/tty && echo tty-is-own";
  const ExecResult result = sandbox_->exec(Command::shell(probe), on_terminal);
  ::close(other);
  const std::string& out = result.stdout_bytes;
  // The guest's devpts is its own instance: the host's ptys are not in it, only the guest's own
  // terminal (the first of that instance) is, and the path it is known by exists in the guest.
  EXPECT_EQ(out.rfind("0\r\nptmx\r\n", 0), 0u) << out;
  EXPECT_NE(out.find("own-path-exists"), std::string::npos) << out;
  EXPECT_EQ(out.find("reached-other"), std::string::npos) << out;
  EXPECT_NE(out.find("probe\r\ntty-is-own"), std::string::npos) << out;

  // Without a terminal, /dev/tty leads nowhere: no host terminal is any guest's.
  const ExecResult plain =
      sandbox_->exec(Command::shell("echo x > /dev/tty && echo reached-tty; true"), options());
  EXPECT_EQ(plain.stdout_bytes, "");
}

// A command that plants a daemon — double-forked, in a session of its own, appending to a file
// for ever — and then outlives its bound. After the error, either the kill is confirmed and the
// daemon is provably gone (the file stops growing, no such process is left), or it is not
// claimed at all.
class PlantedDaemon {
 public:
  static std::string plant() {
    return "(setsid sh -c 'while :; do echo x >> planted.log; sleep 0.02; done' "
           "</dev/null >/dev/null 2>&1 &); "
           "while [ ! -s planted.log ]; do sleep 0.01; done; ";
  }
  static void expect_gone_if_confirmed(Sandbox& sandbox, std::optional<bool> confirmed) {
    ExecOptions quick;
    quick.working_directory = kWork;
    quick.timeout = std::chrono::seconds(10);
    auto size = [&] {
      return sandbox.exec(Command::shell("wc -c < planted.log"), quick).stdout_bytes;
    };
    const std::string alive =
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null | "
        "grep -q 'planted[.]log' && echo alive; done; true";
    if (confirmed != std::optional<bool>(true)) {
      std::cout << "kill not claimed confirmed: the sandbox would be disposed\n";
      return;
    }
    const std::string first = size();
    std::this_thread::sleep_for(300ms);
    EXPECT_EQ(size(), first) << "the planted daemon kept writing after a confirmed kill";
    EXPECT_EQ(sandbox.exec(Command::shell(alive), quick).stdout_bytes, "");
  }
};

TEST_F(StreamsTest, APlantedDaemonIsGoneWhenATimeoutConfirmsTheKill) {
  std::optional<bool> confirmed;
  try {
    sandbox_->exec(Command::shell(PlantedDaemon::plant() + "sleep 30"), options(1500ms));
    FAIL() << "no timeout";
  } catch (const Timeout& timeout) {
    confirmed = timeout.kill_confirmed();
  }
  // With per-command cgroups (this host's v2) the kill is confirmed, and must be true.
  EXPECT_EQ(confirmed, std::optional<bool>(true));
  PlantedDaemon::expect_gone_if_confirmed(*sandbox_, confirmed);
}

TEST_F(StreamsTest, APlantedDaemonIsGoneWhenAnOutputFloodConfirmsTheKill) {
  ExecOptions bounded = options();
  bounded.max_output_bytes = 64 * 1024;
  std::optional<bool> confirmed;
  try {
    sandbox_->exec(Command::shell(PlantedDaemon::plant() + "yes flood"), bounded);
    FAIL() << "the flood was not refused";
  } catch (const ExecOutputLimitExceeded& refused) {
    confirmed = refused.kill_confirmed();
  }
  EXPECT_EQ(confirmed, std::optional<bool>(true));
  PlantedDaemon::expect_gone_if_confirmed(*sandbox_, confirmed);
}

TEST_F(StreamsTest, LiveExecsLeaveNoDescriptorsBehind) {
  // The sandbox's root descriptors, fetched once by its first terminal (or file) call and held
  // until disposal, are not a per-exec leak: fetched before counting.
  ExecOptions warm = options();
  warm.terminal = WindowSize{24, 80};
  ASSERT_EQ(sandbox_->exec(Command::argv({"true"}), warm).exit_code, 0);
  // So is the backend's standby monitor (one socket while it waits), made shortly after an
  // acquire: counted once it is there.
  auto* linux = dynamic_cast<LinuxBackend*>(backend_.get());
  ASSERT_NE(linux, nullptr);
  for (int attempt = 0; attempt < 200 && linux->ready_standby().empty(); ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::size_t before = open_descriptor_count();
  for (int round = 0; round < 3; ++round) {
    Pipe input;
    input.write("x\n");
    input.close_write();
    auto control = std::make_shared<ExecControl>();
    ExecOptions live = options();
    live.stdin_fd = input.read_end;
    live.terminal = WindowSize{24, 80};
    live.control = control;
    live.on_output = [](OutputStream, std::string_view) {};
    EXPECT_EQ(sandbox_->exec(Command::shell("cat"), live).exit_code, 0);
    ExecOptions timed = options(500ms);
    timed.terminal = WindowSize{24, 80};
    EXPECT_THROW(sandbox_->exec(Command::argv({"sleep", "30"}), timed), Timeout);
  }
  EXPECT_EQ(open_descriptor_count(), before);
}

TEST_F(StreamsTest, ContradictoryOptionsAreRefusedBeforeAnythingRuns) {
  ExecOptions both = options();
  both.stdin_bytes = "x";
  both.stdin_fd = 0;
  EXPECT_THROW(sandbox_->exec(Command::shell("touch ran"), both), InvalidArgument);
  EXPECT_EQ(sh(*sandbox_, "[ -e ran ] && echo ran; true").stdout_bytes, "");
}

}  // namespace
}  // namespace airlock::linux_backend::testing
