// A test double whose `exec` runs the command with the host's own /bin/sh and utilities (no
// isolation at all). It lets the shell roads' command lines be checked against a real dash and
// coreutils — quoting, base64 wrapping, `wc` spacing — wherever no real backend is available.
// Every other Sandbox method is NotSupported: the roads need exec only.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "airlock/errors.hpp"
#include "airlock/sandbox.hpp"

namespace airlock::test {

class HostShellSandbox : public Sandbox {
 public:
  std::string instance_id() const override { return "host-shell"; }
  const SandboxKey& key() const override { return key_; }
  const std::string& kind() const override { return kind_; }
  void write_file(std::string_view, std::string_view, std::string_view) override {
    throw NotSupported("host shell double: exec only");
  }
  ExecResult run_code(std::string_view, Milliseconds) override {
    throw NotSupported("host shell double: exec only");
  }
  std::optional<SandboxEntry> stat_file(std::string_view, std::string_view) override {
    throw NotSupported("host shell double: exec only");
  }
  std::string read_file(std::string_view, std::string_view, std::uint64_t) override {
    throw NotSupported("host shell double: exec only");
  }
  std::vector<SandboxEntry> list_dir(std::string_view, std::string_view) override {
    throw NotSupported("host shell double: exec only");
  }
  void remove(std::string_view, std::string_view, bool) override {
    throw NotSupported("host shell double: exec only");
  }

  ExecResult exec(const Command& command, const ExecOptions& options) override {
    int out[2];
    int err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
      throw SystemError("pipe failed", errno);
    }
    std::vector<std::string> arguments = command.arguments();
    const pid_t child = ::fork();
    if (child == 0) {
      ::setpgid(0, 0);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      const int null = ::open("/dev/null", O_RDONLY);
      ::dup2(null, 0);
      if (::chdir(options.working_directory.empty() ? "/" : options.working_directory.c_str()) !=
          0) {
        ::_exit(126);
      }
      std::vector<char*> argv;
      for (auto& argument : arguments) argv.push_back(argument.data());
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    ::close(err[1]);
    ExecResult result;
    const auto deadline = std::chrono::steady_clock::now() + options.timeout;
    pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    int open_streams = 2;
    auto stop = [&](bool overflow) {
      ::kill(-child, SIGKILL);
      ::waitpid(child, nullptr, 0);
      for (auto& fd : fds) {
        if (fd.fd >= 0) ::close(fd.fd);
      }
      if (overflow) throw ExecOutputLimitExceeded(*options.max_output_bytes, true);
      throw Timeout("the host shell double's command timed out", true);
    };
    while (open_streams > 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) stop(false);
      if (::poll(fds, 2, static_cast<int>(left.count())) < 0 && errno != EINTR) stop(false);
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || fds[i].revents == 0) continue;
        char buffer[65536];
        const ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
        if (n <= 0) {
          ::close(fds[i].fd);
          fds[i].fd = -1;
          --open_streams;
          continue;
        }
        (i == 0 ? result.stdout_bytes : result.stderr_bytes).append(buffer, static_cast<std::size_t>(n));
        if (options.max_output_bytes &&
            result.stdout_bytes.size() + result.stderr_bytes.size() > *options.max_output_bytes) {
          stop(true);
        }
      }
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return result;
  }

 private:
  SandboxKey key_;
  std::string kind_ = "host-shell";
};

}  // namespace airlock::test
