#include "backends/microvm/jail/report.hpp"

#include <errno.h>
#include <unistd.h>

#include <cstring>

namespace airlock::microvm_jail {
namespace {

int status_channel = -1;

}  // namespace

void set_status_fd(int fd) noexcept {
  status_channel = fd;
}
int status_fd() noexcept {
  return status_channel;
}

bool write_all(int fd, const std::string& bytes) noexcept {
  if (fd < 0) return false;
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t written = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return false;
    done += static_cast<std::size_t>(written);
  }
  return true;
}

void report(const std::string& line) noexcept {
  try {
    write_all(status_channel, line + "\n");
  } catch (...) {
  }
}

void fail(const std::string& step, int error_number) noexcept {
  try {
    const std::string line = "error " + std::to_string(error_number) + " " + step;
    write_all(status_channel, line + "\n");
    write_all(STDERR_FILENO,
              "airlock-microvm-jail: " + step + ": " + std::strerror(error_number) + "\n");
  } catch (...) {
  }
  ::_exit(kSetupFailed);
}

}  // namespace airlock::microvm_jail
