#include "backends/kit/guest/serve.hpp"

#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backends/kit/guest/channel_frames.hpp"
#include "backends/kit/guest/file_protocol.hpp"
#include "backends/kit/guest/process_tree.hpp"

namespace airlock::guest_kit {
namespace {

struct PipeEnds {
  int read = -1;
  int write = -1;
};

bool make_pipe(PipeEnds& ends) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  ends.read = fds[0];
  ends.write = fds[1];
  return true;
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

void set_nonblocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// Reads frames until the request; anything else first, or a malformed request, ends it. What
// followed the request in the same reads (stdin, say) stays in `reader`.
bool read_request(int connection, FrameReader& reader, ChannelRequest& request) {
  char buffer[4096];
  for (;;) {
    char type = 0;
    std::string payload;
    if (reader.next(type, payload)) return type == kRequest && decode_request(payload, request);
    if (reader.failed()) return false;
    const ssize_t got = ::read(connection, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    reader.feed(buffer, static_cast<std::size_t>(got));
  }
}

// Why a command could not start, as its vfork child reports it.
enum StartStage : int {
  kStartChdir = 1,
  kStartExec = 2,
  kStartFilter = 3,
  kStartCapabilities = 4
};

// The highest capability the guest's kernel knows (read before the vfork: the child allocates
// nothing).
int last_capability() {
  const int fd = ::open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC);
  char text[16] = {};
  const ssize_t got = fd >= 0 ? ::read(fd, text, sizeof text - 1) : -1;
  if (fd >= 0) ::close(fd);
  const int value = got > 0 ? std::atoi(text) : -1;
  return value > 0 && value < 64 ? value : 63;
}

// Empties the bounding, ambient, inheritable, permitted and effective sets. A command of a guest
// whose agent runs as root (the microvm init) would otherwise exec with every capability of the
// guest's kernel: an empty bounding set leaves root's execve nothing to grant. A capability
// already outside the bounding set needs no CAP_SETPCAP to stay out (the gvisor keeper holds
// none to drop). Returns 0 or the errno of the failed step.
int drop_capabilities(int last) noexcept {
  for (int capability = 0; capability <= last; ++capability) {
    const int held = ::prctl(PR_CAPBSET_READ, capability, 0, 0, 0);
    if (held < 0 && errno == EINVAL) break;  // past what this kernel knows
    if (held == 1 && ::prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0) return errno;
  }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) {
    return errno;
  }
  __user_cap_header_struct header{};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  return ::syscall(SYS_capset, &header, data) != 0 ? errno : 0;
}

// Everything the vfork child needs, prepared before the vfork: the child only makes system
// calls, then execs (or reports why it could not, and _exits).
struct Start {
  char* const* argv;
  const char* cwd;  // nullptr: stay in "/"
  std::vector<sock_filter>* filter;
  bool new_session;
  int last_capability;  // -1: keep the agent's capabilities (the file plane's own code)
  int sources[3];       // stdin, stdout, stderr
  int report;      // write end, close-on-exec: silent on success
};

[[noreturn]] void start_child(const Start& start) {
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // Every source is first moved above the targets, so no dup2 onto 0–2 clobbers another.
  int moved[3];
  for (int target = 0; target < 3; ++target) {
    moved[target] = ::fcntl(start.sources[target], F_DUPFD_CLOEXEC, 16);
  }
  for (int target = 0; target < 3; ++target) ::dup2(moved[target], target);
  int failure[2] = {0, 0};
  if (start.new_session) ::setsid();
  int dropped = 0;
  if (start.last_capability >= 0 && (dropped = drop_capabilities(start.last_capability)) != 0) {
    failure[0] = dropped;
    failure[1] = kStartCapabilities;
  } else if (start.filter != nullptr && !apply_filter(*start.filter)) {
    failure[0] = errno;
    failure[1] = kStartFilter;
  } else if (start.cwd != nullptr && !enter_directory(start.cwd)) {
    failure[0] = errno;
    failure[1] = kStartChdir;
  } else {
    ::execvp(start.argv[0], start.argv);
    failure[0] = errno;
    failure[1] = kStartExec;
  }
  (void)!::write(start.report, failure, sizeof failure);
  ::_exit(127);
}

}  // namespace

void serve_command(int connection, int claimed) {
  // The command's orphans become ours, so a kill reaches the whole tree.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  // Children are noticed through a signalfd, which sees SIGCHLD only while it is blocked: the
  // handler blocks it itself rather than trust the mask its agent forked it with.
  sigset_t child_only;
  sigemptyset(&child_only);
  sigaddset(&child_only, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &child_only, nullptr);
  ChannelRequest request;
  FrameReader reader;
  const bool asked = read_request(connection, reader, request);
  // No longer idle, whichever way: the agent makes another handler.
  if (claimed >= 0) {
    (void)!::write(claimed, "c", 1);
    ::close(claimed);
  }
  if (!asked) ::_exit(1);

  for (const auto& entry : request.environment) {
    const auto equals = entry.find('=');
    ::setenv(entry.substr(0, equals).c_str(), entry.substr(equals + 1).c_str(), 1);
  }
  std::vector<char*> arguments;
  for (const auto& argument : request.argv)
    arguments.push_back(const_cast<char*>(argument.c_str()));
  arguments.push_back(nullptr);
  std::vector<sock_filter> filter = device_node_filter();

  PipeEnds in, out, err, report;
  const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  bool made = null >= 0 && make_pipe(out) && make_pipe(err) && make_pipe(report);
  if (made && request.feed_stdin) made = make_pipe(in);
  const int children = ::signalfd(-1, &child_only, SFD_CLOEXEC | SFD_NONBLOCK);
  if (!made || children < 0) {
    (void)write_all(connection, frame(kStatus, "error " + std::to_string(errno) + " pipe\n") +
                                    frame(kDone, "127"));
    ::_exit(1);
  }
  // The file plane's subcommands run as they are (no session, no filter: they are our own
  // code); a command is a session leader under the device filter.
  const Start start{arguments.data(),
                    request.cwd.empty() ? nullptr : request.cwd.c_str(),
                    request.direct ? nullptr : &filter,
                    !request.direct,
                    request.direct ? -1 : last_capability(),
                    {in.read >= 0 ? in.read : null, out.write, err.write},
                    report.write};
  // vfork: no address space is copied (in gVisor a copy is the dearest part of a fork); the
  // child makes system calls only, then execs.
  const pid_t leader = ::vfork();
  if (leader == 0) start_child(start);
  const int start_errno = errno;
  close_fd(in.read);
  close_fd(out.write);
  close_fd(err.write);
  close_fd(report.write);
  ::close(null);
  int failure[2] = {0, 0};
  ssize_t got;
  do {
    got = leader > 0 ? ::read(report.read, failure, sizeof failure) : -1;
  } while (got < 0 && errno == EINTR);
  close_fd(report.read);
  if (leader < 0 || got == static_cast<ssize_t>(sizeof failure)) {
    if (leader > 0) ::waitpid(leader, nullptr, 0);
    const int error = leader < 0 ? start_errno : failure[0];
    const std::string what = leader < 0                   ? std::string(" fork")
                             : failure[1] == kStartChdir  ? " chdir " + request.cwd
                             : failure[1] == kStartFilter ? std::string(" seccomp")
                             : failure[1] == kStartCapabilities
                                 ? std::string(" drop capabilities")
                                 : " exec " + request.argv[0];
    (void)write_all(connection, frame(kStatus, "error " + std::to_string(error) + what + "\n") +
                                    frame(kDone, "127"));
    ::_exit(0);
  }
  for (const int fd : {out.read, err.read, in.write}) {
    if (fd >= 0) set_nonblocking(fd);
  }

  std::string stdin_pending;
  bool stdin_ending = false;
  bool connection_open = true;
  bool ended = false;  // the leader is reaped, or the tree was killed
  bool done_sent = false;
  int exit_code = 127;
  std::string status_line;
  const auto kill_command = [&] {
    if (ended) return;
    if (request.direct) {
      ::kill(leader, SIGKILL);
      ::waitpid(leader, nullptr, 0);
      exit_code = 137;
      status_line.clear();
    } else {
      const long killed = kill_tree(leader);
      exit_code = 137;
      status_line = killed >= 0 ? "killed " + std::to_string(killed) + "\n" : std::string();
    }
    ended = true;
  };
  // Acts on every whole frame the host has sent so far.
  const auto process_frames = [&] {
    char type = 0;
    std::string payload;
    while (connection_open && reader.next(type, payload)) {
      if (type == kStdin) {
        if (in.write >= 0) {
          stdin_pending += payload;
        } else {
          // Nowhere to go (no stdin, or the command closed it): taken all the same, so the
          // host's window never stalls.
          (void)write_all(connection, frame(kStdinTaken, std::to_string(payload.size())));
        }
      } else if (type == kStdinEnd) {
        stdin_ending = true;
      } else if (type == kSignal && payload.size() == 1 && !request.direct) {
        const int number = static_cast<unsigned char>(payload[0]);
        // The host sends only forwardable signals; the bound keeps a bad byte harmless.
        if (!ended && number > 0 && number < 65) ::kill(-leader, number);
      } else if (type == kKill) {
        kill_command();
      } else {
        connection_open = false;  // out of protocol: ends it as a hang-up would
        kill_command();
      }
    }
    if (reader.failed()) {
      connection_open = false;
      kill_command();
    }
  };
  char buffer[65536];
  for (;;) {
    process_frames();
    if (stdin_ending && stdin_pending.empty()) close_fd(in.write);
    if (ended && !done_sent) {
      std::string message;
      if (!status_line.empty()) message = frame(kStatus, status_line);
      message += frame(kDone, std::to_string(exit_code));
      if (connection_open) (void)write_all(connection, message);
      done_sent = true;
    }
    if (done_sent && out.read < 0 && err.read < 0) break;
    if (!connection_open && ended) break;
    pollfd watch[5] = {{connection_open ? connection : -1, POLLIN, 0},
                       {out.read, POLLIN, 0},
                       {err.read, POLLIN, 0},
                       {stdin_pending.empty() ? -1 : in.write, POLLOUT, 0},
                       {ended ? -1 : children, POLLIN, 0}};
    if (::poll(watch, 5, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if ((watch[4].revents & POLLIN) != 0) {
      signalfd_siginfo info;
      while (::read(children, &info, sizeof info) > 0) {
      }
      int wait_status = 0;
      pid_t reaped;
      // Orphans of the command, adopted as subreaper, are reaped and forgotten.
      while (!ended && (reaped = ::waitpid(-1, &wait_status, WNOHANG)) > 0) {
        if (reaped != leader) continue;
        ended = true;
        if (WIFSIGNALED(wait_status)) {
          exit_code = 128 + WTERMSIG(wait_status);
          status_line = "signal " + std::to_string(WTERMSIG(wait_status)) + "\n";
        } else {
          exit_code = WEXITSTATUS(wait_status);
          status_line = "exit " + std::to_string(exit_code) + "\n";
        }
        if (request.direct) status_line.clear();
      }
    }
    if ((watch[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      const ssize_t read = ::read(connection, buffer, sizeof buffer);
      if (read > 0) {
        reader.feed(buffer, static_cast<std::size_t>(read));
      } else if (read == 0 || (errno != EINTR && errno != EAGAIN)) {
        // The host is gone or gave up: nothing of the command may outlive its caller.
        connection_open = false;
        kill_command();
        close_fd(in.write);
      }
    }
    if (in.write >= 0 && !stdin_pending.empty() &&
        (watch[3].revents & (POLLOUT | POLLERR | POLLHUP)) != 0) {
      const ssize_t wrote = ::write(in.write, stdin_pending.data(), stdin_pending.size());
      std::size_t taken = 0;
      if (wrote > 0) {
        taken = static_cast<std::size_t>(wrote);
        stdin_pending.erase(0, taken);
      } else if (wrote < 0 && errno != EAGAIN && errno != EINTR) {
        // EPIPE: the command closed its stdin; what is left is dropped (and counted as taken).
        taken = stdin_pending.size();
        stdin_pending.clear();
        close_fd(in.write);
      }
      if (taken > 0 && connection_open) {
        (void)write_all(connection, frame(kStdinTaken, std::to_string(taken)));
      }
    }
    for (int index = 1; index <= 2; ++index) {
      int& stream = index == 1 ? out.read : err.read;
      if (stream < 0 || (watch[index].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t read = ::read(stream, buffer, sizeof buffer);
      if (read > 0) {
        if (connection_open &&
            !write_all(connection,
                       frame(index == 1 ? kStdout : kStderr,
                             std::string_view(buffer, static_cast<std::size_t>(read))))) {
          connection_open = false;
          kill_command();
        }
      } else if (read == 0 || (errno != EAGAIN && errno != EINTR)) {
        close_fd(stream);
      }
    }
  }
  kill_command();
  ::_exit(0);
}

}  // namespace airlock::guest_kit
