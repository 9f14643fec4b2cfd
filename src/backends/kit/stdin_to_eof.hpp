// For a backend whose transport cannot forward stdin live: the caller's `stdin_fd` read to its
// end of file before the command is sent, within the exec's deadline and cancellation.
#pragma once

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <stop_token>
#include <string>

#include "airlock/errors.hpp"

namespace airlock::backend_kit {

// The bytes `fd` gives until its end of file. Timeout (nothing ran) when the deadline passes or
// `stop` is requested first; InvalidArgument for a descriptor that is not open; SystemError for
// a read that fails. At most `max_bytes` (InvalidArgument past it: the transport stages stdin
// whole).
inline std::string read_stdin_to_eof(int fd, std::chrono::steady_clock::time_point deadline,
                                     const std::stop_token& stop, std::size_t max_bytes) {
  std::string bytes;
  char chunk[65536];
  for (;;) {
    if (stop.stop_requested()) throw Timeout("cancelled while reading stdin; nothing ran", true);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      throw Timeout("stdin_fd did not reach its end of file within the timeout; nothing ran", true);
    }
    pollfd readable{fd, POLLIN, 0};
    const int ready = ::poll(&readable, 1, static_cast<int>(std::min<long long>(left.count(), 50)));
    if (ready < 0 && errno != EINTR) throw SystemError("poll on stdin_fd failed", errno);
    if (ready <= 0) continue;
    if ((readable.revents & POLLNVAL) != 0) {
      throw InvalidArgument("exec: stdin_fd " + std::to_string(fd) + " is not an open descriptor",
                            "stdin_fd");
    }
    const ssize_t got = ::read(fd, chunk, sizeof chunk);
    if (got == 0) return bytes;
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw SystemError("read from stdin_fd failed", errno);
    }
    bytes.append(chunk, static_cast<std::size_t>(got));
    if (bytes.size() > max_bytes) {
      throw InvalidArgument("exec: stdin_fd gave more than " + std::to_string(max_bytes) +
                                " bytes, which this backend stages whole before the command runs",
                            "stdin_fd");
    }
  }
}

}  // namespace airlock::backend_kit
