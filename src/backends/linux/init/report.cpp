#include "backends/linux/init/report.hpp"

#include <errno.h>
#include <time.h>
#include <unistd.h>

#include "backends/linux/spawn_config.hpp"

namespace airlock::linux_backend::init {
namespace {

int status_fd = kStatusFd;

void write_all(const std::string& bytes) noexcept {
  if (status_fd < 0) return;
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t written = ::write(status_fd, bytes.data() + done, bytes.size() - done);
    if (written < 0) {
      if (errno == EINTR) continue;
      return;
    }
    done += static_cast<std::size_t>(written);
  }
}

}  // namespace

void report_init_pid(long pid) noexcept {
  try {
    Status status;
    status.kind = StatusKind::init_pid;
    status.pid = pid;
    write_all(encode_status(status));
  } catch (...) {
  }
}

void report_step(const char* name) noexcept {
  try {
    struct timespec now {};
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    Status status;
    status.kind = StatusKind::step;
    status.pid = static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
    status.step = name;
    write_all(encode_status(status));
  } catch (...) {
  }
}

void report_ready() noexcept {
  try {
    Status status;
    status.kind = StatusKind::ready;
    write_all(encode_status(status));
  } catch (...) {
  }
}

void fail(const std::string& step, int error_number) noexcept {
  try {
    Status status;
    status.kind = StatusKind::failure;
    status.error_number = error_number;
    status.step = step;
    write_all(encode_status(status));
  } catch (...) {
  }
  ::_exit(1);
}

void close_status() noexcept {
  if (status_fd >= 0) ::close(status_fd);
  status_fd = -1;
}

}  // namespace airlock::linux_backend::init
