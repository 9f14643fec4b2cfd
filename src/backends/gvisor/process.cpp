#include "backends/gvisor/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "airlock/errors.hpp"
#include "base/syscall_error.hpp"

extern char** environ;

namespace airlock::gvisor_backend {

Pipe Pipe::make() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw BackendError("the gvisor backend could not create a pipe", base::errno_error("pipe2"));
  }
  return Pipe{base::UniqueFd(fds[0]), base::UniqueFd(fds[1])};
}

pid_t spawn_process(const SpawnRequest& request) {
  if (request.argv.empty()) throw BackendError("nothing to spawn");
  // Sources are first duplicated above every target number, so that placing one never
  // clobbers another that happens to sit on a target number.
  std::vector<base::UniqueFd> staged;
  const std::vector<int> sources = [&] {
    std::vector<int> all = {request.stdin_fd, request.stdout_fd, request.stderr_fd};
    all.insert(all.end(), request.extra.begin(), request.extra.end());
    return all;
  }();
  const int above = 3 + static_cast<int>(request.extra.size()) + 16;
  base::UniqueFd null_fd(::open("/dev/null", O_RDWR | O_CLOEXEC));
  for (int source : sources) {
    const int from = source >= 0 ? source : null_fd.get();
    const int copy = ::fcntl(from, F_DUPFD_CLOEXEC, above);
    if (copy < 0) {
      throw BackendError("the gvisor backend could not prepare a process",
                         base::errno_error("fcntl(F_DUPFD)"));
    }
    staged.emplace_back(copy);
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  for (std::size_t target = 0; target < staged.size(); ++target) {
    posix_spawn_file_actions_adddup2(&actions, staged[target].get(), static_cast<int>(target));
  }
  posix_spawn_file_actions_addclosefrom_np(&actions, static_cast<int>(staged.size()));
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int signal : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&defaults, signal);
  sigset_t empty;
  sigemptyset(&empty);
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  posix_spawnattr_setsigmask(&attributes, &empty);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  std::vector<char*> argv;
  for (const auto& argument : request.argv) argv.push_back(const_cast<char*>(argument.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int error = ::posix_spawn(&pid, argv[0], &actions, &attributes, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (error != 0) {
    throw BackendError("the gvisor backend could not start a helper process",
                       base::SyscallError(error, "posix_spawn", request.argv[0]));
  }
  return pid;
}

int wait_process(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int poll_process(pid_t pid) {
  int status = 0;
  const pid_t done = ::waitpid(pid, &status, WNOHANG);
  if (done == 0) return -1;
  if (done < 0) return 255;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

Completed run_to_completion(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                            const std::string& input, std::size_t max_output) {
  Pipe out = Pipe::make();
  Pipe err = Pipe::make();
  Pipe in = Pipe::make();
  SpawnRequest request{argv, in.read.get(), out.write.get(), err.write.get(), {}};
  const pid_t pid = spawn_process(request);
  in.read.reset();
  out.write.reset();
  err.write.reset();
  ::fcntl(in.write.get(), F_SETFL, O_NONBLOCK);
  std::size_t fed = 0;
  if (input.empty()) in.write.reset();

  Completed result;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buffer[16384];
  while (out.read || err.read) {
    pollfd fds[3] = {
        {out.read.get(), POLLIN, 0}, {err.read.get(), POLLIN, 0}, {in.write.get(), POLLOUT, 0}};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(pid, SIGKILL);
      result.timed_out = true;
      break;
    }
    if (::poll(fds, 3, static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    if (in.write && (fds[2].revents & (POLLOUT | POLLERR | POLLHUP)) != 0) {
      const ssize_t wrote = ::write(in.write.get(), input.data() + fed, input.size() - fed);
      if (wrote > 0) fed += static_cast<std::size_t>(wrote);
      if (wrote < 0 && errno != EAGAIN && errno != EINTR) fed = input.size();
      if (fed >= input.size()) in.write.reset();
    }
    for (int index = 0; index < 2; ++index) {
      base::UniqueFd& stream = index == 0 ? out.read : err.read;
      if (!stream || (fds[index].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t got = ::read(stream.get(), buffer, sizeof buffer);
      if (got <= 0) {
        if (got < 0 && errno == EINTR) continue;
        stream.reset();
        continue;
      }
      std::string& text = index == 0 ? result.stdout_text : result.stderr_text;
      if (text.size() < max_output) {
        text.append(buffer, std::min(static_cast<std::size_t>(got), max_output - text.size()));
      }
    }
  }
  result.exit_code = wait_process(pid);
  return result;
}

}  // namespace airlock::gvisor_backend
