#include "backends/linux/init/egress_bridge.hpp"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace airlock::linux_backend::init {
namespace {

constexpr std::size_t kBufferSize = 64 * 1024;
constexpr std::size_t kMaxPairs = 256;

}  // namespace

// One bridged connection: two sockets and a buffer per direction. A direction whose source has
// ended is shut down on its sink once its buffer has drained; the pair ends when both have.
struct EgressBridge::Pair {
  struct Direction {
    int from = -1;
    int to = -1;
    std::string buffer;
    bool source_ended = false;
    bool shut = false;
  };
  int tcp = -1;
  int unix_socket = -1;
  bool connecting = true;
  Direction outward;  // guest → proxy
  Direction inward;   // proxy → guest
  bool dead = false;

  ~Pair() {
    if (tcp >= 0) ::close(tcp);
    if (unix_socket >= 0) ::close(unix_socket);
  }
  bool finished() const { return dead || (outward.shut && inward.shut); }
};

EgressBridge::EgressBridge() = default;
EgressBridge::~EgressBridge() {
  if (listener_ >= 0) ::close(listener_);
}

bool EgressBridge::start(int directory) {
  socket_path_ = "/proc/self/fd/" + std::to_string(directory) + "/" + kSocketName;
  listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listener_ < 0) return false;
  const int on = 1;
  ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  struct sockaddr_in address {};
  address.sin_family = AF_INET;
  address.sin_port = htons(kPort);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(listener_, reinterpret_cast<struct sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(listener_, 128) != 0) {
    const int error = errno;
    ::close(listener_);
    listener_ = -1;
    errno = error;
    return false;
  }
  return true;
}

std::size_t EgressBridge::poll_fd_count() const {
  return (listener_ >= 0 ? 1 : 0) + 2 * pairs_.size();
}

void EgressBridge::add_poll_fds(std::vector<struct pollfd>& fds) const {
  if (listener_ >= 0) fds.push_back({listener_, POLLIN, 0});
  for (const auto& pair : pairs_) {
    short tcp_events = 0;
    short unix_events = 0;
    if (pair->connecting) {
      unix_events |= POLLOUT;
    } else {
      if (!pair->outward.source_ended && pair->outward.buffer.size() < kBufferSize) tcp_events |= POLLIN;
      if (!pair->inward.source_ended && pair->inward.buffer.size() < kBufferSize) unix_events |= POLLIN;
      if (!pair->outward.buffer.empty()) unix_events |= POLLOUT;
      if (!pair->inward.buffer.empty()) tcp_events |= POLLOUT;
    }
    fds.push_back({pair->tcp, tcp_events, 0});
    fds.push_back({pair->unix_socket, unix_events, 0});
  }
}

void EgressBridge::accept_all() {
  for (;;) {
    const int client = ::accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (client < 0) return;
    if (pairs_.size() >= kMaxPairs) {
      ::close(client);
      continue;
    }
    auto pair = std::make_unique<Pair>();
    pair->tcp = client;
    pair->unix_socket = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (pair->unix_socket < 0) continue;
    struct sockaddr_un address {};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, socket_path_.c_str(), sizeof address.sun_path - 1);
    if (::connect(pair->unix_socket, reinterpret_cast<struct sockaddr*>(&address),
                  sizeof address) != 0 &&
        errno != EINPROGRESS && errno != EAGAIN) {
      continue;  // no proxy listening: the guest's connection is closed, egress stays shut
    }
    pair->outward.from = pair->tcp;
    pair->outward.to = pair->unix_socket;
    pair->inward.from = pair->unix_socket;
    pair->inward.to = pair->tcp;
    pairs_.push_back(std::move(pair));
  }
}

namespace {

// Reads what `direction.from` has into its buffer (up to the buffer size).
void read_into(int fd, std::string& buffer, bool& ended, bool& dead) {
  char chunk[16 * 1024];
  while (buffer.size() < kBufferSize) {
    const ssize_t got = ::read(fd, chunk, std::min(sizeof chunk, kBufferSize - buffer.size()));
    if (got > 0) {
      buffer.append(chunk, static_cast<std::size_t>(got));
      continue;
    }
    if (got == 0) {
      ended = true;
    } else if (errno != EAGAIN && errno != EINTR) {
      dead = true;
    }
    return;
  }
}

void write_from(int fd, std::string& buffer, bool& dead) {
  while (!buffer.empty()) {
    const ssize_t sent = ::send(fd, buffer.data(), buffer.size(), MSG_NOSIGNAL);
    if (sent > 0) {
      buffer.erase(0, static_cast<std::size_t>(sent));
      continue;
    }
    if (sent < 0 && errno != EAGAIN && errno != EINTR) dead = true;
    return;
  }
}

}  // namespace

void EgressBridge::handle(const struct pollfd* fds, std::size_t count) {
  std::size_t index = 0;
  if (listener_ >= 0) {
    if (index < count && (fds[index].revents & POLLIN) != 0) accept_all();
    ++index;
  }
  // Pairs accepted just now were not polled; only the first `polled` pairs have results.
  const std::size_t polled = (count - index) / 2;
  for (std::size_t i = 0; i < polled && i < pairs_.size(); ++i) {
    Pair& pair = *pairs_[i];
    const short tcp_revents = fds[index + 2 * i].revents;
    const short unix_revents = fds[index + 2 * i + 1].revents;
    if (pair.connecting) {
      if ((unix_revents & (POLLOUT | POLLERR | POLLHUP)) != 0) {
        int error = 0;
        socklen_t length = sizeof error;
        ::getsockopt(pair.unix_socket, SOL_SOCKET, SO_ERROR, &error, &length);
        if (error != 0) {
          pair.dead = true;
          continue;
        }
        pair.connecting = false;
      } else {
        continue;
      }
    }
    if ((tcp_revents & (POLLIN | POLLHUP | POLLERR)) != 0 && !pair.outward.source_ended) {
      read_into(pair.tcp, pair.outward.buffer, pair.outward.source_ended, pair.dead);
    }
    if ((unix_revents & (POLLIN | POLLHUP | POLLERR)) != 0 && !pair.inward.source_ended) {
      read_into(pair.unix_socket, pair.inward.buffer, pair.inward.source_ended, pair.dead);
    }
    write_from(pair.unix_socket, pair.outward.buffer, pair.dead);
    write_from(pair.tcp, pair.inward.buffer, pair.dead);
    for (Pair::Direction* direction : {&pair.outward, &pair.inward}) {
      if (direction->source_ended && direction->buffer.empty() && !direction->shut) {
        ::shutdown(direction->to, SHUT_WR);
        direction->shut = true;
      }
    }
  }
  pairs_.erase(std::remove_if(pairs_.begin(), pairs_.end(),
                              [](const auto& pair) { return pair->finished(); }),
               pairs_.end());
}

}  // namespace airlock::linux_backend::init
