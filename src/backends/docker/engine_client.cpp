#include "backends/docker/engine_client.hpp"

#include <curl/curl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "airlock/backends/docker.hpp"
#include "airlock/encoding.hpp"

namespace airlock::docker {
namespace {

void global_init() {
  // curl_global_init is not safe to race; every client goes through here first.
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string trim(std::string_view text) {
  while (!text.empty() && (text.back() == '\r' || text.back() == '\n' || text.back() == ' ')) {
    text.remove_suffix(1);
  }
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  return std::string(text);
}

struct Collector {
  EngineResponse* response;
  std::uint64_t max_body;
  bool overflowed = false;
};

std::size_t on_body(char* data, std::size_t size, std::size_t count, void* user) {
  auto* collector = static_cast<Collector*>(user);
  const std::size_t bytes = size * count;
  if (collector->response->body.size() + bytes > collector->max_body) {
    collector->overflowed = true;
    return 0;  // aborts the transfer: a response is never silently truncated
  }
  collector->response->body.append(data, bytes);
  return bytes;
}

// Feeds an upload from a descriptor (CallOptions::body_fd).
std::size_t on_upload(char* data, std::size_t size, std::size_t count, void* user) {
  const int fd = *static_cast<int*>(user);
  for (;;) {
    const ssize_t got = ::read(fd, data, size * count);
    if (got < 0 && errno == EINTR) continue;
    return got < 0 ? CURL_READFUNC_ABORT : static_cast<std::size_t>(got);
  }
}

std::size_t on_header(char* data, std::size_t size, std::size_t count, void* user) {
  auto* collector = static_cast<Collector*>(user);
  const std::size_t bytes = size * count;
  std::string_view line(data, bytes);
  if (line.starts_with("HTTP/")) {
    collector->response->headers.clear();  // a new head (e.g. after 100 Continue)
  } else if (auto colon = line.find(':'); colon != std::string_view::npos) {
    collector->response->headers.emplace_back(ascii_lower(line.substr(0, colon)),
                                              trim(line.substr(colon + 1)));
  }
  return bytes;
}

}  // namespace

// ---- endpoint and version ---------------------------------------------------------------------

std::string EngineEndpoint::base_url() const {
  if (unix_socket) return "http://docker";
  return std::string(tls ? "https://" : "http://") + authority;
}

std::string EngineEndpoint::display() const {
  return unix_socket ? "unix://" + socket_path : "tcp://" + authority;
}

EngineEndpoint parse_engine_host(std::string_view host, bool tls, std::string_view what) {
  EngineEndpoint endpoint;
  const std::string where(what);
  if (host.starts_with("unix://")) {
    endpoint.unix_socket = true;
    endpoint.socket_path = std::string(host.substr(7));
    if (endpoint.socket_path.empty() || endpoint.socket_path.front() != '/') {
      throw InvalidArgument(where +
                                ": a unix engine host needs an absolute socket path, as in "
                                "unix:///var/run/docker.sock",
                            where);
    }
    if (tls) throw InvalidArgument(where + ": tls applies to tcp:// hosts only", where);
    return endpoint;
  }
  if (host.starts_with("tcp://")) {
    std::string_view authority = host.substr(6);
    while (authority.ends_with("/")) authority.remove_suffix(1);
    const auto colon = authority.rfind(':');
    const bool has_port = colon != std::string_view::npos && colon + 1 < authority.size() &&
                          std::all_of(authority.begin() + static_cast<long>(colon) + 1,
                                      authority.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (authority.empty() || !has_port || colon == 0 ||
        authority.find_first_of("/?#@ ") != std::string_view::npos) {
      throw InvalidArgument(
          where + ": a tcp engine host is tcp://HOST:PORT, got \"" + std::string(host) + "\"",
          where);
    }
    endpoint.unix_socket = false;
    endpoint.authority = std::string(authority);
    endpoint.tls = tls;
    return endpoint;
  }
  throw InvalidArgument(where + ": unsupported engine host \"" + std::string(host) +
                            "\" (use unix:///PATH or tcp://HOST:PORT)",
                        where);
}

std::optional<std::pair<int, int>> parse_api_version(std::string_view text) {
  const auto dot = text.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 >= text.size()) return std::nullopt;
  int major = 0;
  int minor = 0;
  const char* begin = text.data();
  auto first = std::from_chars(begin, begin + dot, major);
  if (first.ec != std::errc() || first.ptr != begin + dot) return std::nullopt;
  auto second = std::from_chars(begin + dot + 1, begin + text.size(), minor);
  if (second.ec != std::errc() || second.ptr != begin + text.size()) return std::nullopt;
  return std::pair{major, minor};
}

std::string negotiate_api_version(std::string_view engine_version, std::string_view engine_minimum,
                                  std::string_view our_maximum) {
  const auto engine = parse_api_version(engine_version);
  const auto ours = parse_api_version(our_maximum);
  const auto floor = parse_api_version(kMinimumApiVersion);
  if (!ours)
    throw InvalidArgument("api_version_max \"" + std::string(our_maximum) +
                          "\" is not a version of the form 1.NN");
  if (!engine) {
    throw BackendError("the container engine reported an API version this client cannot read",
                       "ApiVersion \"" + std::string(engine_version) + "\"");
  }
  const auto chosen = std::min(*engine, *ours);
  if (chosen < *floor) {
    throw BackendError("the container engine's API version " + std::string(engine_version) +
                       " is older than " + kMinimumApiVersion + ", the oldest this client speaks");
  }
  if (const auto minimum = parse_api_version(engine_minimum); minimum && chosen < *minimum) {
    throw BackendError("the container engine no longer speaks API version " +
                       std::to_string(chosen.first) + "." + std::to_string(chosen.second) +
                       " (its minimum is " + std::string(engine_minimum) + ")");
  }
  return std::to_string(chosen.first) + "." + std::to_string(chosen.second);
}

std::string url_encode(std::string_view value) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : value) {
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

// ---- responses --------------------------------------------------------------------------------

std::optional<std::string> EngineResponse::header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_name) return value;
  }
  return std::nullopt;
}

std::string EngineResponse::engine_message() const {
  if (auto parsed = nlohmann::json::parse(body, nullptr, false);
      parsed.is_object() && parsed.contains("message") && parsed["message"].is_string()) {
    return parsed["message"].get<std::string>();
  }
  return body.substr(0, 600);
}

// ---- the client -------------------------------------------------------------------------------

EngineClient::EngineClient(EngineEndpoint endpoint, TlsSettings tls, std::string api_version_max,
                           std::chrono::milliseconds request_timeout)
    : endpoint_(std::move(endpoint)),
      tls_(std::move(tls)),
      api_version_max_(std::move(api_version_max)),
      request_timeout_(request_timeout) {
  global_init();
  if (!parse_api_version(api_version_max_)) {
    throw InvalidArgument("api_version_max \"" + api_version_max_ +
                          "\" is not a version of the form 1.NN");
  }
}

EngineClient::~EngineClient() {
  for (CURL* handle : idle_) curl_easy_cleanup(handle);
}

CURL* EngineClient::take_handle() {
  {
    std::lock_guard lock(mutex_);
    if (!idle_.empty()) {
      CURL* handle = idle_.back();
      idle_.pop_back();
      return handle;
    }
  }
  CURL* handle = curl_easy_init();
  if (handle == nullptr) throw BackendError("the HTTP client could not be initialised");
  return handle;
}

void EngineClient::return_handle(CURL* handle) {
  std::lock_guard lock(mutex_);
  // A handle keeps its connection (and its TLS session) for the next call; bound the pool.
  if (idle_.size() < 16) {
    idle_.push_back(handle);
  } else {
    curl_easy_cleanup(handle);
  }
}

void EngineClient::configure(CURL* handle, std::string_view path,
                             std::optional<std::chrono::milliseconds> timeout) const {
  const std::string url = endpoint_.base_url() + std::string(path);
  curl_easy_setopt(handle, CURLOPT_URL, url.c_str());
  curl_easy_setopt(handle, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(handle, CURLOPT_NOPROXY, "*");  // the engine is never reached through a proxy
  if (endpoint_.unix_socket) {
    curl_easy_setopt(handle, CURLOPT_UNIX_SOCKET_PATH, endpoint_.socket_path.c_str());
  }
  if (endpoint_.tls) {
    if (!tls_.ca_file.empty()) curl_easy_setopt(handle, CURLOPT_CAINFO, tls_.ca_file.c_str());
    if (!tls_.cert_file.empty()) {
      curl_easy_setopt(handle, CURLOPT_SSLCERT, tls_.cert_file.c_str());
    }
    if (!tls_.key_file.empty()) curl_easy_setopt(handle, CURLOPT_SSLKEY, tls_.key_file.c_str());
    curl_easy_setopt(handle, CURLOPT_SSL_VERIFYPEER, tls_.verify ? 1L : 0L);
    curl_easy_setopt(handle, CURLOPT_SSL_VERIFYHOST, tls_.verify ? 2L : 0L);
  }
  const auto bound = timeout.value_or(request_timeout_);
  curl_easy_setopt(handle, CURLOPT_TIMEOUT_MS, static_cast<long>(bound.count()));
  curl_easy_setopt(handle, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(std::min<long long>(bound.count(), 10'000)));
}

EngineResponse EngineClient::perform(std::string_view method, const std::string& path,
                                     const CallOptions& options) {
  CURL* handle = take_handle();
  struct Return {
    EngineClient* client;
    CURL* handle;
    ~Return() { client->return_handle(handle); }
  } give_back{this, handle};
  curl_easy_reset(handle);
  configure(handle, path, options.timeout);

  EngineResponse response;
  Collector collector{&response, options.max_body_bytes};
  curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(handle, CURLOPT_WRITEDATA, &collector);
  curl_easy_setopt(handle, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(handle, CURLOPT_HEADERDATA, &collector);

  struct curl_slist* headers = nullptr;
  struct FreeHeaders {
    curl_slist** list;
    ~FreeHeaders() { curl_slist_free_all(*list); }
  } free_headers{&headers};
  headers = curl_slist_append(headers, "Expect:");
  const std::string content_type = "Content-Type: " + std::string(options.content_type);
  int body_fd = options.body_fd;

  if (method == "GET") {
    curl_easy_setopt(handle, CURLOPT_HTTPGET, 1L);
  } else if (method == "HEAD") {
    curl_easy_setopt(handle, CURLOPT_NOBODY, 1L);
  } else {
    curl_easy_setopt(handle, CURLOPT_CUSTOMREQUEST, std::string(method).c_str());
    if ((method == "POST" || method == "PUT") && options.body_fd >= 0) {
      headers = curl_slist_append(headers, content_type.c_str());
      // An upload read from the descriptor; the custom request keeps the method.
      curl_easy_setopt(handle, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(handle, CURLOPT_INFILESIZE_LARGE,
                       static_cast<curl_off_t>(options.body_fd_bytes));
      curl_easy_setopt(handle, CURLOPT_READFUNCTION, on_upload);
      curl_easy_setopt(handle, CURLOPT_READDATA, &body_fd);
    } else if (method == "POST" || method == "PUT") {
      headers = curl_slist_append(headers, content_type.c_str());
      curl_easy_setopt(handle, CURLOPT_POSTFIELDSIZE_LARGE,
                       static_cast<curl_off_t>(options.body.size()));
      curl_easy_setopt(handle, CURLOPT_POSTFIELDS, options.body.data());
    }
  }
  if (options.head) curl_easy_setopt(handle, CURLOPT_NOBODY, 1L);
  curl_easy_setopt(handle, CURLOPT_HTTPHEADER, headers);

  const CURLcode code = curl_easy_perform(handle);
  if (collector.overflowed) {
    throw BackendError("the container engine sent a larger answer than this client accepts",
                       std::string(method) + " " + path + ": response body over " +
                           std::to_string(options.max_body_bytes) + " bytes");
  }
  if (code != CURLE_OK) {
    if (code == CURLE_COULDNT_CONNECT && endpoint_.unix_socket) {
      // Nothing at the socket path: no engine is installed there (a stopped engine that keeps
      // its socket refuses the connection instead, and stays a plain BackendError).
      std::error_code missing;
      if (!std::filesystem::exists(
              std::filesystem::symlink_status(endpoint_.socket_path, missing))) {
        throw BackendNotInstalled(
            "no container engine is installed at the configured endpoint",
            std::string(method) + " " + path + " on " + endpoint_.display() + ": no such socket");
      }
    }
    const bool timed_out = code == CURLE_OPERATION_TIMEDOUT;
    throw BackendError(timed_out ? "the container engine did not answer in time"
                                 : "the container engine could not be reached",
                       std::string(method) + " " + path + " on " + endpoint_.display() + ": " +
                           curl_easy_strerror(code));
  }
  curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &response.status);
  return response;
}

EngineResponse EngineClient::call(std::string_view method, std::string_view path,
                                  const CallOptions& options) {
  return perform(method, versioned(path), options);
}

EngineResponse EngineClient::call_unversioned(std::string_view method, std::string_view path,
                                              const CallOptions& options) {
  return perform(method, std::string(path), options);
}

std::string EngineClient::api_version() {
  {
    std::lock_guard lock(mutex_);
    if (api_version_) return *api_version_;
  }
  // Negotiated outside the lock: two first calls may both ask; both get the same answer.
  // The ping's API-Version header says it in one cheap round trip (Podman takes seconds to
  // answer /version); /version is asked only when the ping does not say. The ping carries no
  // minimum: an engine that has dropped the version we pick refuses each call by itself.
  const EngineResponse ping = perform("GET", "/_ping", {});
  if (ping.status == 200) {
    if (auto header = ping.header("api-version"); header && parse_api_version(*header)) {
      std::string chosen = negotiate_api_version(*header, "", api_version_max_);
      std::lock_guard lock(mutex_);
      api_version_ = chosen;
      return chosen;
    }
  }
  const EngineResponse response = perform("GET", "/version", {});
  if (response.status != 200)
    fail("the container engine refused to say its version", "GET", "/version", response);
  const auto parsed = nlohmann::json::parse(response.body, nullptr, false);
  if (!parsed.is_object() || !parsed.contains("ApiVersion") || !parsed["ApiVersion"].is_string()) {
    throw BackendError("the container engine's /version answer has no ApiVersion",
                       response.body.substr(0, 600));
  }
  const std::string minimum =
      parsed.contains("MinAPIVersion") && parsed["MinAPIVersion"].is_string()
          ? parsed["MinAPIVersion"].get<std::string>()
          : std::string();
  std::string chosen =
      negotiate_api_version(parsed["ApiVersion"].get<std::string>(), minimum, api_version_max_);
  std::lock_guard lock(mutex_);
  api_version_ = chosen;
  return chosen;
}

std::string EngineClient::versioned(std::string_view path) {
  return "/v" + api_version() + std::string(path);
}

void EngineClient::fail(std::string message, std::string_view method, std::string_view path,
                        const EngineResponse& response) {
  throw BackendError(
      std::move(message) + " (engine status " + std::to_string(response.status) + ")",
      std::string(method) + " " + std::string(path) + " → " + std::to_string(response.status) +
          ": " + response.engine_message(),
      BackendError::ProviderResponse{response.status, response.body});
}

}  // namespace airlock::docker
