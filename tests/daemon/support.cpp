#include "daemon/support.hpp"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"

namespace airlock::daemon::test {

// ---- temp dir --------------------------------------------------------------------------------

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "airlockd-test-XXXXXX").string();
  if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

// ---- the scripted sandbox --------------------------------------------------------------------

ScriptedSandbox::ScriptedSandbox(ScriptedBackend& backend, std::string instance_id, SandboxKey key,
                                 std::string kind)
    : InProcessSandbox(testing::InProcessSandboxOptions{.outputs = {},
                                                        .raises = nullptr,
                                                        .default_stdout = {},
                                                        .instance_id = std::move(instance_id),
                                                        .emulate_commands = true},
                       std::move(key), std::move(kind)),
      backend_(backend) {}

ExecResult ScriptedSandbox::exec(const Command& command, const ExecOptions& options) {
  const auto& argv = command.arguments();
  const auto started = std::chrono::steady_clock::now();
  ++backend_.running;
  struct Leave {
    ScriptedBackend& backend;
    ~Leave() { --backend.running; }
  } leave{backend_};
  ExecResult result;
  const std::string verb = argv.empty() ? "" : argv[0];
  // A trailing "unconfirmed" (sleep, flood): the backend cannot confirm the kill.
  const bool unconfirmed = argv.size() == 3 && argv[2] == "unconfirmed";
  const std::optional<bool> confirmed = unconfirmed ? std::nullopt : std::optional<bool>(true);
  if (verb == "sleep" && (argv.size() == 2 || unconfirmed)) {
    const auto wanted = std::chrono::milliseconds(std::stoll(argv[1]));
    const auto deadline = started + std::min<std::chrono::milliseconds>(wanted, options.timeout);
    std::mutex mutex;
    std::condition_variable_any sleeper;
    std::unique_lock lock(mutex);
    sleeper.wait_until(lock, options.stop, deadline, [] { return false; });
    if (options.stop.stop_requested()) {
      ++backend_.cancelled;
      throw Timeout("cancelled", confirmed);
    }
    if (wanted > options.timeout) {
      ++backend_.timed_out;
      throw Timeout(
          "the command did not finish within " + std::to_string(options.timeout.count()) + " ms",
          confirmed);
    }
  } else if (verb == "flood" && (argv.size() == 2 || unconfirmed)) {
    const auto bytes = std::stoull(argv[1]);
    if (options.max_output_bytes && bytes > *options.max_output_bytes) {
      if (options.overflow == OutputOverflow::refuse) {
        throw ExecOutputLimitExceeded(*options.max_output_bytes, confirmed);
      }
      result.stdout_bytes.assign(*options.max_output_bytes, 'x');
      result.truncated = true;
    } else {
      result.stdout_bytes.assign(bytes, 'x');
    }
  } else if (verb == "chunks" && argv.size() == 4) {
    // chunks A MS B: prints "A\n", then after MS milliseconds "B\n" on stderr, each handed to
    // on_output as it is printed (collected otherwise).
    const auto emit = [&](OutputStream stream, const std::string& text) {
      if (options.on_output) {
        options.on_output(stream, text);
      } else {
        (stream == OutputStream::stdout_stream ? result.stdout_bytes : result.stderr_bytes) += text;
      }
    };
    emit(OutputStream::stdout_stream, argv[1] + "\n");
    std::this_thread::sleep_for(std::chrono::milliseconds(std::stoll(argv[2])));
    emit(OutputStream::stderr_stream, argv[3] + "\n");
    ++backend_.completed;
    return result;
  } else if (verb == "fail") {
    throw BackendError("the sandbox provider failed",
                       "engine at /var/run/secret-engine.sock answered 500 for tenant-42");
  } else if (verb == "echo") {
    for (std::size_t i = 1; i < argv.size(); ++i) {
      result.stdout_bytes += (i > 1 ? " " : "") + argv[i];
    }
    result.stdout_bytes += "\n";
  } else if (verb == "stdin") {
    result.stdout_bytes = options.stdin_bytes;
  } else if (verb == "binary") {
    result.stdout_bytes = std::string("\xff\xfe\x00\x01", 4);
  } else if (verb == "pwd") {
    result.stdout_bytes = options.working_directory + "\n";
  } else if (verb == "exit" && argv.size() == 2) {
    result.exit_code = std::stoi(argv[1]);
  } else {
    // Anything else (a shell line, a shell road's commands) runs in the emulated shell.
    return InProcessSandbox::exec(command, options);
  }
  ++backend_.completed;
  deliver_collected_output(result, options);
  return result;
}

std::string ScriptedSandbox::read_file(std::string_view path, std::string_view working_directory,
                                       std::uint64_t max_bytes) {
  if (path == "denied" || path.ends_with("/denied")) {
    throw SystemError("'" + std::string(path) + "' is not readable", EACCES, std::string(path));
  }
  return InProcessSandbox::read_file(path, working_directory, max_bytes);
}

ScriptedBackend::ScriptedBackend(std::string name) : name_(std::move(name)) {}

std::shared_ptr<Sandbox> ScriptedBackend::acquire(const SandboxKey& key, const SandboxSpec& spec) {
  if (fail_acquire) throw BackendError("the provider could not create a sandbox", "detail");
  ++acquires_;
  std::lock_guard lock(mutex_);
  auto& slot = live_[{key, spec.kind(), spec.egress_posture()}];
  if (!slot) {
    slot = std::make_shared<ScriptedSandbox>(*this, name_ + "-" + std::to_string(next_instance_++),
                                             key, spec.kind());
    slot->seed_directory(spec.work_dir());
    // As a real backend labels it in durable state (short, label-safe values stay raw).
    labels_[slot->instance_id()] = sandbox_labels(key, spec);
  }
  return slot;
}

void ScriptedBackend::dispose(const SandboxKey& key) noexcept {
  std::lock_guard lock(mutex_);
  for (auto it = live_.begin(); it != live_.end();) {
    if (std::get<0>(it->first) == key) {
      disposed_.push_back(it->second->instance_id());
      it = live_.erase(it);
    } else {
      ++it;
    }
  }
}

bool ScriptedBackend::dispose_kind(const SandboxKey& key, std::string_view kind,
                                   std::optional<std::string_view> instance_id) noexcept {
  if (running > 0) ++disposed_while_running;
  std::lock_guard lock(mutex_);
  for (auto it = live_.begin(); it != live_.end();) {
    if (std::get<0>(it->first) == key && std::get<1>(it->first) == kind &&
        (!instance_id || it->second->instance_id() == *instance_id)) {
      disposed_.push_back(it->second->instance_id());
      it = live_.erase(it);
    } else {
      ++it;
    }
  }
  return true;
}

int ScriptedBackend::dispose_scope(std::string_view scope,
                                   std::optional<std::string_view> thread_id) noexcept {
  std::lock_guard lock(mutex_);
  int removed = 0;
  for (auto it = live_.begin(); it != live_.end();) {
    const SandboxKey& key = std::get<0>(it->first);
    if (key.scope == scope && (!thread_id || key.thread_id == *thread_id)) {
      disposed_.push_back(it->second->instance_id());
      it = live_.erase(it);
      ++removed;
    } else {
      ++it;
    }
  }
  return removed;
}

std::vector<SandboxRecord> ScriptedBackend::list_sandboxes() {
  std::lock_guard lock(mutex_);
  std::vector<SandboxRecord> records;
  for (const auto& [identity, sandbox] : live_) {
    SandboxRecord record;
    record.backend = name_;
    record.instance_id = sandbox->instance_id();
    record.kind = std::get<1>(identity);
    record.egress_posture = std::get<2>(identity);
    record.state = "running";
    if (auto found = labels_.find(record.instance_id); found != labels_.end()) {
      record.labels = found->second;
    }
    records.push_back(std::move(record));
  }
  return records;
}

std::shared_ptr<ScriptedSandbox> ScriptedBackend::live(const SandboxKey& key,
                                                       const std::string& kind) {
  std::lock_guard lock(mutex_);
  for (const auto& [identity, sandbox] : live_) {
    if (std::get<0>(identity) == key && std::get<1>(identity) == kind) return sandbox;
  }
  return nullptr;
}

std::size_t ScriptedBackend::live_count() const {
  std::lock_guard lock(mutex_);
  return live_.size();
}

std::vector<std::string> ScriptedBackend::disposed_instances() const {
  std::lock_guard lock(mutex_);
  return disposed_;
}

bool ScriptedBackend::was_disposed(const std::string& instance_id) const {
  std::lock_guard lock(mutex_);
  return std::find(disposed_.begin(), disposed_.end(), instance_id) != disposed_.end();
}

// ---- HTTP client -----------------------------------------------------------------------------

json::Json Reply::json() const {
  return json::Json::parse(body, nullptr, /*allow_exceptions=*/false);
}

json::Json Reply::error() const {
  const auto parsed = json();
  if (parsed.is_object() && parsed.contains("error")) return parsed["error"];
  return json::Json::object();
}

namespace {

size_t collect_body(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

size_t collect_header(char* data, size_t size, size_t count, void* out) {
  std::string line(data, size * count);
  const auto colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ')) value.erase(0, 1);
    while (!value.empty() && (value.back() == '\r' || value.back() == '\n')) value.pop_back();
    (*static_cast<std::map<std::string, std::string>*>(out))[name] = value;
  }
  return size * count;
}

}  // namespace

Client::Client(std::string socket_path, std::string tcp_base)
    : socket_path_(std::move(socket_path)), tcp_base_(std::move(tcp_base)) {}

Reply Client::request(const std::string& method, const std::string& target, const std::string& body,
                      const std::vector<std::string>& headers, long timeout_ms) const {
  Reply reply;
  CURL* curl = curl_easy_init();
  if (!curl) throw std::runtime_error("curl_easy_init failed");
  const std::string url = (tcp_base_.empty() ? std::string("http://airlockd") : tcp_base_) + target;
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  if (tcp_base_.empty()) curl_easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, socket_path_.c_str());
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method.c_str());
  curl_slist* list = nullptr;
  list = curl_slist_append(list, "Expect:");  // no 100-continue round trip
  for (const auto& header : headers) list = curl_slist_append(list, header.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
  if (!body.empty() || method == "POST" || method == "PUT") {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  }
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &collect_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &reply.body);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &collect_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &reply.headers);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  const CURLcode code = curl_easy_perform(curl);
  if (code == CURLE_OK) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &reply.status);
  curl_slist_free_all(list);
  curl_easy_cleanup(curl);
  if (code != CURLE_OK) {
    throw std::runtime_error(method + " " + target + ": " + curl_easy_strerror(code));
  }
  return reply;
}

// ---- raw sockets -----------------------------------------------------------------------------

int connect_unix(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    const int error = errno;
    close(fd);
    throw std::runtime_error("connect " + path + ": " + std::strerror(error));
  }
  return fd;
}

int connect_tcp(const std::string& host_port) {
  const auto colon = host_port.rfind(':');
  std::string host = host_port.substr(0, colon);
  if (!host.empty() && host.front() == '[') host = host.substr(1, host.size() - 2);
  const std::string port = host_port.substr(colon + 1);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || !found) {
    throw std::runtime_error("cannot resolve " + host_port);
  }
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int connected = connect(fd, found->ai_addr, found->ai_addrlen);
  freeaddrinfo(found);
  if (connected != 0) {
    close(fd);
    throw std::runtime_error("connect " + host_port + " failed");
  }
  return fd;
}

void send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t sent = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (sent <= 0) {
      if (sent < 0 && errno == EINTR) continue;
      throw std::runtime_error(std::string("send failed: ") + std::strerror(errno));
    }
    data.remove_prefix(static_cast<std::size_t>(sent));
  }
}

std::optional<std::string> read_until_closed(int fd, std::chrono::milliseconds within) {
  std::string received;
  const auto deadline = std::chrono::steady_clock::now() + within;
  char buffer[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd watched{fd, POLLIN, 0};
    const int ready = poll(&watched, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return std::nullopt;
    const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    if (n == 0) return received;
    if (n < 0) {
      if (errno == EINTR) continue;
      return received;  // reset by the peer counts as closed
    }
    received.append(buffer, static_cast<std::size_t>(n));
  }
}

std::string url_encode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0x0f]);
    }
  }
  return out;
}

std::size_t open_fd_count() {
  std::size_t count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    (void)entry;
    ++count;
  }
  return count;
}

namespace {
// The numeric entries of /proc: one per process.
template <typename Visit>
void for_each_process(Visit visit) {
  std::error_code error;
  for (auto it = std::filesystem::directory_iterator("/proc", error);
       !error && it != std::filesystem::directory_iterator(); it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.find_first_not_of("0123456789") == std::string::npos) visit(it->path());
  }
}
}  // namespace

std::size_t processes_running(const std::vector<std::string>& argv) {
  std::string wanted;
  for (const auto& arg : argv) wanted += arg + '\0';
  std::size_t count = 0;
  for_each_process([&](const std::filesystem::path& process) {
    // read(2), not a stream: a process may vanish mid-read, and a short answer is simply no match.
    const int fd = ::open((process / "cmdline").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    std::string cmdline(wanted.size() + 1, '\0');
    const ssize_t got = ::read(fd, cmdline.data(), cmdline.size());
    ::close(fd);
    if (got == static_cast<ssize_t>(wanted.size()) &&
        cmdline.compare(0, wanted.size(), wanted) == 0) {
      ++count;
    }
  });
  return count;
}

std::size_t airlock_helper_processes() {
  // The test binaries live in <build>/tests/daemon/.
  const std::string tree =
      std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path().parent_path();
  std::size_t count = 0;
  for_each_process([&](const std::filesystem::path& process) {
    std::error_code error;
    const auto exe = std::filesystem::read_symlink(process / "exe", error);
    if (!error && exe.filename().string().rfind("airlock-", 0) == 0 &&
        exe.string().rfind(tree + "/", 0) == 0) {
      ++count;
    }
  });
  return count;
}

// ---- the daemon fixture ----------------------------------------------------------------------

DaemonFixture::DaemonFixture(std::shared_ptr<SandboxBackend> given,
                             std::function<void(DaemonOptions&)> adjust) {
  if (given) {
    backend = std::move(given);
    scripted = std::dynamic_pointer_cast<ScriptedBackend>(backend);
  } else {
    scripted = std::make_shared<ScriptedBackend>();
    backend = scripted;
  }
  options.socket_path = (dir.path() / "airlockd.sock").string();
  options.state_dir = dir.path() / "state";
  options.server.header_deadline = 2s;
  options.server.body_deadline = 5s;
  options.server.idle_timeout_seconds = 10;
  options.api.admission_timeout = 5s;
  options.shutdown_grace = 5s;
  // scripts/test.d/10-unit.sh holds every exchange against docs/api/openapi.yaml.
  if (const char* log = std::getenv("AIRLOCK_EXCHANGE_LOG")) options.exchange_log = log;
  if (adjust) adjust(options);
  RouterOptions router_options;
  router_options.min_isolation = Isolation::container;
  daemon = std::make_unique<Daemon>(
      options, std::make_unique<SandboxRouter>(
                   std::vector<std::shared_ptr<SandboxBackend>>{backend}, router_options));
  daemon->start();
  client = std::make_unique<Client>(options.socket_path, daemon->tcp_address().empty()
                                                             ? std::string()
                                                             : "http://" + daemon->tcp_address());
  if (!options.tcp.empty()) client = std::make_unique<Client>(options.socket_path);
}

DaemonFixture::~DaemonFixture() {
  if (daemon) daemon->shutdown();
}

json::Json DaemonFixture::default_spec() {
  return json::Json{{"kind", "deepagents"}, {"requires", {"exec", "files_in", "files_out"}}};
}

json::Json DaemonFixture::key(const std::string& scope, const std::string& thread,
                              const std::string& agent) {
  return json::Json{{"scope", scope}, {"thread_id", thread}, {"agent_dir", agent}};
}

std::string DaemonFixture::acquire(const json::Json& key_json, const json::Json& spec) {
  const Reply reply = client->post("/v1/sandboxes", {{"key", key_json}, {"spec", spec}});
  EXPECT_TRUE(reply.status == 200 || reply.status == 201) << reply.status << " " << reply.body;
  return reply.json().value("sandbox", "");
}

Reply DaemonFixture::exec(const std::string& handle, const json::Json& body) const {
  return client->post("/v1/sandboxes/" + handle + "/exec", body);
}

}  // namespace airlock::daemon::test
