#include "daemon/listeners.hpp"

#include <arpa/inet.h>
#include <grp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <utility>
#include <vector>

#include "airlock/errors.hpp"
#include "base/syscall_error.hpp"
#include "base/unique_fd.hpp"

namespace airlock::daemon {
namespace {

[[noreturn]] void fail(const std::string& what, int error, const std::string& path = {}) {
  throw SystemError(what + ": " + base::errno_text(error), error, path);
}

sockaddr_un unix_address(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    throw InvalidArgument("--socket: a unix socket path must be 1 to " +
                              std::to_string(sizeof(address.sun_path) - 1) + " bytes long",
                          "socket");
  }
  if (path.find('\0') != std::string::npos) {
    throw InvalidArgument("--socket: the path contains a NUL byte", "socket");
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  return address;
}

// Whether something accepts connections on the socket at `path`.
bool socket_is_live(const sockaddr_un& address) {
  base::UniqueFd probe(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!probe) return false;
  return connect(probe.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
}

}  // namespace

int bind_unix_socket(const std::string& path, mode_t mode, std::optional<gid_t> group) {
  const sockaddr_un address = unix_address(path);
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code error;
    std::filesystem::create_directories(parent, error);
    if (error) fail("cannot create the socket's directory", error.value(), parent.string());
  }
  struct stat existing {};
  if (lstat(path.c_str(), &existing) == 0) {
    if (!S_ISSOCK(existing.st_mode)) {
      throw InvalidArgument("--socket: '" + path +
                                "' exists and is not a socket; refusing to "
                                "replace it",
                            "socket");
    }
    if (socket_is_live(address)) {
      throw InvalidArgument("--socket: another server is accepting connections on '" + path + "'",
                            "socket");
    }
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      fail("cannot remove the stale socket", errno, path);
    }
  }
  base::UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) fail("cannot create a unix socket", errno);
  // Created owner-only whatever the process umask is, then widened to exactly `mode`: there is
  // no moment at which a wider mode than asked for exists.
  const mode_t previous = umask(0177);
  const int bound = bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address);
  const int bind_error = errno;
  umask(previous);
  if (bound != 0) fail("cannot bind the unix socket", bind_error, path);
  if (group && chown(path.c_str(), static_cast<uid_t>(-1), *group) != 0) {
    const int error = errno;
    unlink(path.c_str());
    fail("cannot give the socket its group", error, path);
  }
  if (chmod(path.c_str(), mode) != 0) {
    const int error = errno;
    unlink(path.c_str());
    fail("cannot set the socket's mode", error, path);
  }
  if (listen(fd.get(), 256) != 0) {
    const int error = errno;
    unlink(path.c_str());
    fail("cannot listen on the unix socket", error, path);
  }
  return fd.release();
}

void unlink_unix_socket(const std::string& path, dev_t device, ino_t inode) noexcept {
  struct stat current {};
  if (lstat(path.c_str(), &current) != 0) return;
  // Another daemon may have taken the path over since; its socket is not ours to remove.
  if (current.st_dev != device || current.st_ino != inode) return;
  unlink(path.c_str());
}

TcpListener bind_tcp_socket(const std::string& host_port) {
  std::string host;
  std::string port;
  if (!host_port.empty() && host_port.front() == '[') {
    const auto close_bracket = host_port.find(']');
    if (close_bracket == std::string::npos || close_bracket + 1 >= host_port.size() ||
        host_port[close_bracket + 1] != ':') {
      throw InvalidArgument("--tcp: expected [IPV6]:PORT, got \"" + host_port + "\"", "tcp");
    }
    host = host_port.substr(1, close_bracket - 1);
    port = host_port.substr(close_bracket + 2);
  } else {
    const auto colon = host_port.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      throw InvalidArgument("--tcp: expected HOST:PORT, got \"" + host_port + "\"", "tcp");
    }
    host = host_port.substr(0, colon);
    port = host_port.substr(colon + 1);
  }
  if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos ||
      port.size() > 5 || std::stoul(port) > 65535) {
    throw InvalidArgument("--tcp: the port must be a number from 0 to 65535", "tcp");
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int status = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); status != 0) {
    throw InvalidArgument("--tcp: cannot resolve \"" + host + "\": " + gai_strerror(status), "tcp");
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> addresses(found, &freeaddrinfo);
  int last_error = 0;
  for (addrinfo* candidate = found; candidate; candidate = candidate->ai_next) {
    base::UniqueFd fd(socket(candidate->ai_family, candidate->ai_socktype | SOCK_CLOEXEC,
                             candidate->ai_protocol));
    if (!fd) {
      last_error = errno;
      continue;
    }
    const int on = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (bind(fd.get(), candidate->ai_addr, candidate->ai_addrlen) != 0 ||
        listen(fd.get(), 256) != 0) {
      last_error = errno;
      continue;
    }
    sockaddr_storage bound{};
    socklen_t length = sizeof bound;
    getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &length);
    char text[INET6_ADDRSTRLEN] = {};
    std::uint16_t bound_port = 0;
    TcpListener listener;
    if (bound.ss_family == AF_INET6) {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&bound);
      inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
      bound_port = ntohs(v6->sin6_port);
      listener.address = "[" + std::string(text) + "]:" + std::to_string(bound_port);
    } else {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(&bound);
      inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
      bound_port = ntohs(v4->sin_port);
      listener.address = std::string(text) + ":" + std::to_string(bound_port);
    }
    listener.fd = fd.release();
    return listener;
  }
  fail("cannot listen on " + host_port, last_error);
}

gid_t resolve_group(const std::string& name) {
  if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos) {
    return static_cast<gid_t>(std::stoul(name));
  }
  std::vector<char> buffer(16384);
  group entry{};
  group* result = nullptr;
  if (getgrnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &result) != 0 || !result) {
    throw InvalidArgument("--socket-group: no group named \"" + name + "\"", "socket-group");
  }
  return result->gr_gid;
}

}  // namespace airlock::daemon
