// ExecControl: requests from any thread, one eventfd that a backend's exec loop polls.
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <string>

#include "airlock/errors.hpp"
#include "airlock/sandbox.hpp"

namespace airlock {

struct ExecControl::State {
  int wake = -1;
  std::mutex mutex;
  Pending pending;
};

ExecControl::ExecControl() : state_(std::make_unique<State>()) {
  state_->wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (state_->wake < 0) throw SystemError("cannot make the exec control's eventfd", errno);
}

ExecControl::~ExecControl() { ::close(state_->wake); }

namespace {
void wake(int fd) {
  const std::uint64_t one = 1;
  // A full counter already reads as pending; nothing else can fail on an eventfd we own.
  [[maybe_unused]] const ssize_t ignored = ::write(fd, &one, sizeof one);
}
}  // namespace

void ExecControl::signal(int number) {
  if (!forwardable_signal(number)) {
    throw InvalidArgument("exec control: signal " + std::to_string(number) +
                              " is not one a running command may be sent (SIGHUP, SIGINT, "
                              "SIGQUIT, SIGKILL, SIGUSR1, SIGUSR2, SIGALRM, SIGTERM, SIGCONT, "
                              "SIGTSTP, SIGWINCH)",
                          "signal");
  }
  {
    const std::lock_guard lock(state_->mutex);
    state_->pending.signals.push_back(number);
  }
  wake(state_->wake);
}

void ExecControl::resize(WindowSize size) {
  {
    const std::lock_guard lock(state_->mutex);
    state_->pending.size = size;
  }
  wake(state_->wake);
}

int ExecControl::wake_fd() const noexcept { return state_->wake; }

ExecControl::Pending ExecControl::take() {
  std::uint64_t count = 0;
  [[maybe_unused]] const ssize_t drained = ::read(state_->wake, &count, sizeof count);
  const std::lock_guard lock(state_->mutex);
  Pending taken = std::move(state_->pending);
  state_->pending = {};
  return taken;
}

}  // namespace airlock
