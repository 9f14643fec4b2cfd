// The socket channel, request answering shared by both channels, and the channel choice.
#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "airlock/host_tool_transport.hpp"
#include "airlock/paths.hpp"
#include "core/host_tools/host_tool_internal.hpp"

namespace airlock {

std::optional<std::string> answer_request(HostToolRun& run, bool too_large,
                                          const std::string& request) {
  auto refusal = [](const char* sentence) { return json::Json{{"refusal", sentence}}.dump(); };
  if (too_large) {
    return refusal("Error: this host-tool request is larger than the host will read — pass less, "
                   "or write what you have to a file instead");
  }
  json::Json body;
  try {
    body = json::parse_text(request, "host-tool request");
  } catch (const InvalidArgument&) {
    return refusal("Error: this host-tool request is not valid JSON");
  }
  if (!body.is_object()) return refusal("Error: a host-tool request must be a JSON object");
  if (auto abandoned = body.find("abandoned");
      abandoned != body.end() && abandoned->is_boolean() && abandoned->get<bool>()) {
    return std::nullopt;
  }
  const json::Json name = body.contains("name") ? body["name"] : json::Json(nullptr);
  const json::Json arguments = body.contains("arguments") ? body["arguments"] : json::Json(nullptr);
  DispatchResult result = run.dispatch(name, arguments, kResponseFramingBytes);
  if (result.ok()) return "{\"value\": " + *result.value_json + "}";
  return json::Json{{"refusal", *result.refusal}}.dump();
}

namespace {

// Listens on one unix socket for one run and answers each connection's single request line.
// One thread, poll()-driven: a guest that connects and never finishes its line holds no thread
// and blocks no other caller.
class SocketChannelServer {
 public:
  // `directory` may itself be a /proc/self/fd/N name (a backend whose channel directory no host
  // path reaches): it is opened once here and the socket is named through this server's own
  // descriptor, so the socket's path stays valid for exactly as long as the server lives.
  SocketChannelServer(HostToolRun& run, const std::string& directory, const std::string& name)
      : run_(run) {
    directory_ = ::open(directory.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (directory_ < 0) {
      throw SystemError("the host-tool channel's directory could not be opened", errno);
    }
    path_ = "/proc/self/fd/" + std::to_string(directory_) + "/" + name;
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (path_.size() >= sizeof(address.sun_path)) {
      ::close(directory_);
      throw BackendError("the host-tool socket path is too long for a unix socket");
    }
    std::memcpy(address.sun_path, path_.c_str(), path_.size() + 1);
    listener_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (listener_ < 0) {
      const int error = errno;
      ::close(directory_);
      throw SystemError("socket() for the host-tool channel failed", error);
    }
    ::unlink(path_.c_str());
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::chmod(path_.c_str(), 0666) != 0 || ::listen(listener_, 16) != 0) {
      const int error = errno;
      ::close(listener_);
      ::unlink(path_.c_str());
      ::close(directory_);
      throw SystemError("the host-tool channel could not listen", error);
    }
    if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
      const int error = errno;
      ::close(listener_);
      ::unlink(path_.c_str());
      ::close(directory_);
      throw SystemError("pipe2() for the host-tool channel failed", error);
    }
    thread_ = std::jthread([this] { serve(); });
  }

  ~SocketChannelServer() {
    stopping_ = true;
    char byte = 1;
    (void)!::write(wake_[1], &byte, 1);
    thread_.join();
    for (auto& [fd, unused] : connections_) ::close(fd);
    ::close(listener_);
    ::close(wake_[0]);
    ::close(wake_[1]);
    ::unlink(path_.c_str());
    ::close(directory_);
  }

  SocketChannelServer(const SocketChannelServer&) = delete;
  SocketChannelServer& operator=(const SocketChannelServer&) = delete;

 private:
  struct Connection {
    std::string buffer;
    bool too_large = false;
  };

  void serve() {
    const std::uint64_t cap = run_response_limits(run_).max_bytes_per_file;
    while (!stopping_) {
      std::vector<pollfd> fds{{listener_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      for (const auto& [fd, unused] : connections_) fds.push_back({fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) break;
      if (fds[1].revents != 0) break;
      if (fds[0].revents & POLLIN) {
        for (;;) {
          const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
          if (fd < 0) break;
          // A guest flooding the channel gets refused rather than served: past the allowance
          // (the cap plus the one call that was told so) nothing more is read, as on the files
          // channel, which stops looking for requests.
          if (connections_.size() >= kMaxConnections ||
              run_.dispatched() >= run_max_dispatches(run_) + 1) {
            ::close(fd);
            continue;
          }
          connections_[fd] = Connection{};
        }
      }
      for (std::size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        const int fd = fds[i].fd;
        Connection& connection = connections_[fd];
        char chunk[65536];
        const ssize_t got = ::read(fd, chunk, sizeof chunk);
        if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        bool finished = got <= 0;
        if (got > 0) {
          const std::string_view data(chunk, static_cast<std::size_t>(got));
          const auto newline = data.find('\n');
          if (!connection.too_large) connection.buffer.append(data.substr(0, newline));
          if (connection.buffer.size() > cap) {
            connection.too_large = true;
            connection.buffer.clear();
          }
          finished = newline != std::string_view::npos;
        }
        if (finished) {
          if (got > 0 || !connection.buffer.empty() || connection.too_large) {
            answer(fd, connection);
          }
          ::close(fd);
          connections_.erase(fd);
        }
      }
    }
  }

  void answer(int fd, const Connection& connection) {
    std::optional<std::string> reply = answer_request(run_, connection.too_large,
                                                      connection.buffer);
    if (!reply) return;
    reply->push_back('\n');
    // The answer is bounded by the response caps; a reader that stops reading gets cut off.
    const int flags = ::fcntl(fd, F_GETFL);
    ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    timeval timeout{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
    std::size_t sent = 0;
    while (sent < reply->size()) {
      const ssize_t wrote = ::send(fd, reply->data() + sent, reply->size() - sent, MSG_NOSIGNAL);
      if (wrote <= 0) {
        if (wrote < 0 && errno == EINTR) continue;
        spdlog::warn("a host-tool answer could not be delivered over the socket");
        return;
      }
      sent += static_cast<std::size_t>(wrote);
    }
  }

  static constexpr std::size_t kMaxConnections = 64;
  HostToolRun& run_;
  int directory_ = -1;
  std::string path_;
  int listener_ = -1;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
  std::map<int, Connection> connections_;
  std::jthread thread_;
};

std::string random_token() {
  unsigned char bytes[9];
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::read(fd, bytes, sizeof bytes) != static_cast<ssize_t>(sizeof bytes)) {
    if (fd >= 0) ::close(fd);
    throw SystemError("could not read /dev/urandom", errno);
  }
  ::close(fd);
  std::string token = base64_encode(std::string_view(reinterpret_cast<char*>(bytes), sizeof bytes));
  for (char& c : token) {
    if (c == '+') c = '-';
    if (c == '/') c = '_';
  }
  return token;
}

ExecResult run_over_socket(Sandbox& sandbox, HostToolRun& run, const GuestRunLayout& layout,
                           const HostToolRunOptions& options,
                           const Sandbox::SocketChannel& channel) {
  if (options.timeout.count() <= 0) throw InvalidArgument("timeout must be positive", "timeout");
  const std::string name = "tools-" + random_token() + ".sock";
  struct TransportRemoval {
    Sandbox& sandbox;
    const GuestRunLayout& layout;
    ~TransportRemoval() { remove_transport(sandbox, layout); }
  } removal{sandbox, layout};
  SocketChannelServer server(run, channel.host_directory, name);

  const std::string tools = layout.shim.substr(0, layout.shim.rfind('/'));
  ExecOptions exec;
  exec.working_directory = layout.work;
  exec.timeout = options.timeout;
  exec.max_output_bytes = run_response_limits(run).max_total_bytes;
  exec.overflow = OutputOverflow::truncate;
  exec.environment = {{"PYTHONPATH", tools},
                      {"PYTHONNOUSERSITE", "1"},
                      {"PYTHONUNBUFFERED", "1"},
                      {"AIRLOCK_HOST_TOOLS_SOCKET", channel.guest_directory + "/" + name}};
  // The work directory is the program's cwd; the caller shares files into it, and it may not
  // exist yet when nothing was shared.
  sandbox.exec(Command::argv({"mkdir", "-p", "--", layout.work}),
               ExecOptions{.working_directory = "/", .timeout = options.timeout});
  ExecResult result;
  try {
    // stderr joins stdout in order, as the files channel's `2>&1` does.
    result = sandbox.exec(Command::argv({"sh", "-c", "exec \"$0\" \"$1\" 2>&1",
                                         options.interpreter, layout.program}),
                          exec);
  } catch (const Timeout& timeout) {
    const std::string printed =
        timeout_output_quote(timeout.partial_stdout() + timeout.partial_stderr());
    const bool confirmed = timeout.kill_confirmed().value_or(false);
    // Only a confirmed kill is reported as the group stopped: a kill the backend could not
    // confirm leaves the run's end unknown, and a caller deciding whether to keep the sandbox
    // must read it so.
    StopOutcome stop{confirmed ? SignalOutcome::sent : SignalOutcome::unknown,
                     confirmed ? SignalReach::group : SignalReach::nothing};
    std::string clause = signal_clause(stop);
    if (confirmed) clause += ", and the group is confirmed gone";
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%g",
                  static_cast<double>(options.timeout.count()) / 1000.0);
    throw ProgramTimeout(std::string("the program ran past the run's ") + seconds + "s" + clause +
                             output_so_far(printed),
                         printed, stop.signal, stop.reach);
  }
  if (result.truncated) {
    // The files channel drops an over-cap output whole; so does this one.
    result.stdout_bytes.clear();
    result.stderr_bytes =
        "the program's output was larger than the host will read and was not returned; have the "
        "program write what it needs to a file the run collects instead";
    result.truncated = false;
  } else {
    result.stdout_bytes = decode_utf8_lossy(result.stdout_bytes);
  }
  return result;
}

}  // namespace

HostToolRunResult run_program_with_host_tools(Sandbox& sandbox, HostToolRun& run,
                                              const GuestRunLayout& layout,
                                              const HostToolRunOptions& options) {
  std::optional<Sandbox::SocketChannel> channel;
  if (options.channel != HostToolChannel::files) channel = sandbox.socket_channel();
  if (options.channel == HostToolChannel::socket && !channel) {
    throw NotSupported("this sandbox offers no socket channel for host tools");
  }
  HostToolRunResult out;
  if (channel) {
    out.channel = HostToolChannel::socket;
    out.result = run_over_socket(sandbox, run, layout, options, *channel);
  } else {
    out.channel = HostToolChannel::files;
    out.result = dispatch_over_exec(sandbox, run, layout, options);
  }
  return out;
}

}  // namespace airlock
