// Binding and connecting unix stream sockets by path, whatever the path's length: a path too
// long for sun_path is reached through its directory, opened O_PATH and named as
// /proc/self/fd/<n>/<name>. Used by the shepherd (host) and the keeper (guest) alike.
#pragma once

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace airlock::gvisor_guest {

namespace unix_path_detail {

// Fills `address` for `path`; `directory` receives the O_PATH descriptor a long path needed
// (the caller closes it once the call is made). False when no address can name it.
inline bool address_for(const std::string& path, sockaddr_un& address, int& directory) {
  directory = -1;
  address = {};
  address.sun_family = AF_UNIX;
  std::string name = path;
  if (path.size() >= sizeof address.sun_path) {
    const auto slash = path.rfind('/');
    if (slash == std::string::npos || slash == 0) return false;
    directory = ::open(path.substr(0, slash).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (directory < 0) return false;
    name = "/proc/self/fd/" + std::to_string(directory) + path.substr(slash);
    if (name.size() >= sizeof address.sun_path) {
      ::close(directory);
      directory = -1;
      errno = ENAMETOOLONG;
      return false;
    }
  }
  std::memcpy(address.sun_path, name.c_str(), name.size() + 1);
  return true;
}

}  // namespace unix_path_detail

// A listening socket at `path` (replacing nothing: an existing file fails with EADDRINUSE).
inline int listen_unix(const std::string& path, int backlog) {
  sockaddr_un address;
  int directory = -1;
  if (!unix_path_detail::address_for(path, address, directory)) return -1;
  const int sock = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int error = errno;
  bool ok = sock >= 0 && ::bind(sock, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
            ::listen(sock, backlog) == 0;
  if (!ok) error = errno;
  if (directory >= 0) ::close(directory);
  if (!ok) {
    if (sock >= 0) ::close(sock);
    errno = error;
    return -1;
  }
  return sock;
}

// A connected socket to `path`; `flags` adds SOCK_NONBLOCK and the like to SOCK_CLOEXEC.
inline int connect_unix_path(const std::string& path, int flags = 0) {
  sockaddr_un address;
  int directory = -1;
  if (!unix_path_detail::address_for(path, address, directory)) return -1;
  const int sock = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);
  int error = errno;
  bool ok = sock >= 0;
  if (ok) {
    int result;
    do {
      result = ::connect(sock, reinterpret_cast<sockaddr*>(&address), sizeof address);
    } while (result != 0 && errno == EINTR);
    ok = result == 0;
    if (!ok) error = errno;
  }
  if (directory >= 0) ::close(directory);
  if (!ok) {
    if (sock >= 0) ::close(sock);
    errno = error;
    return -1;
  }
  return sock;
}

}  // namespace airlock::gvisor_guest
