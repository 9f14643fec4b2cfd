#include "double_process.hpp"

#include <curl/curl.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#ifndef AIRLOCK_ACAS_DOUBLE
#error "AIRLOCK_ACAS_DOUBLE must name the airlock-acas-double program"
#endif

extern char** environ;

namespace airlock::acas_double::testing {
namespace {

std::size_t append_body(char* data, std::size_t size, std::size_t count, void* into) {
  static_cast<std::string*>(into)->append(data, size * count);
  return size * count;
}

std::size_t append_header(char* data, std::size_t size, std::size_t count, void* into) {
  const std::string line(data, size * count);
  const std::size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    std::string value = line.substr(colon + 1);
    while (!value.empty() && std::isspace(static_cast<unsigned char>(value.front()))) value.erase(0, 1);
    while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back()))) value.pop_back();
    (*static_cast<std::map<std::string, std::string>*>(into))[name] = value;
  }
  return size * count;
}

std::string read_all(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace

HttpAnswer http_call(const HttpCall& call) {
  static std::once_flag initialised;
  std::call_once(initialised, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  HttpAnswer answer;
  CURL* curl = curl_easy_init();
  if (curl == nullptr) {
    answer.error = "curl_easy_init failed";
    return answer;
  }
  curl_slist* headers = nullptr;
  for (const auto& header : call.headers) headers = curl_slist_append(headers, header.c_str());
  headers = curl_slist_append(headers, "Expect:");
  curl_easy_setopt(curl, CURLOPT_URL, call.url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(call.timeout.count()));
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  if (call.method == "GET") {
    curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
  } else {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, call.method.c_str());
  }
  if (call.body) {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, call.body->data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(call.body->size()));
  }
  if (!call.ca_file.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, call.ca_file.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &append_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &answer.body);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &append_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &answer.headers);
  const CURLcode code = curl_easy_perform(curl);
  if (code != CURLE_OK) {
    answer.error = curl_easy_strerror(code);
    answer.timed_out = code == CURLE_OPERATION_TIMEDOUT;
  }
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &answer.status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return answer;
}

DoubleProcess::DoubleProcess(DoubleOptions options) : options_(std::move(options)) {
  std::vector<std::string> arguments = {AIRLOCK_ACAS_DOUBLE,
                                        "--port", "0",
                                        "--identity-port", "0",
                                        "--subscription", options_.subscription,
                                        "--resource-group", options_.resource_group,
                                        "--sandbox-group", options_.sandbox_group,
                                        "--tenant", options_.tenant,
                                        "--client-secret", options_.client_secret,
                                        "--exit-on-stdin-eof"};
  if (!options_.accept_token.empty()) {
    arguments.insert(arguments.end(), {"--accept-token", options_.accept_token});
  }
  if (!options_.state_dir.empty()) arguments.insert(arguments.end(), {"--state-dir", options_.state_dir});
  arguments.insert(arguments.end(), options_.extra_flags.begin(), options_.extra_flags.end());
  std::vector<char*> argv;
  for (auto& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);

  std::string stderr_template = "/tmp/airlock-acas-double-stderr-XXXXXX";
  const int stderr_fd = ::mkstemp(stderr_template.data());
  if (stderr_fd < 0) throw std::runtime_error("mkstemp for the double's stderr failed");
  stderr_path_ = stderr_template;
  int input[2];
  int output[2];
  if (::pipe2(input, O_CLOEXEC) != 0 || ::pipe2(output, O_CLOEXEC) != 0) {
    ::close(stderr_fd);
    throw std::runtime_error("pipe for the double failed");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, input[0], 0);
  posix_spawn_file_actions_adddup2(&actions, output[1], 1);
  posix_spawn_file_actions_adddup2(&actions, stderr_fd, 2);
  const int spawned = ::posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(input[0]);
  ::close(output[1]);
  ::close(stderr_fd);
  if (spawned != 0) {
    ::close(input[1]);
    ::close(output[0]);
    pid_ = -1;
    throw std::runtime_error(std::string("cannot start ") + AIRLOCK_ACAS_DOUBLE + ": " +
                             std::strerror(spawned));
  }
  stdin_fd_ = input[1];

  // The ready line, within the bound; a double that exits or stays silent is a clear failure.
  std::string line;
  const auto deadline = std::chrono::steady_clock::now() + options_.start_timeout;
  std::string failure;
  while (line.find('\n') == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      failure = "no ready line within " + std::to_string(options_.start_timeout.count()) + " ms";
      break;
    }
    pollfd ready{output[0], POLLIN, 0};
    const int polled = ::poll(&ready, 1, static_cast<int>(std::min<long>(left.count(), 200)));
    if (polled < 0 && errno != EINTR) {
      failure = "poll failed";
      break;
    }
    if (polled <= 0) continue;
    char chunk[1024];
    const ssize_t got = ::read(output[0], chunk, sizeof chunk);
    if (got <= 0) {
      failure = "it exited before its ready line";
      break;
    }
    line.append(chunk, static_cast<std::size_t>(got));
  }
  ::close(output[0]);
  json::Json ready;
  if (failure.empty()) {
    ready = json::Json::parse(line.substr(0, line.find('\n')), nullptr, false);
    if (!ready.is_object() || !ready.contains("endpoint")) failure = "a ready line that is not JSON: " + line;
  }
  if (!failure.empty()) {
    stop();
    throw std::runtime_error("airlock-acas-double did not start: " + failure + "; its stderr (" +
                             stderr_path_ + "):\n" + read_all(stderr_path_));
  }
  endpoint_ = ready["endpoint"];
  identity_http_ = ready["identity_http"];
  ca_file_ = ready["ca_file"];
  state_dir_ = ready.value("state_dir", options_.state_dir);
}

DoubleProcess::~DoubleProcess() {
  stop();
  if (!stderr_path_.empty()) ::unlink(stderr_path_.c_str());
}

int DoubleProcess::stop() {
  if (pid_ < 0) return -1;
  ::kill(pid_, SIGTERM);
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + options_.stop_timeout;
  bool reaped = false;
  while (std::chrono::steady_clock::now() < deadline) {
    const pid_t done = ::waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      reaped = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!reaped) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
  }
  if (stdin_fd_ >= 0) ::close(stdin_fd_);
  stdin_fd_ = -1;
  pid_ = -1;
  return status;
}

void DoubleProcess::close_stdin() {
  if (stdin_fd_ >= 0) ::close(stdin_fd_);
  stdin_fd_ = -1;
}

std::optional<int> DoubleProcess::wait_exit() {
  if (pid_ < 0) return std::nullopt;
  const auto deadline = std::chrono::steady_clock::now() + options_.stop_timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      close_stdin();
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return std::nullopt;
}

std::string DoubleProcess::stderr_text() const { return read_all(stderr_path_); }

std::string DoubleProcess::group_url() const {
  return endpoint_ + "/subscriptions/" + options_.subscription + "/resourceGroups/" +
         options_.resource_group + "/sandboxGroups/" + options_.sandbox_group;
}

HttpAnswer DoubleProcess::data_plane(const std::string& method, const std::string& suffix,
                                     std::optional<std::string> body,
                                     std::chrono::milliseconds timeout,
                                     std::vector<std::string> headers) const {
  HttpCall call;
  call.method = method;
  call.url = group_url() + suffix + (suffix.find('?') == std::string::npos ? "?" : "&") +
             "api-version=2026-02-01-preview";
  call.body = std::move(body);
  call.timeout = timeout;
  call.ca_file = ca_file_;
  call.headers = std::move(headers);
  call.headers.push_back("Authorization: Bearer " + options_.accept_token);
  if (call.body) call.headers.push_back("Content-Type: application/json");
  return http_call(call);
}

HttpAnswer DoubleProcess::control(const std::string& method, const std::string& path,
                                  std::optional<std::string> body) const {
  HttpCall call;
  call.method = method;
  call.url = endpoint_ + "/_double/" + path;
  call.body = std::move(body);
  call.ca_file = ca_file_;
  const HttpAnswer answer = http_call(call);
  if (answer.status != 200) {
    throw std::runtime_error("double control " + method + " " + path + " answered " +
                             std::to_string(answer.status) + " " + answer.error + ": " + answer.body);
  }
  return answer;
}

json::Json DoubleProcess::add_fault(const json::Json& fault) const {
  return control("POST", "faults", fault.dump()).json();
}
json::Json DoubleProcess::state() const { return control("GET", "state").json(); }
json::Json DoubleProcess::requests() const { return control("GET", "requests").json(); }
void DoubleProcess::clear_requests() const { (void)control("DELETE", "requests"); }
void DoubleProcess::reset() const { (void)control("POST", "reset", "{}"); }

void DoubleProcess::set_state(const std::string& id, const std::string& state,
                              std::optional<std::string> stopped_reason) const {
  json::Json body = {{"state", state},
                     {"stoppedReason", stopped_reason ? json::Json(*stopped_reason) : json::Json()}};
  (void)control("POST", "sandboxes/" + id + "/state", body.dump());
}

}  // namespace airlock::acas_double::testing
