// PID 1 of every gvisor container: reap, serve the host's commands over the control channel, and
// (allowlist) bridge loopback TCP to the proxy socket.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "backends/gvisor/guest/run.hpp"
#include "backends/gvisor/guest_protocol.hpp"
#include "backends/gvisor/unix_path.hpp"
#include "backends/kit/guest/channel_frames.hpp"
#include "backends/kit/guest/serve.hpp"
#include "backends/kit/guest/walk.hpp"

namespace airlock::gvisor_guest {
namespace {

int listen_loopback(int port) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) return -1;
  const int one = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(listener, 64) != 0) {
    ::close(listener);
    return -1;
  }
  return listener;
}

// Copies both ways until both directions are done, relaying half-closes.
void relay(int a, int b) {
  std::vector<char> buffer(64 * 1024);
  bool a_open = true;
  bool b_open = true;
  while (a_open || b_open) {
    pollfd fds[2] = {{a, static_cast<short>(a_open ? POLLIN : 0), 0},
                     {b, static_cast<short>(b_open ? POLLIN : 0), 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    for (int side = 0; side < 2; ++side) {
      const int from = side == 0 ? a : b;
      const int to = side == 0 ? b : a;
      bool& open = side == 0 ? a_open : b_open;
      if (!open || (fds[side].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t got = ::read(from, buffer.data(), buffer.size());
      if (got <= 0) {
        if (got < 0 && errno == EINTR) continue;
        open = false;
        ::shutdown(to, SHUT_WR);
        continue;
      }
      std::size_t done = 0;
      while (done < static_cast<std::size_t>(got)) {
        const ssize_t wrote =
            ::write(to, buffer.data() + done, static_cast<std::size_t>(got) - done);
        if (wrote < 0 && errno == EINTR) continue;
        if (wrote <= 0) return;
        done += static_cast<std::size_t>(wrote);
      }
    }
  }
}

// Reads the token from stdin (a pipe the shepherd filled and closed), then puts /dev/null there.
std::string take_token() {
  std::string token;
  char buffer[128];
  for (;;) {
    const ssize_t got = ::read(0, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0 || token.size() > 256) break;
    token.append(buffer, static_cast<std::size_t>(got));
  }
  return token;
}

// How many connections wait for the host's next commands at once.
constexpr std::size_t kIdleConnections = 2;

}  // namespace

int keep(const std::string& workdir, const std::string& bridge_socket, int bridge_port,
         const std::string& control_socket) {
  sigset_t all;
  sigfillset(&all);
  ::sigprocmask(SIG_BLOCK, &all, nullptr);
  // Not dumpable, nor is any handler forked from here: no guest process may read the token from
  // our memory or take a connection through /proc/1/fd.
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  const std::string token = control_socket.empty() ? std::string() : take_token();
  if (!control_socket.empty() && token.size() != kTokenLength) {
    std::fprintf(stderr, "airlock-gvisor-guest: keeper: no token on stdin\n");
    return 1;
  }
  // Our stdio is runsc's: the token pipe, and the host's runsc.log. gVisor lets any guest
  // process open /proc/1/fd/<n> (the dumpable flag guards our memory, not our descriptors), so
  // a guest could write the host's log without bound. /dev/null goes in their place before any
  // command runs.
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  for (int fd = 0; fd <= 2 && null >= 0; ++fd) ::dup2(null, fd);
  if (null > 2) ::close(null);
  if (!workdir.empty()) {
    std::vector<std::string> components;
    Failure failure;
    if (split_absolute(workdir, components, failure)) {
      open_directory(components, components.size(), true, failure);
    }
  }
  // Said once the work dir is made (or could not be): an exec that raced the start waits for it.
  ::prctl(PR_SET_NAME, kKeeperReadyName, 0, 0, 0);
  int listener = -1;
  if (!bridge_socket.empty()) listener = listen_loopback(bridge_port);
  sigset_t child_only;
  sigemptyset(&child_only);
  sigaddset(&child_only, SIGCHLD);
  const int children = ::signalfd(-1, &child_only, SFD_CLOEXEC | SFD_NONBLOCK);
  const std::string hello = frame(kToken, token);
  // Each idle connection has its handler forked already, so a command pays no fork of ours; a
  // handler says on `claimed` when it stops being idle.
  int claimed[2] = {-1, -1};
  if (!control_socket.empty() && ::pipe2(claimed, O_CLOEXEC | O_NONBLOCK) != 0) return 1;
  std::size_t idle = 0;
  int dial_wait_ms = 0;  // grows while the host's socket refuses us, or forks fail
  for (;;) {
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    while (!control_socket.empty() && idle < kIdleConnections) {
      const int connection = connect_unix_path(control_socket);
      const pid_t handler =
          connection >= 0 && write_all(connection, hello) ? ::fork() : static_cast<pid_t>(-1);
      if (handler == 0) {
        if (children >= 0) ::close(children);
        if (listener >= 0) ::close(listener);
        ::close(claimed[0]);
        serve_command(connection, claimed[1]);
      }
      if (connection >= 0) ::close(connection);
      if (handler < 0) {
        // The host's socket refused us, or the sandbox's pids limit is reached: try again
        // later; a host waiting for a command waits for that (or its own deadline).
        dial_wait_ms = std::min(1000, dial_wait_ms == 0 ? 10 : dial_wait_ms * 2);
        break;
      }
      dial_wait_ms = 0;
      ++idle;
    }
    pollfd watch[3] = {{children, POLLIN, 0}, {listener, POLLIN, 0}, {claimed[0], POLLIN, 0}};
    const int timeout = dial_wait_ms > 0 ? dial_wait_ms : (children < 0 ? 1000 : -1);
    if (::poll(watch, 3, timeout) <= 0) continue;
    if ((watch[0].revents & POLLIN) != 0) {
      signalfd_siginfo info;
      while (::read(children, &info, sizeof info) > 0) {
      }
    }
    if ((watch[2].revents & POLLIN) != 0) {
      char bytes[64];
      ssize_t got;
      while ((got = ::read(claimed[0], bytes, sizeof bytes)) > 0) {
        idle -= std::min(idle, static_cast<std::size_t>(got));
      }
    }
    if ((watch[1].revents & POLLIN) != 0) {
      const int client = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (client >= 0) {
        const pid_t worker = ::fork();
        if (worker == 0) {
          const int upstream = connect_unix_path(bridge_socket);
          if (upstream >= 0) relay(client, upstream);
          ::_exit(0);
        }
        ::close(client);
      }
    }
  }
}

}  // namespace airlock::gvisor_guest
