#include "backends/microvm/jail/warden.hpp"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "backends/microvm/jail/program.hpp"
#include "backends/microvm/jail/report.hpp"
#include "backends/microvm/jail/root.hpp"
#include "base/unique_fd.hpp"

namespace airlock::microvm_jail {
namespace {

constexpr int kWatchedSignals[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT};

// PID 1 of a pid namespace is sent no signal whose disposition is the default. A handler makes
// them deliverable; it never runs, since they stay blocked and are read from the signalfd.
void never_called(int) {}

base::UniqueFd watch_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (const int sig : kWatchedSignals) {
    sigaddset(&set, sig);
    struct sigaction action {};
    action.sa_handler = never_called;
    sigemptyset(&action.sa_mask);
    if (::sigaction(sig, &action, nullptr) != 0) fail("sigaction", errno);
  }
  if (::sigprocmask(SIG_BLOCK, &set, nullptr) != 0) fail("sigprocmask", errno);
  base::UniqueFd fd(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!fd) fail("signalfd", errno);
  return fd;
}

// What the program's exec report pipe said: nothing (execv succeeded), or the failed step.
void await_exec(int report, pid_t program) {
  std::string text;
  char buffer[256];
  for (;;) {
    const ssize_t got = ::read(report, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail("read the exec report", errno);
    if (got == 0) break;
    text.append(buffer, static_cast<std::size_t>(got));
  }
  ::close(report);
  if (text.empty()) return;
  int status = 0;
  while (::waitpid(program, &status, 0) < 0 && errno == EINTR) {
  }
  const auto space = text.find(' ');
  int error_number = EIO;
  try {
    error_number = std::stoi(text.substr(0, space));
  } catch (...) {
  }
  fail(space == std::string::npos ? text : text.substr(space + 1), error_number);
}

[[noreturn]] void finish(int status) {
  if (WIFEXITED(status)) {
    report("exit " + std::to_string(WEXITSTATUS(status)));
    ::_exit(WEXITSTATUS(status));
  }
  const int sig = WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL;
  report("signal " + std::to_string(sig));
  ::_exit(128 + sig);
}

[[noreturn]] void kill_and_finish(pid_t program) {
  ::kill(program, SIGKILL);
  int status = 0;
  while (::waitpid(program, &status, 0) < 0) {
    if (errno != EINTR) finish(W_EXITCODE(0, SIGKILL));
  }
  finish(status);
}

// Reaps every ended child; returns when none is left to reap now. Ends the warden when the
// program is among them.
void reap(pid_t program) {
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) return;
    if (pid == program) finish(status);
  }
}

}  // namespace

void run_warden(const Options& options, int last_capability) {
  // The jail's parent is outside the pid namespace: were it killed, nothing else would end us.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) fail("prctl PR_SET_PDEATHSIG", errno);
  base::UniqueFd signals = watch_signals();
  enter_root(options);

  const StartedProgram program = start_program(options, last_capability);
  await_exec(program.exec_report, program.pid);
  report("ready");

  pollfd watched[2] = {{options.leash_fd, POLLIN, 0}, {signals.get(), POLLIN, 0}};
  for (;;) {
    if (::poll(watched, 2, -1) < 0) {
      if (errno == EINTR) continue;
      kill_and_finish(program.pid);
    }
    if (watched[1].revents & POLLIN) {
      signalfd_siginfo info{};
      while (::read(signals.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        if (info.ssi_signo != SIGCHLD) kill_and_finish(program.pid);
      }
      reap(program.pid);
    }
    if (watched[0].revents != 0) {
      // Bytes on the leash mean nothing; its end (or an error) means the owner is gone.
      char buffer[64];
      const ssize_t got =
          (watched[0].revents & POLLIN) != 0 ? ::read(options.leash_fd, buffer, sizeof buffer) : 0;
      if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
        kill_and_finish(program.pid);
      }
    }
  }
}

}  // namespace airlock::microvm_jail
