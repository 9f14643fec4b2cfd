// `airlock bench --only daemon`: what airlockd itself adds to a request, one client, sequential,
// against the target of ≤ 1 ms p50 (issue 22). The daemon serves the in-process `testing`
// backend, so a sandbox costs next to nothing and what remains is the daemon: HTTP parsing,
// routing, admission, the handle store and the JSON both ways.
//
//   GET /v1/health                     the cheapest route
//   exec {"argv": ["true"]}            on a sandbox acquired before the timing starts
//   cold acquire, then purge           a new conversation each round (reported, no target)
//
// Each figure is the whole round trip the client sees, so holding it to 1 ms is the stricter
// reading of the target: the part that is not the daemon's is inside it too.
//
// Beside each, the same request answered with the same body by a trivial HTTP server in this
// process, on a unix socket, through the same libcurl client: the part of the figure that is the
// socket, the client and HTTP itself rather than the daemon. Daemon and baseline alternate, so both
// meet the same machine state. Both connection modes a host uses are measured: keep-alive (one
// connection for every request, which the daemon supports) and a new connection per request (as
// the load test's client does, and as the daemon then starts a connection thread each time).
//
// airlockd-testing is a test target (the shipped airlockd has no testing backend), so it is found
// when the bench runs, never built for it: $AIRLOCKD_TESTING, else the build tree this program
// runs from. Without it the group is reported as skipped.
#include <curl/curl.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "airlock/json.hpp"
#include "base/syscall_error.hpp"
#include "base/unique_fd.hpp"
#include "bench.hpp"

extern char** environ;

// A named namespace: the unity build may compile this group in one unit with the others.
namespace airlock::bench::daemon_overhead {
namespace {

using namespace std::chrono_literals;

// The bench binary is built into <build>/src/cli/, the daemon into <build>/tests/daemon/.
std::optional<std::filesystem::path> find_airlockd_testing(std::string& why) {
  if (const char* named = std::getenv("AIRLOCKD_TESTING"); named && *named) {
    if (::access(named, X_OK) == 0) return std::filesystem::path(named);
    why = std::string("AIRLOCKD_TESTING names ") + named + ", which is not an executable file";
    return std::nullopt;
  }
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  const auto built =
      self.parent_path().parent_path().parent_path() / "tests/daemon/airlockd-testing";
  if (!error && ::access(built.c_str(), X_OK) == 0) return built;
  why =
      "airlockd-testing (the daemon over the testing backend, a test target) is not set in "
      "AIRLOCKD_TESTING and not built at " +
      built.string() + ": build the target airlockd-testing or set AIRLOCKD_TESTING";
  return std::nullopt;
}

// airlockd-testing on a unix socket in `directory`, serving the testing backend; SIGTERM and
// waited for when it goes out of scope.
class DaemonProcess {
 public:
  DaemonProcess(const std::filesystem::path& binary, const std::filesystem::path& directory)
      : socket_((directory / "airlockd.sock").string()) {
    const auto config = directory / "router.json";
    const auto ready = directory / "ready.json";
    const json::Json router{
        {"backends", {{{"type", "testing"}, {"capabilities", {"exec", "files_in", "files_out"}}}}},
        {"min_isolation", "none"}};
    std::ofstream(config) << router.dump();
    const std::vector<std::string> argv{binary.string(),
                                        "--config",
                                        config.string(),
                                        "--socket",
                                        socket_,
                                        "--state-dir",
                                        (directory / "state").string(),
                                        "--ready-file",
                                        ready.string(),
                                        "--log-level",
                                        "warn"};
    std::vector<char*> arguments;
    for (const auto& argument : argv) arguments.push_back(const_cast<char*>(argument.c_str()));
    arguments.push_back(nullptr);
    // Its stdout would land in the bench's tables (or its --json document); its log stays on
    // stderr, where a warning from it is seen.
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    const int failed =
        ::posix_spawn(&pid_, arguments[0], &actions, nullptr, arguments.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (failed != 0) base::throw_errno(failed, "posix_spawn", binary.string());
    // The ready file is renamed into place once the socket is serving.
    const auto deadline = BenchClock::now() + 30s;
    while (!std::filesystem::exists(ready)) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error(binary.string() + " exited before it was serving (status " +
                                 std::to_string(status) + ")");
      }
      if (BenchClock::now() > deadline) {
        stop();
        throw std::runtime_error(binary.string() + " was not serving within 30 s");
      }
      std::this_thread::sleep_for(5ms);
    }
  }
  ~DaemonProcess() { stop(); }
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  // SIGTERM, and the exit code it ended with (128 + the signal when one ended it). A daemon still
  // there after its drain is killed, so that no run leaves one behind.
  int stop() {
    if (pid_ <= 0) return 0;
    ::kill(pid_, SIGTERM);
    int status = 0;
    const auto deadline = BenchClock::now() + 20s;
    while (::waitpid(pid_, &status, WNOHANG) != pid_) {
      if (BenchClock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
        break;
      }
      std::this_thread::sleep_for(5ms);
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  const std::string& socket() const { return socket_; }

 private:
  std::string socket_;
  pid_t pid_ = -1;
};

// The baseline: an HTTP/1.1 server that reads each request whole (headers, then Content-Length
// bytes of body) and answers 200 with the body it was last given. One connection at a time, as
// the bench has one client; keep-alive until the client closes.
class RawHttpServer {
 public:
  explicit RawHttpServer(const std::filesystem::path& socket_path)
      : listener_(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    if (!listener_) base::throw_errno("socket");
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, socket_path.c_str(), sizeof address.sun_path - 1);
    if (::bind(listener_.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      base::throw_errno("bind", socket_path.string());
    }
    if (::listen(listener_.get(), 64) != 0) base::throw_errno("listen", socket_path.string());
    int ends[2];
    if (::pipe2(ends, O_CLOEXEC) != 0) base::throw_errno("pipe2");
    stop_read_.reset(ends[0]);
    stop_write_.reset(ends[1]);
    server_ = std::thread([this] { accept_loop(); });
  }
  ~RawHttpServer() {
    const char byte = 's';
    (void)!::write(stop_write_.get(), &byte, 1);
    server_.join();
  }
  RawHttpServer(const RawHttpServer&) = delete;
  RawHttpServer& operator=(const RawHttpServer&) = delete;

  // What the next answers carry: the daemon's own body for the request being mirrored.
  void answer_with(const std::string& body) {
    std::string response = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n" + body;
    std::lock_guard lock(mutex_);
    response_ = std::move(response);
  }

 private:
  // Waits for `fd` to be readable; false once the bench asked the server to stop.
  bool readable(int fd) const {
    pollfd watched[2] = {{fd, POLLIN, 0}, {stop_read_.get(), POLLIN, 0}};
    for (;;) {
      const int ready = ::poll(watched, 2, -1);
      if (ready < 0 && errno == EINTR) continue;
      return ready > 0 && (watched[1].revents & POLLIN) == 0;
    }
  }
  void accept_loop() {
    while (readable(listener_.get())) {
      base::UniqueFd connection(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (connection && !serve(connection.get())) return;
    }
  }
  // Answers the connection's requests until the client closes it; false when told to stop.
  bool serve(int fd) {
    std::string received;
    char buffer[16 * 1024];
    for (;;) {
      const auto headers_end = received.find("\r\n\r\n");
      if (headers_end != std::string::npos) {
        const std::size_t length = content_length(received.substr(0, headers_end));
        if (received.size() >= headers_end + 4 + length) {
          received.erase(0, headers_end + 4 + length);
          std::string response;
          {
            std::lock_guard lock(mutex_);
            response = response_;
          }
          if (!send_whole(fd, response)) return true;
          continue;
        }
      }
      if (!readable(fd)) return false;
      const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return true;
      received.append(buffer, static_cast<std::size_t>(n));
    }
  }
  static std::size_t content_length(std::string headers) {
    for (auto& c : headers) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const auto at = headers.find("\r\ncontent-length:");
    return at == std::string::npos ? 0 : std::strtoul(headers.c_str() + at + 17, nullptr, 10);
  }
  static bool send_whole(int fd, std::string_view data) {
    while (!data.empty()) {
      const ssize_t sent = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
      if (sent < 0 && errno == EINTR) continue;
      if (sent <= 0) return false;
      data.remove_prefix(static_cast<std::size_t>(sent));
    }
    return true;
  }

  base::UniqueFd listener_;
  base::UniqueFd stop_read_;
  base::UniqueFd stop_write_;
  std::mutex mutex_;
  std::string response_;
  std::thread server_;  // last: it runs on everything above
};

enum class Connection { keep_alive, new_per_request };

const char* connection_name(Connection connection) {
  return connection == Connection::keep_alive ? "keep-alive" : "new connection each";
}

// The same, as it may appear in a conversation key.
const char* connection_slug(Connection connection) {
  return connection == Connection::keep_alive ? "keep-alive" : "new-connection";
}

struct Answer {
  long status = 0;
  std::string body;
};

// HTTP over a unix socket with one libcurl handle, which holds its connection between requests
// unless told to open a new one for each. Every transfer is checked to have done what the mode
// says, so a figure labelled keep-alive never hides a reconnect.
class HttpClient {
 public:
  HttpClient(std::string socket_path, Connection connection)
      : socket_path_(std::move(socket_path)), connection_(connection), curl_(curl_easy_init()) {
    if (!curl_) throw std::runtime_error("curl_easy_init failed");
    headers_ = curl_slist_append(headers_, "Expect:");  // no 100-continue round trip
    headers_ = curl_slist_append(headers_, "Content-Type: application/json");
  }
  ~HttpClient() {
    curl_slist_free_all(headers_);
    curl_easy_cleanup(curl_);
  }
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // A POST when `body` is set, else a GET.
  Answer request(const std::string& target, const std::optional<std::string>& body = {}) {
    Answer answer;
    // Reset keeps the handle's connection; it clears the previous request's method and body.
    curl_easy_reset(curl_);
    const std::string url = "http://airlockd" + target;
    curl_easy_setopt(curl_, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl_, CURLOPT_UNIX_SOCKET_PATH, socket_path_.c_str());
    curl_easy_setopt(curl_, CURLOPT_HTTPHEADER, headers_);
    if (body) {
      curl_easy_setopt(curl_, CURLOPT_POSTFIELDS, body->data());
      curl_easy_setopt(curl_, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body->size()));
    }
    if (connection_ == Connection::new_per_request) {
      curl_easy_setopt(curl_, CURLOPT_FRESH_CONNECT, 1L);
      curl_easy_setopt(curl_, CURLOPT_FORBID_REUSE, 1L);
    }
    curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, &collect);
    curl_easy_setopt(curl_, CURLOPT_WRITEDATA, &answer.body);
    curl_easy_setopt(curl_, CURLOPT_TIMEOUT_MS, 30'000L);
    curl_easy_setopt(curl_, CURLOPT_NOSIGNAL, 1L);
    const CURLcode code = curl_easy_perform(curl_);
    if (code != CURLE_OK) {
      throw std::runtime_error(target + " on " + socket_path_ + ": " + curl_easy_strerror(code));
    }
    curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &answer.status);
    long opened = 0;
    curl_easy_getinfo(curl_, CURLINFO_NUM_CONNECTS, &opened);
    const long expected = connection_ == Connection::new_per_request || !connected_ ? 1 : 0;
    if (opened != expected) {
      throw std::runtime_error(target + " on " + socket_path_ + " opened " +
                               std::to_string(opened) + " connection(s) where " +
                               connection_name(connection_) + " opens " + std::to_string(expected));
    }
    connected_ = true;
    return answer;
  }

 private:
  static size_t collect(char* data, size_t size, size_t count, void* out) {
    static_cast<std::string*>(out)->append(data, size * count);
    return size * count;
  }

  std::string socket_path_;
  Connection connection_;
  CURL* curl_;
  curl_slist* headers_ = nullptr;
  bool connected_ = false;
};

Answer expect(long status, Answer answer, const std::string& what) {
  if (answer.status != status) {
    throw std::runtime_error(what + " answered " + std::to_string(answer.status) + " where " +
                             std::to_string(status) + " was expected: " + answer.body);
  }
  return answer;
}

constexpr const char* kScope = "airlock-bench-daemon";

json::Json conversation(const std::string& thread) {
  return {{"scope", kScope}, {"thread_id", thread}, {"agent_dir", "agent"}};
}

const json::Json& bench_spec() {
  static const json::Json spec{{"kind", "bench"}, {"requires", {"exec"}}};
  return spec;
}

// A daemon row and its baseline row, filled in alternation.
struct Pair {
  Stats daemon;
  Stats raw;
};

Pair named_pair(const std::string& request, Connection connection) {
  Pair pair;
  pair.daemon.subject = "daemon " + request + ", " + connection_name(connection);
  pair.raw.subject = "raw HTTP as " + request + ", " + connection_name(connection);
  return pair;
}

// One timed request to the daemon, then the same request to the raw server answered with the
// daemon's body; both samples are kept unless this is a warm-up round.
Answer timed_pair(Pair& pair, bool keep, HttpClient& daemon, HttpClient& raw,
                  RawHttpServer& raw_server, const std::string& target,
                  const std::optional<std::string>& body) {
  auto start = BenchClock::now();
  Answer answer = daemon.request(target, body);
  const double daemon_ms = elapsed_ms(start);
  raw_server.answer_with(answer.body);
  start = BenchClock::now();
  raw.request(target, body);
  const double raw_ms = elapsed_ms(start);
  if (keep) {
    pair.daemon.samples.push_back(daemon_ms);
    pair.raw.samples.push_back(raw_ms);
  }
  return answer;
}

void run_daemon_group(BenchRun& run) {
  std::string why;
  const auto binary = find_airlockd_testing(why);
  if (!binary) {
    run.skipped("daemon", why);
    return;
  }
  ScratchDirectory scratch("airlock-bench-daemon");
  DaemonProcess daemon(*binary, scratch.path);
  RawHttpServer raw_server(scratch.path / "raw.sock");
  const std::string raw_socket = (scratch.path / "raw.sock").string();

  Stats one_millisecond;
  one_millisecond.subject = "1 ms (target)";
  one_millisecond.samples = {1.0};
  const Stats& target = run.record(one_millisecond);
  const int warmup = 5;
  const int rounds = run.iterations(500);
  const int cold_rounds = run.iterations(200);

  for (const Connection connection : {Connection::keep_alive, Connection::new_per_request}) {
    const std::string mode = connection_slug(connection);
    HttpClient to_daemon(daemon.socket(), connection);
    HttpClient to_raw(raw_socket, connection);

    Pair health = named_pair("GET /v1/health", connection);
    for (int i = -warmup; i < rounds; ++i) {
      expect(200, timed_pair(health, i >= 0, to_daemon, to_raw, raw_server, "/v1/health", {}),
             "GET /v1/health");
    }

    const std::string held_thread = "held-" + mode;
    const Answer acquired =
        expect(201,
               to_daemon.request(
                   "/v1/sandboxes",
                   json::Json{{"key", conversation(held_thread)}, {"spec", bench_spec()}}.dump()),
               "POST /v1/sandboxes");
    const std::string exec_target =
        "/v1/sandboxes/" + json::Json::parse(acquired.body).at("sandbox").get<std::string>() +
        "/exec";
    const std::string exec_body = json::Json{{"argv", {"true"}}}.dump();
    Pair exec = named_pair("exec true, held sandbox", connection);
    for (int i = -warmup; i < rounds; ++i) {
      expect(200, timed_pair(exec, i >= 0, to_daemon, to_raw, raw_server, exec_target, exec_body),
             "POST " + exec_target);
    }

    Pair acquire = named_pair("POST /v1/sandboxes, cold", connection);
    Pair purge = named_pair("POST /v1/purge, one thread", connection);
    for (int i = -warmup; i < cold_rounds; ++i) {
      const std::string thread = "cold-" + std::to_string(i + warmup) + "-" + mode;
      const std::string acquire_body =
          json::Json{{"key", conversation(thread)}, {"spec", bench_spec()}}.dump();
      expect(
          201,
          timed_pair(acquire, i >= 0, to_daemon, to_raw, raw_server, "/v1/sandboxes", acquire_body),
          "POST /v1/sandboxes");
      const std::string purge_body = json::Json{{"scope", kScope}, {"thread_id", thread}}.dump();
      const Answer purged = expect(
          200, timed_pair(purge, i >= 0, to_daemon, to_raw, raw_server, "/v1/purge", purge_body),
          "POST /v1/purge");
      if (json::Json::parse(purged.body).value("handles_forgotten", 0) != 1) {
        throw std::runtime_error("the purge of " + thread + " forgot no handle: " + purged.body);
      }
    }

    for (Pair* pair : {&health, &exec, &acquire, &purge}) {
      const Stats& daemon_stats = run.record(pair->daemon);
      const Stats& raw_stats = run.record(pair->raw);
      const bool has_target = pair == &health || pair == &exec;
      run.ratio(daemon_stats.subject + " / 1 ms (target)", daemon_stats, target,
                has_target ? std::optional<double>(1.0) : std::nullopt);
      run.ratio(daemon_stats.subject + " / raw HTTP", daemon_stats, raw_stats, std::nullopt);
    }
  }

  // Nothing of the run stays in the daemon; then it must stop as it does for an operator.
  HttpClient last(daemon.socket(), Connection::new_per_request);
  expect(200, last.request("/v1/purge", json::Json{{"scope", kScope}}.dump()), "POST /v1/purge");
  if (const int code = daemon.stop(); code != 0) {
    throw std::runtime_error(binary->string() + " exited with " + std::to_string(code) +
                             " on SIGTERM");
  }
}

const bool kDaemonBenchGroup = register_bench_group(
    "daemon",
    "airlockd's own request overhead over the testing backend, one client: health, exec, cold "
    "acquire and purge vs a raw HTTP round trip on a unix socket, against 1 ms",
    run_daemon_group);

}  // namespace
}  // namespace airlock::bench::daemon_overhead
