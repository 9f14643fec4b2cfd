#include "backends/gvisor/guest/run.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "backends/gvisor/guest_protocol.hpp"
#include "backends/gvisor/unix_path.hpp"

namespace airlock::gvisor_guest {

static void write_line(int fd, const std::string& line) {
  const std::string text = line + "\n";
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t wrote = ::write(fd, text.data() + done, text.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return;
    done += static_cast<std::size_t>(wrote);
  }
}

namespace {

// A pipe holding the token file's content and nothing more: runsc's stdin, which becomes the
// keeper's. The token never appears in a file, an argument or an environment the guest sees.
int token_pipe(const std::string& token_file) {
  char token[128];
  const int file = ::open(token_file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  const ssize_t size = file >= 0 ? ::read(file, token, sizeof token) : -1;
  if (file >= 0) ::close(file);
  int ends[2];
  if (size <= 0 || ::pipe2(ends, O_CLOEXEC) != 0) return -1;
  const bool written = ::write(ends[1], token, static_cast<std::size_t>(size)) == size;
  ::close(ends[1]);
  if (!written) {
    ::close(ends[0]);
    return -1;
  }
  return ends[0];
}

// Hands the keeper socket's listening descriptor to one broker client.
void send_listener(int client, int listener) {
  char byte = 'L';
  iovec data{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof control;
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(header), &listener, sizeof(int));
  while (::sendmsg(client, &message, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
}

// The sandbox's storage: a tmpfs of `bytes` at `directory`, in a mount namespace of the
// shepherd's own (private propagation), so runsc — started from here — makes the overlay's file
// store in it, and the host's mount table never holds it. The file store is unlinked as soon as
// runsc made it and lives while the sandbox holds it: the tmpfs, and the memory its pages hold,
// go with the sandbox however it ends. Few inodes: runsc makes one file per overlaid mount.
bool mount_storage(const std::string& directory, std::uint64_t bytes) {
  if (::unshare(CLONE_NEWNS) != 0) {
    std::fprintf(stderr, "airlock-gvisor-guest: unshare(CLONE_NEWNS): %s\n", std::strerror(errno));
    return false;
  }
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    std::fprintf(stderr, "airlock-gvisor-guest: making mounts private: %s\n", std::strerror(errno));
    return false;
  }
  const std::string options = "size=" + std::to_string(bytes) + ",nr_inodes=64,mode=0700";
  // Not noexec: the Sentry maps the guest's programs from these files with PROT_EXEC (a noexec
  // store makes every binary written by the guest die with SIGSEGV when run).
  if (::mount("airlock-storage", directory.c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
              options.c_str()) != 0) {
    std::fprintf(stderr, "airlock-gvisor-guest: mounting the storage tmpfs on %s: %s\n",
                 directory.c_str(), std::strerror(errno));
    return false;
  }
  return true;
}

}  // namespace

int shepherd(int status_fd, const std::string& storage_directory, std::uint64_t storage_bytes,
             const std::string& control_socket, const std::string& broker_socket,
             const std::string& token_file, const std::vector<std::string>& argv) {
  // The caller waits for this first process; the shepherd proper is its child, so it is never a
  // zombie of a host process that did not expect one.
  const pid_t detached = ::fork();
  if (detached < 0) return 1;
  if (detached > 0) return 0;
  ::setsid();
  ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  if (!storage_directory.empty() && !mount_storage(storage_directory, storage_bytes)) {
    write_line(status_fd, "create 125");
    return 1;
  }
  // Both sockets exist before the container: the Gofer resolves the keeper's at its start.
  int keeper_listener = -1;
  int broker = -1;
  int token_input = -1;
  if (!control_socket.empty()) {
    keeper_listener = listen_unix(control_socket, 64);
    // The Gofer connects for the keeper as the control directory's owner, and only it may.
    struct stat directory {};
    const auto slash = control_socket.rfind('/');
    if (keeper_listener >= 0 &&
        (::stat(control_socket.substr(0, slash).c_str(), &directory) != 0 ||
         ::chown(control_socket.c_str(), directory.st_uid, directory.st_gid) != 0 ||
         ::chmod(control_socket.c_str(), 0600) != 0)) {
      ::close(keeper_listener);
      keeper_listener = -1;
    }
    broker = keeper_listener >= 0 ? listen_unix(broker_socket, 64) : -1;
    token_input = broker >= 0 ? token_pipe(token_file) : -1;
    if (token_input < 0) {
      std::fprintf(stderr, "airlock-gvisor-guest: listening on %s: %s\n",
                   keeper_listener < 0 ? control_socket.c_str() : broker_socket.c_str(),
                   std::strerror(errno));
      write_line(status_fd, "create 125");
      return 1;
    }
  }
  sigset_t child_only;
  sigemptyset(&child_only);
  sigaddset(&child_only, SIGCHLD);
  sigset_t previous;
  ::sigprocmask(SIG_BLOCK, &child_only, &previous);
  const pid_t runsc = ::fork();
  if (runsc < 0) {
    write_line(status_fd, "create 125");
    return 1;
  }
  if (runsc == 0) {
    // runsc gets stdio only: the status descriptor and the image pin stay with the shepherd.
    for (int fd = 3; fd < 1024; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    ::sigprocmask(SIG_SETMASK, &previous, nullptr);
    if (token_input >= 0) ::dup2(token_input, 0);
    std::vector<char*> arguments;
    for (const auto& argument : argv) arguments.push_back(const_cast<char*>(argument.c_str()));
    arguments.push_back(nullptr);
    ::execv(arguments[0], arguments.data());
    ::_exit(126);
  }
  if (token_input >= 0) ::close(token_input);
  int status = 0;
  while (::waitpid(runsc, &status, 0) < 0 && errno == EINTR) {
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  write_line(status_fd, "create " + std::to_string(code));
  ::close(status_fd);
  ::close(0);
  ::close(1);
  ::close(2);
  // Reap the sandbox and gofer the moment they die; leave when there is nothing left to reap.
  // Meanwhile every host process that connects to the broker gets the keeper socket's listening
  // descriptor and keeps its connection: our exit hangs them all up, which tells them the
  // sandbox is gone.
  const int children = ::signalfd(-1, &child_only, SFD_CLOEXEC | SFD_NONBLOCK);
  std::vector<int> clients;
  for (;;) {
    pid_t reaped;
    while ((reaped = ::waitpid(-1, nullptr, WNOHANG)) > 0) {
    }
    if (reaped < 0 && errno == ECHILD) break;
    std::vector<pollfd> watch = {{children, POLLIN, 0}, {broker, POLLIN, 0}};
    for (const int client : clients) watch.push_back({client, POLLIN, 0});
    if (::poll(watch.data(), watch.size(), children < 0 ? 100 : 60'000) < 0) continue;
    if ((watch[0].revents & POLLIN) != 0) {
      signalfd_siginfo info;
      while (::read(children, &info, sizeof info) > 0) {
      }
    }
    if ((watch[1].revents & POLLIN) != 0) {
      const int client = ::accept4(broker, nullptr, nullptr, SOCK_CLOEXEC);
      if (client >= 0) {
        send_listener(client, keeper_listener);
        clients.push_back(client);
      }
    }
    for (std::size_t i = 2; i < watch.size(); ++i) {
      if (watch[i].revents == 0) continue;
      // A client says nothing: readable means it hung up (or broke the rule), so it goes.
      ::close(watch[i].fd);
      clients.erase(std::find(clients.begin(), clients.end(), watch[i].fd));
    }
  }
  return 0;
}

}  // namespace airlock::gvisor_guest
