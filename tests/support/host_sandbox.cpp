#include "support/host_sandbox.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "airlock/errors.hpp"
#include "airlock/paths.hpp"

extern char** environ;

namespace airlock::test_support {
namespace fs = std::filesystem;

HostSandbox::HostSandbox(std::string socket_directory)
    : socket_directory_(std::move(socket_directory)) {}

namespace {

std::optional<EntryKind> lstat_kind(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return std::nullopt;
  if (S_ISLNK(st.st_mode)) return EntryKind::symlink;
  if (S_ISDIR(st.st_mode)) return EntryKind::directory;
  if (S_ISREG(st.st_mode)) return EntryKind::file;
  return EntryKind::other;
}

}  // namespace

void HostSandbox::write_file(std::string_view path, std::string_view content,
                             std::string_view working_directory) {
  const std::string absolute = confine_guest_write_path(lstat_kind, path, working_directory);
  fs::create_directories(fs::path(absolute).parent_path());
  const std::string part = absolute + ".writing";
  {
    std::ofstream out(part, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
  }
  fs::rename(part, absolute);
}

ExecResult HostSandbox::exec(const Command& command, const ExecOptions& options) {
  check_exec_options(options);
  if (options.terminal) throw NotSupported("the host test double gives no terminal");
  ++execs_;
  int out[2], err[2], in[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 || ::pipe2(in, O_CLOEXEC) != 0) {
    throw SystemError("pipe2 failed", errno);
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  posix_spawn_file_actions_addchdir_np(&actions, options.working_directory.c_str());
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attributes, 0);

  std::vector<std::string> environment;
  for (char** e = environ; *e; ++e) environment.emplace_back(*e);
  for (const auto& [name, value] : options.environment) environment.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (auto& e : environment) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> arguments = command.arguments();
  std::vector<char*> argv;
  for (auto& a : arguments) argv.push_back(a.data());
  argv.push_back(nullptr);

  pid_t pid = 0;
  const int spawned = ::posix_spawnp(&pid, argv[0], &actions, &attributes, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  ::close(out[1]);
  ::close(err[1]);
  ::close(in[0]);
  if (spawned != 0) {
    ::close(out[0]);
    ::close(err[0]);
    ::close(in[1]);
    throw SystemError("posix_spawn failed", spawned);
  }
  // A command that exits without reading its input must not take the test with it.
  static const bool kPipeSignalIgnored = [] { return ::signal(SIGPIPE, SIG_IGN) != SIG_ERR; }();
  (void)kPipeSignalIgnored;
  if (!options.stdin_bytes.empty()) {
    (void)!::write(in[1], options.stdin_bytes.data(), options.stdin_bytes.size());
  }
  int stdin_pipe = in[1];
  if (options.stdin_fd < 0) {
    ::close(stdin_pipe);
    stdin_pipe = -1;
  } else {
    ::fcntl(stdin_pipe, F_SETFL, O_NONBLOCK);
  }
  std::string stdin_pending;  // read from the caller, not yet taken by the command

  ExecResult result;
  std::uint64_t delivered = 0;
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  bool timed_out = false;
  bool overflowed = false;
  bool caller_stdin_open = options.stdin_fd >= 0;
  pollfd fds[5] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}, {-1, 0, 0}, {-1, 0, 0}, {-1, 0, 0}};
  int open_streams = 2;
  while (open_streams > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || options.stop.stop_requested()) {
      timed_out = true;
      break;
    }
    fds[2] = {caller_stdin_open && stdin_pending.empty() ? options.stdin_fd : -1, POLLIN, 0};
    fds[3] = {stdin_pipe >= 0 && !stdin_pending.empty() ? stdin_pipe : -1, POLLOUT, 0};
    fds[4] = {options.control ? options.control->wake_fd() : -1, POLLIN, 0};
    const int wait = static_cast<int>(std::min<long long>(left.count(), 50));
    if (::poll(fds, 5, wait) < 0 && errno != EINTR) break;
    if (fds[4].revents != 0) {
      for (const int number : options.control->take().signals) ::kill(-pid, number);
    }
    if (fds[2].revents != 0) {
      char buffer[65536];
      const ssize_t got = ::read(options.stdin_fd, buffer, sizeof buffer);
      if (got > 0) {
        stdin_pending.assign(buffer, static_cast<std::size_t>(got));
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        caller_stdin_open = false;
      }
    }
    if (fds[3].revents != 0) {
      const ssize_t put = ::write(stdin_pipe, stdin_pending.data(), stdin_pending.size());
      if (put > 0) {
        stdin_pending.erase(0, static_cast<std::size_t>(put));
      } else if (errno != EINTR && errno != EAGAIN) {
        // EPIPE: the command stopped reading; what the caller still sends goes nowhere.
        stdin_pending.clear();
        caller_stdin_open = false;
      }
    }
    if (stdin_pipe >= 0 && !caller_stdin_open && stdin_pending.empty()) {
      ::close(stdin_pipe);
      stdin_pipe = -1;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[65536];
      const ssize_t got = ::read(fds[i].fd, buffer, sizeof buffer);
      if (got <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_streams;
        continue;
      }
      std::size_t take = static_cast<std::size_t>(got);
      if (options.max_output_bytes && delivered + take > *options.max_output_bytes) {
        take = static_cast<std::size_t>(*options.max_output_bytes - delivered);
        if (options.overflow == OutputOverflow::refuse) overflowed = true;
        result.truncated = true;
      }
      delivered += take;
      if (options.on_output) {
        if (take > 0 && !overflowed) {
          options.on_output(i == 0 ? OutputStream::stdout_stream : OutputStream::stderr_stream,
                            std::string_view(buffer, take));
        }
      } else {
        (i == 0 ? result.stdout_bytes : result.stderr_bytes).append(buffer, take);
      }
    }
    if (overflowed) break;
  }
  for (int i = 0; i < 2; ++i) {
    if (fds[i].fd >= 0) ::close(fds[i].fd);
  }
  if (stdin_pipe >= 0) ::close(stdin_pipe);
  if (timed_out || overflowed) ::kill(-pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (timed_out) {
    throw Timeout("the command did not finish within its timeout", true, result.stdout_bytes,
                  result.stderr_bytes);
  }
  if (overflowed) throw ExecOutputLimitExceeded(*options.max_output_bytes, true);
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.term_signal = WTERMSIG(status);
    result.exit_code = 128 + WTERMSIG(status);
  }
  return result;
}

ExecResult HostSandbox::run_code(std::string_view code, Milliseconds timeout) {
  ExecOptions options;
  options.working_directory = "/tmp";
  options.timeout = timeout;
  options.stdin_bytes = std::string(code);
  return exec(Command::argv({"python3", "-"}), options);
}

std::optional<SandboxEntry> HostSandbox::stat_file(std::string_view path,
                                                   std::string_view working_directory) {
  const std::string absolute = confine_guest_path(path, working_directory);
  refuse_symlinked_parents(lstat_kind, absolute, working_directory);
  struct stat st {};
  if (::lstat(absolute.c_str(), &st) != 0) return std::nullopt;
  SandboxEntry entry;
  entry.path = *guest_path_relative_to(absolute, working_directory);
  entry.kind = *lstat_kind(absolute);
  if (entry.kind == EntryKind::file) entry.size_bytes = static_cast<std::uint64_t>(st.st_size);
  return entry;
}

std::string HostSandbox::read_file(std::string_view path, std::string_view working_directory,
                                   std::uint64_t max_bytes) {
  const std::string absolute = confine_guest_path(path, working_directory);
  refuse_symlinked_parents(lstat_kind, absolute, working_directory);
  auto kind = lstat_kind(absolute);
  if (!kind) throw NotFound("no such file", absolute);
  if (*kind != EntryKind::file) throw SystemError("not a regular file", 0, absolute);
  if (fs::file_size(absolute) > max_bytes) {
    throw TransferCapExceeded("max_bytes", absolute, max_bytes, fs::file_size(absolute));
  }
  std::ifstream in(absolute, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<SandboxEntry> HostSandbox::list_dir(std::string_view, std::string_view) {
  throw NotSupported("the host test double does not list");
}

void HostSandbox::remove(std::string_view path, std::string_view working_directory, bool recursive) {
  const std::string absolute = confine_guest_path(path, working_directory);
  if (recursive) {
    fs::remove_all(absolute);
  } else {
    fs::remove(absolute);
  }
}

std::optional<Sandbox::SocketChannel> HostSandbox::socket_channel() {
  if (socket_directory_.empty()) return std::nullopt;
  return SocketChannel{socket_directory_, socket_directory_};
}

TempDir::TempDir() {
  std::string pattern = "/tmp/airlock-test-XXXXXX";
  if (!::mkdtemp(pattern.data())) throw SystemError("mkdtemp failed", errno);
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  fs::remove_all(path_, ignored);
}

}  // namespace airlock::test_support
