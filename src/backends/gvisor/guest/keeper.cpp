// PID 1 of every gvisor container: reap, and (allowlist) bridge loopback TCP to the proxy socket.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "backends/gvisor/guest/run.hpp"
#include "backends/gvisor/guest/walk.hpp"
#include "backends/gvisor/guest_protocol.hpp"

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

int connect_unix(const std::string& path) {
  const int sock = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sock < 0) return -1;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path) {
    ::close(sock);
    return -1;
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  if (::connect(sock, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(sock);
    return -1;
  }
  return sock;
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

}  // namespace

int keep(const std::string& workdir, const std::string& bridge_socket, int bridge_port) {
  sigset_t all;
  sigfillset(&all);
  ::sigprocmask(SIG_BLOCK, &all, nullptr);
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
  for (;;) {
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    if (listener < 0) {
      siginfo_t info{};
      ::sigwaitinfo(&all, &info);
      continue;
    }
    pollfd watch{listener, POLLIN, 0};
    if (::poll(&watch, 1, 1000) <= 0) continue;
    const int client = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    const pid_t worker = ::fork();
    if (worker == 0) {
      const int upstream = connect_unix(bridge_socket);
      if (upstream >= 0) relay(client, upstream);
      ::_exit(0);
    }
    ::close(client);
  }
}

}  // namespace airlock::gvisor_guest
