#include "backends/linux/init/server.hpp"

#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "airlock/sandbox.hpp"
#include "backends/linux/init/command.hpp"
#include "backends/linux/init/egress_bridge.hpp"
#include "backends/linux/protocol.hpp"
#include "backends/linux/syscalls.hpp"
#include "base/unique_fd.hpp"

namespace airlock::linux_backend::init {
namespace {

using protocol::ExecRequest;
using protocol::Reply;
using protocol::ReplyKind;

constexpr std::size_t kMaxConnections = 1024;
constexpr std::int64_t kKillWaitMs = 2000;
constexpr std::size_t kSpareLeaves = 4;

std::int64_t now_ms() {
  struct timespec now {};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1'000'000;
}

void sleep_ms(long milliseconds) {
  struct timespec pause {};
  pause.tv_nsec = milliseconds * 1'000'000;
  ::nanosleep(&pause, nullptr);
}

// A per-command cgroup v2 leaf: kept and reused while empty, so the common case costs no mkdir.
struct Leaf {
  std::string name;
  base::UniqueFd directory;  // O_PATH
  bool busy = false;
  // Written to cgroup.kill once. Never reused afterwards: a child cloned into a cgroup that was
  // killed before can be killed on arrival (the kernel compares kill generations of the parent's
  // and the destination's cgroups), so a killed leaf is removed once empty.
  bool killed = false;
};

struct Connection {
  enum class State { awaiting_request, queued, running, replied };
  base::UniqueFd socket;
  State state = State::awaiting_request;
  ExecRequest request;
  std::vector<base::UniqueFd> fds;  // stdout, stderr[, stdin]
  std::int64_t deadline = 0;
  std::uint64_t sequence = 0;
  pid_t pid = -1;
  bool reaped = false;
  int wait_status = 0;
  base::UniqueFd error_pipe;
  Leaf* leaf = nullptr;
  std::uint32_t exit_flags = 0;
  std::vector<int> pending_signals;  // sent while queued: delivered as the command starts
  bool serial() const { return (request.flags & protocol::kSerial) != 0; }
};

class Server {
 public:
  Server(const SpawnConfig& config, const ServerResources& resources)
      : config_(config), resources_(resources), last_capability_(read_last_capability()) {}

  [[noreturn]] void run();

 private:
  void accept_all();
  void read_request(Connection& connection);
  void read_while_active(Connection& connection);
  void handle_exec(Connection& connection, const std::string& body);
  void try_start();
  void start(Connection& connection);
  void reap_all();
  void process_completions();
  void finish(Connection& connection);
  void kill_command(Connection& connection, std::uint32_t reason);
  void signal_command(Connection& connection, int number);
  void expire_deadlines();
  void reply(Connection& connection, const Reply& answer, const int* fds = nullptr,
             std::size_t fd_count = 0);
  void reply_failure(Connection& connection, protocol::SpawnStage stage, int error_number);
  Leaf* acquire_leaf(int& error_number);
  void release_leaf(Leaf* leaf);
  bool leaf_populated(const Leaf& leaf) const;
  bool group_empty(const Connection& connection) const;
  void remove_finished();
  std::int64_t next_deadline() const;
  void hold_leash();

  const SpawnConfig& config_;
  ServerResources resources_;
  int last_capability_;
  std::vector<std::unique_ptr<Connection>> connections_;
  std::vector<std::unique_ptr<Leaf>> leaves_;
  std::vector<pid_t> abandoned_;  // killed commands that did not die in time; reaped later
  std::uint64_t next_sequence_ = 0;
  std::uint64_t next_leaf_ = 0;
  std::size_t running_ = 0;
  bool serial_running_ = false;
  EgressBridge bridge_;
  bool bridging_ = false;
};

void Server::reply(Connection& connection, const Reply& answer, const int* fds,
                   std::size_t fd_count) {
  if (connection.socket) {
    (void)protocol::send_message(connection.socket.get(), protocol::encode_reply(answer), fds,
                                 fd_count);
  }
  connection.state = Connection::State::replied;
}

void Server::reply_failure(Connection& connection, protocol::SpawnStage stage, int error_number) {
  Reply answer;
  answer.kind = ReplyKind::spawn_failed;
  answer.failure.stage = stage;
  answer.failure.error_number = error_number;
  reply(connection, answer);
}

void Server::accept_all() {
  for (;;) {
    const int client = ::accept4(resources_.listener, nullptr, nullptr,
                                 SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (client < 0) return;
    if (connections_.size() >= kMaxConnections) {
      ::close(client);
      continue;
    }
    auto connection = std::make_unique<Connection>();
    connection->socket.reset(client);
    connections_.push_back(std::move(connection));
  }
}

void Server::read_request(Connection& connection) {
  std::string bytes;
  std::vector<base::UniqueFd> fds;
  const long received = protocol::receive_message(connection.socket.get(), bytes, fds);
  if (received == -EAGAIN) return;
  if (received <= 0) {
    connection.state = Connection::State::replied;  // gone or malformed: drop it
    return;
  }
  protocol::Op op{};
  std::uint32_t header_flags = 0;
  std::string secret;
  std::string body;
  if (!protocol::split_request(bytes, op, header_flags, secret, body) ||
      !protocol::same_secret(secret, config_.control_secret)) {
    // Malformed, or not from the sandbox's owner: no answer at all, not even an error.
    connection.state = Connection::State::replied;
    return;
  }
  if ((header_flags & protocol::kBodyInMemfd) != 0) {
    struct stat info {};
    if (fds.empty() || ::fstat(fds.front().get(), &info) != 0 || info.st_size < 0 ||
        static_cast<std::size_t>(info.st_size) > protocol::kMaxRequestBytes) {
      Reply answer;
      answer.message = "request body missing or too large";
      reply(connection, answer);
      return;
    }
    body.resize(static_cast<std::size_t>(info.st_size));
    std::size_t done = 0;
    while (done < body.size()) {
      const ssize_t got = ::pread(fds.front().get(), body.data() + done, body.size() - done,
                                  static_cast<off_t>(done));
      if (got <= 0) break;
      done += static_cast<std::size_t>(got);
    }
    if (done != body.size()) {
      Reply answer;
      answer.message = "request body unreadable";
      reply(connection, answer);
      return;
    }
    fds.erase(fds.begin());
  }
  connection.fds = std::move(fds);
  switch (op) {
    case protocol::Op::ping: {
      Reply answer;
      answer.kind = ReplyKind::ok;
      answer.version = protocol::kVersion;
      reply(connection, answer);
      return;
    }
    case protocol::Op::root: {
      Reply answer;
      answer.kind = ReplyKind::ok;
      answer.version = protocol::kVersion;
      const int handed[] = {resources_.root, resources_.host_tools};
      reply(connection, answer, handed, 2);
      return;
    }
    case protocol::Op::storage: {
      // The storage tmpfs's root, for a snapshot: the host reads what the guest wrote beneath
      // it (by descriptor, never following a link) while the sandbox is frozen.
      Reply answer;
      answer.kind = ReplyKind::ok;
      answer.version = protocol::kVersion;
      const int handed[] = {resources_.storage};
      reply(connection, answer, handed, 1);
      return;
    }
    case protocol::Op::namespaces: {
      base::UniqueFd user(::open("/proc/self/ns/user", O_RDONLY | O_CLOEXEC));
      base::UniqueFd mount(::open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC));
      Reply answer;
      if (!user || !mount) {
        answer.message = "the init's namespaces could not be opened";
        reply(connection, answer);
        return;
      }
      answer.kind = ReplyKind::ok;
      answer.version = protocol::kVersion;
      const int handed[] = {user.get(), mount.get()};
      reply(connection, answer, handed, 2);
      return;
    }
    case protocol::Op::exec:
      handle_exec(connection, body);
      return;
    default: {
      Reply answer;
      answer.message = "unknown request";
      reply(connection, answer);
      return;
    }
  }
}

void Server::handle_exec(Connection& connection, const std::string& body) {
  if (!protocol::decode_exec(body, connection.request)) {
    Reply answer;
    answer.message = "malformed exec request";
    reply(connection, answer);
    return;
  }
  const bool with_stdin = (connection.request.flags & protocol::kStdinPipe) != 0;
  const bool terminal = (connection.request.flags & protocol::kTerminal) != 0;
  if (connection.fds.size() != (with_stdin ? 3u : 2u) || (terminal && !with_stdin)) {
    Reply answer;
    answer.message = "exec request carries the wrong descriptors";
    reply(connection, answer);
    return;
  }
  connection.deadline = now_ms() + std::max<std::int64_t>(connection.request.deadline_ms, 0);
  connection.sequence = next_sequence_++;
  connection.state = Connection::State::queued;
  try_start();
}

Leaf* Server::acquire_leaf(int& error_number) {
  for (auto& leaf : leaves_) {
    if (!leaf->busy) {
      leaf->busy = true;
      return leaf.get();
    }
  }
  auto leaf = std::make_unique<Leaf>();
  leaf->name = "c" + std::to_string(next_leaf_++);
  if (::mkdirat(resources_.command_cgroup, leaf->name.c_str(), 0755) != 0 && errno != EEXIST) {
    error_number = errno;
    return nullptr;
  }
  leaf->directory.reset(::openat(resources_.command_cgroup, leaf->name.c_str(),
                                 O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!leaf->directory) {
    error_number = errno;
    ::unlinkat(resources_.command_cgroup, leaf->name.c_str(), AT_REMOVEDIR);
    return nullptr;
  }
  leaf->busy = true;
  leaves_.push_back(std::move(leaf));
  return leaves_.back().get();
}

bool Server::leaf_populated(const Leaf& leaf) const {
  base::UniqueFd events(::openat(leaf.directory.get(), "cgroup.events", O_RDONLY | O_CLOEXEC));
  if (!events) return true;  // cannot tell: treat as still in use
  char text[256] = {};
  const ssize_t length = ::read(events.get(), text, sizeof text - 1);
  if (length <= 0) return true;
  return std::strstr(text, "populated 0") == nullptr;
}

// A leaf is reused only once empty; one that still holds a command's leftovers stays busy and
// is looked at again on the next release. Spares beyond a few are removed.
void Server::release_leaf(Leaf* finished) {
  if (finished != nullptr && !leaf_populated(*finished)) finished->busy = false;
  for (auto& leaf : leaves_) {
    if (leaf->busy && leaf.get() != finished) {
      bool owned = false;
      for (const auto& connection : connections_) {
        if (connection->leaf == leaf.get()) owned = true;
      }
      if (!owned && !leaf_populated(*leaf)) leaf->busy = false;
    }
  }
  std::size_t spare = 0;
  for (auto it = leaves_.begin(); it != leaves_.end();) {
    if (!(*it)->busy && ((*it)->killed || ++spare > kSpareLeaves)) {
      (*it)->directory.reset();
      ::unlinkat(resources_.command_cgroup, (*it)->name.c_str(), AT_REMOVEDIR);
      it = leaves_.erase(it);
    } else {
      ++it;
    }
  }
}

void Server::try_start() {
  for (;;) {
    Connection* next = nullptr;
    for (auto& connection : connections_) {
      if (connection->state != Connection::State::queued) continue;
      if (connection->serial() && serial_running_) continue;
      if (next == nullptr || connection->sequence < next->sequence) next = connection.get();
    }
    if (next == nullptr || running_ >= config_.max_commands) return;
    start(*next);
  }
}

void Server::start(Connection& connection) {
  Leaf* leaf = nullptr;
  if (resources_.command_cgroup >= 0) {
    int error_number = 0;
    leaf = acquire_leaf(error_number);
    if (leaf == nullptr) {
      reply_failure(connection, protocol::SpawnStage::cgroup, error_number);
      return;
    }
  }
  int error_pipe[2];
  if (::pipe2(error_pipe, O_CLOEXEC) != 0) {
    release_leaf(leaf);
    reply_failure(connection, protocol::SpawnStage::fork, errno);
    return;
  }
  struct clone_args arguments {};
  arguments.exit_signal = SIGCHLD;
  if (leaf != nullptr) {
    arguments.flags = CLONE_INTO_CGROUP;
    arguments.cgroup = static_cast<std::uint64_t>(leaf->directory.get());
  }
  const long pid = sys::clone3_fork(&arguments);
  if (pid == 0) {
    ::close(error_pipe[0]);
    const bool with_stdin = connection.fds.size() == 3;
    run_command(connection.request, with_stdin ? connection.fds[2].get() : -1,
                connection.fds[0].get(), connection.fds[1].get(), error_pipe[1], config_,
                last_capability_);
  }
  const int clone_error = errno;
  ::close(error_pipe[1]);
  // Never block on it: a command that would not die keeps the write end open.
  ::fcntl(error_pipe[0], F_SETFL, O_NONBLOCK);
  if (pid < 0) {
    ::close(error_pipe[0]);
    if (leaf != nullptr) leaf->busy = false;
    reply_failure(connection,
                  leaf != nullptr && clone_error == EPERM ? protocol::SpawnStage::cgroup
                                                         : protocol::SpawnStage::fork,
                  clone_error);
    return;
  }
  connection.error_pipe.reset(error_pipe[0]);
  connection.fds.clear();  // the host must see end of stream when the command's side closes
  connection.pid = static_cast<pid_t>(pid);
  connection.leaf = leaf;
  connection.state = Connection::State::running;
  ++running_;
  if (connection.serial()) serial_running_ = true;
  for (const int number : std::exchange(connection.pending_signals, {})) {
    signal_command(connection, number);
  }
}

// The command's process group; a child that has not reached its setsid yet is signalled alone
// (its group does not exist yet, and it is the only process of what will be the group).
void Server::signal_command(Connection& connection, int number) {
  if (connection.pid <= 0 || connection.reaped) return;
  if (::kill(-connection.pid, number) != 0 && errno == ESRCH) ::kill(connection.pid, number);
}

void Server::reap_all() {
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG | __WALL);
    if (pid <= 0) return;
    for (auto& connection : connections_) {
      if (connection->pid == pid && !connection->reaped) {
        connection->reaped = true;
        connection->wait_status = status;
        break;
      }
    }
    abandoned_.erase(std::remove(abandoned_.begin(), abandoned_.end(), pid), abandoned_.end());
  }
}

bool Server::group_empty(const Connection& connection) const {
  if (connection.leaf != nullptr) return !leaf_populated(*connection.leaf);
  return ::kill(-connection.pid, 0) != 0 && errno == ESRCH;
}

void Server::kill_command(Connection& connection, std::uint32_t reason) {
  connection.exit_flags |= reason | protocol::kKillChecked;
  if (connection.leaf != nullptr) {
    connection.leaf->killed = true;
    base::UniqueFd kill_file(
        ::openat(connection.leaf->directory.get(), "cgroup.kill", O_WRONLY | O_CLOEXEC));
    if (kill_file) {
      ssize_t ignored = ::write(kill_file.get(), "1", 1);
      (void)ignored;
    }
  }
  ::kill(-connection.pid, SIGKILL);
  ::kill(connection.pid, SIGKILL);
  const std::int64_t give_up = now_ms() + kKillWaitMs;
  for (;;) {
    reap_all();
    if (connection.reaped && group_empty(connection)) {
      // Without a leaf only the process group was seen empty: a descendant that left it
      // (setsid, a daemon) may live on, so the kill is not claimed confirmed.
      if (connection.leaf != nullptr) connection.exit_flags |= protocol::kKillConfirmed;
      return;
    }
    if (now_ms() >= give_up) return;
    sleep_ms(1);
  }
}

void Server::finish(Connection& connection) {
  ChildFailure failure{};
  const ssize_t got = ::read(connection.error_pipe.get(), &failure, sizeof failure);
  if (got == static_cast<ssize_t>(sizeof failure)) {
    reply_failure(connection, static_cast<protocol::SpawnStage>(failure.stage),
                  failure.error_number);
  } else {
    Reply answer;
    answer.kind = ReplyKind::exited;
    answer.exit.wait_status = connection.wait_status;
    answer.exit.flags = connection.exit_flags;
    reply(connection, answer);
  }
}

void Server::process_completions() {
  bool released = false;
  for (auto& connection : connections_) {
    if (connection->state != Connection::State::running || !connection->reaped) continue;
    finish(*connection);
    --running_;
    if (connection->serial()) serial_running_ = false;
    Leaf* leaf = std::exchange(connection->leaf, nullptr);
    release_leaf(leaf);
    released = true;
  }
  if (released) try_start();
}

void Server::expire_deadlines() {
  const std::int64_t now = now_ms();
  for (auto& connection : connections_) {
    if (connection->deadline == 0 || now < connection->deadline) continue;
    if (connection->state == Connection::State::queued) {
      Reply answer;
      answer.kind = ReplyKind::queued_timeout;
      reply(*connection, answer);
    } else if (connection->state == Connection::State::running) {
      kill_command(*connection, protocol::kTimedOut);
      if (!connection->reaped) {
        // It would not die in time: answer now, reap it whenever it goes.
        abandoned_.push_back(connection->pid);
        connection->reaped = true;
        connection->wait_status = SIGKILL;
      }
    }
  }
}

void Server::read_while_active(Connection& connection) {
  std::string bytes;
  std::vector<base::UniqueFd> fds;
  const long received = protocol::receive_message(connection.socket.get(), bytes, fds);
  if (received == -EAGAIN) return;
  protocol::Op op{};
  std::uint32_t header_flags = 0;
  std::string secret;
  std::string body;
  const bool owned = received > 0 &&
                     protocol::split_request(bytes, op, header_flags, secret, body) &&
                     protocol::same_secret(secret, config_.control_secret);
  int number = 0;
  if (owned && op == protocol::Op::signal && protocol::decode_signal(body, number) &&
      forwardable_signal(number)) {
    if (connection.state == Connection::State::queued) {
      if (connection.pending_signals.size() < 64) connection.pending_signals.push_back(number);
    } else {
      signal_command(connection, number);
    }
    return;
  }
  const bool kill_request = owned && op == protocol::Op::kill;
  if (received > 0 && !kill_request) return;  // anything else mid-command is ignored
  // A kill request, or the host hung up: either way nobody wants this command any more.
  if (connection.state == Connection::State::queued) {
    if (kill_request) {
      Reply answer;
      answer.kind = ReplyKind::exited;
      answer.exit.wait_status = SIGKILL;
      answer.exit.flags = protocol::kKilledOnRequest | protocol::kKillChecked |
                          protocol::kKillConfirmed;
      reply(connection, answer);
    }
    connection.state = Connection::State::replied;
    return;
  }
  if (!kill_request) connection.socket.reset();
  kill_command(connection, protocol::kKilledOnRequest);
  if (!connection.reaped) {
    abandoned_.push_back(connection.pid);
    connection.reaped = true;
    connection.wait_status = SIGKILL;
  }
}

void Server::remove_finished() {
  connections_.erase(std::remove_if(connections_.begin(), connections_.end(),
                                    [](const auto& connection) {
                                      return connection->state == Connection::State::replied;
                                    }),
                     connections_.end());
}

std::int64_t Server::next_deadline() const {
  std::int64_t next = -1;
  for (const auto& connection : connections_) {
    if (connection->state != Connection::State::queued &&
        connection->state != Connection::State::running) {
      continue;
    }
    if (connection->deadline != 0 && (next < 0 || connection->deadline < next)) {
      next = connection->deadline;
    }
  }
  return next;
}

// A pooled sandbox waits on its leash: 'c' makes it a sandbox like any other (and the leash is
// let go); end of stream, an error or any other byte means the pool is gone or discarded it, and
// the sandbox ends with this process. Nothing has run in it yet: no command is lost.
void Server::hold_leash() {
  char byte = 0;
  ssize_t got;
  do {
    got = ::read(resources_.leash, &byte, 1);
  } while (got < 0 && errno == EINTR);
  if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
  if (got != 1 || byte != 'c') ::_exit(0);
  ::close(resources_.leash);
  resources_.leash = -1;
}

void Server::run() {
  const int listener_flags = ::fcntl(resources_.listener, F_GETFL);
  ::fcntl(resources_.listener, F_SETFL, listener_flags | O_NONBLOCK);
  if ((config_.flags & kEgressBridge) != 0 && resources_.egress >= 0) {
    bridging_ = bridge_.start(resources_.egress);
  }
  // The first command's cgroup leaf, made now rather than when that command arrives: a cgroup
  // mkdir waits on the kernel's global cgroup lock, and here it overlaps the library's last
  // record write (or, pooled, happens long before anyone asks). A failure is left for that
  // command to meet and report.
  if (resources_.command_cgroup >= 0) {
    int ignored = 0;
    if (Leaf* first = acquire_leaf(ignored)) first->busy = false;
  }
  std::vector<struct pollfd> fds;
  std::vector<Connection*> polled;
  for (;;) {
    process_completions();
    expire_deadlines();
    process_completions();
    remove_finished();

    fds.clear();
    polled.clear();
    fds.push_back({resources_.listener, POLLIN, 0});
    fds.push_back({resources_.signals, POLLIN, 0});
    for (auto& connection : connections_) {
      fds.push_back({connection->socket.get(), POLLIN, 0});
      polled.push_back(connection.get());
    }
    const std::size_t leash_index = fds.size();
    if (resources_.leash >= 0) fds.push_back({resources_.leash, POLLIN, 0});
    const std::size_t bridge_first = fds.size();
    if (bridging_) bridge_.add_poll_fds(fds);

    int timeout = -1;
    const std::int64_t deadline = next_deadline();
    if (deadline >= 0) timeout = static_cast<int>(std::max<std::int64_t>(0, deadline - now_ms()));
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) sleep_ms(10);

    if ((fds[1].revents & POLLIN) != 0) {
      struct signalfd_siginfo information[16];
      while (::read(resources_.signals, information, sizeof information) > 0) {
      }
    }
    reap_all();
    if (resources_.leash >= 0 && fds[leash_index].revents != 0) hold_leash();
    for (std::size_t i = 0; i < polled.size(); ++i) {
      const short events = fds[2 + i].revents;
      if (events == 0) continue;
      Connection& connection = *polled[i];
      switch (connection.state) {
        case Connection::State::awaiting_request:
          read_request(connection);
          break;
        case Connection::State::queued:
        case Connection::State::running:
          read_while_active(connection);
          break;
        case Connection::State::replied:
          break;
      }
    }
    if (bridging_) bridge_.handle(fds.data() + bridge_first, fds.size() - bridge_first);
    if ((fds[0].revents & POLLIN) != 0) accept_all();
  }
}

}  // namespace

void serve(const SpawnConfig& config, const ServerResources& resources) {
  Server server(config, resources);
  server.run();
}

}  // namespace airlock::linux_backend::init
