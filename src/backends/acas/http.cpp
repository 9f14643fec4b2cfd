#include "backends/acas/http.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>

namespace airlock::acas::http {
namespace {

void global_init() {
  // curl_global_init is not safe to race; every client goes through here first.
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string trim(std::string_view text) {
  while (!text.empty() && (text.back() == '\r' || text.back() == '\n' || text.back() == ' ' ||
                           text.back() == '\t')) {
    text.remove_suffix(1);
  }
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  return std::string(text);
}

// The method, host and path of a URL — what a log line may say about a request. Query values
// can carry guest paths, and nothing after '?' is needed to tell requests apart.
std::string describe(const Request& request) {
  std::string_view url = request.url;
  if (const auto query = url.find('?'); query != std::string_view::npos) url = url.substr(0, query);
  return request.method + " " + std::string(url);
}

struct Exchange {
  Response* response;
  std::uint64_t max_body;
  const std::stop_token* stop;
  bool overflowed = false;
  bool cancelled = false;
  // The request body still to send (PUT/POST through the read callback).
  std::string_view upload;
};

std::size_t on_body(char* data, std::size_t size, std::size_t count, void* user) {
  auto* exchange = static_cast<Exchange*>(user);
  const std::size_t bytes = size * count;
  if (exchange->response->body.size() + bytes > exchange->max_body) {
    exchange->overflowed = true;
    return 0;  // aborts the transfer: a body is never silently truncated
  }
  exchange->response->body.append(data, bytes);
  return bytes;
}

std::size_t on_header(char* data, std::size_t size, std::size_t count, void* user) {
  auto* exchange = static_cast<Exchange*>(user);
  const std::size_t bytes = size * count;
  const std::string_view line(data, bytes);
  if (line.starts_with("HTTP/")) {
    exchange->response->headers.clear();  // a new head (after 100 Continue, or a redirect)
  } else if (const auto colon = line.find(':'); colon != std::string_view::npos) {
    exchange->response->headers.emplace_back(lower(line.substr(0, colon)),
                                             trim(line.substr(colon + 1)));
  }
  return bytes;
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* exchange = static_cast<Exchange*>(user);
  if (exchange->stop->stop_requested()) {
    exchange->cancelled = true;
    return 1;  // aborts the transfer
  }
  return 0;
}

std::size_t on_upload(char* buffer, std::size_t size, std::size_t count, void* user) {
  auto* exchange = static_cast<Exchange*>(user);
  const std::size_t bytes = std::min(size * count, exchange->upload.size());
  std::copy_n(exchange->upload.data(), bytes, buffer);
  exchange->upload.remove_prefix(bytes);
  return bytes;
}

struct SlistDeleter {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};

}  // namespace

std::optional<std::string> Response::header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_name) return value;
  }
  return std::nullopt;
}

// Easy handles kept between exchanges: each keeps its connection (and TLS session) alive.
struct Client::Pool {
  std::mutex mutex;
  std::vector<CURL*> idle;

  CURL* take() {
    {
      std::lock_guard lock(mutex);
      if (!idle.empty()) {
        CURL* handle = idle.back();
        idle.pop_back();
        curl_easy_reset(handle);
        return handle;
      }
    }
    CURL* handle = curl_easy_init();
    if (handle == nullptr) throw TransportError("curl_easy_init failed");
    return handle;
  }
  void give_back(CURL* handle) {
    std::lock_guard lock(mutex);
    if (idle.size() < 16) {
      idle.push_back(handle);
      return;
    }
    curl_easy_cleanup(handle);
  }
  ~Pool() {
    for (CURL* handle : idle) curl_easy_cleanup(handle);
  }
};

Client::Client(ClientOptions options) : pool_(std::make_unique<Pool>()), options_(std::move(options)) {
  global_init();
}

Client::~Client() = default;

Response Client::perform(const Request& request) {
  const bool https = request.url.starts_with("https://");
  const bool http = request.url.starts_with("http://");
  if (!https && !(http && options_.allow_http)) {
    throw std::invalid_argument("refusing a request to a URL that is not https: " +
                                describe(request));
  }
  const auto remaining = std::chrono::duration_cast<std::chrono::milliseconds>(
      request.deadline - Clock::now());
  if (remaining.count() <= 0) throw DeadlineExceeded("deadline passed before " + describe(request));

  Response response;
  std::stop_token stop = request.stop;
  Exchange exchange{&response, request.max_response_bytes, &stop};
  exchange.upload = request.body;

  std::unique_ptr<curl_slist, SlistDeleter> headers;
  auto add_header = [&](const std::string& line) {
    curl_slist* grown = curl_slist_append(headers.get(), line.c_str());
    if (grown == nullptr) throw TransportError("curl_slist_append failed");
    (void)headers.release();
    headers.reset(grown);
  };
  for (const auto& [name, value] : request.headers) add_header(name + ": " + value);
  // No "Expect: 100-continue" pause before a body: the service answers promptly or not at all.
  add_header("Expect:");

  CURL* handle = pool_->take();
  curl_easy_setopt(handle, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(handle, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(handle, CURLOPT_PROTOCOLS_STR, options_.allow_http ? "http,https" : "https");
  curl_easy_setopt(handle, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(handle, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<long long>(1, remaining.count())));
  curl_easy_setopt(handle, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(std::clamp<long long>(remaining.count(), 1, 30'000)));
  curl_easy_setopt(handle, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(handle, CURLOPT_SSL_VERIFYHOST, 2L);
  if (!options_.ca_file.empty()) curl_easy_setopt(handle, CURLOPT_CAINFO, options_.ca_file.c_str());
  curl_easy_setopt(handle, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(handle, CURLOPT_WRITEDATA, &exchange);
  curl_easy_setopt(handle, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(handle, CURLOPT_HEADERDATA, &exchange);
  curl_easy_setopt(handle, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(handle, CURLOPT_XFERINFODATA, &exchange);
  if (request.method == "GET") {
    curl_easy_setopt(handle, CURLOPT_HTTPGET, 1L);
  } else if (request.method == "HEAD") {
    curl_easy_setopt(handle, CURLOPT_NOBODY, 1L);
  } else if (request.method == "PUT" || request.method == "POST" || !request.body.empty()) {
    curl_easy_setopt(handle, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(handle, CURLOPT_READFUNCTION, on_upload);
    curl_easy_setopt(handle, CURLOPT_READDATA, &exchange);
    curl_easy_setopt(handle, CURLOPT_INFILESIZE_LARGE,
                     static_cast<curl_off_t>(request.body.size()));
    curl_easy_setopt(handle, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  } else {
    curl_easy_setopt(handle, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  }

  const CURLcode code = curl_easy_perform(handle);
  long status = 0;
  curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_setopt(handle, CURLOPT_HTTPHEADER, nullptr);
  if (code == CURLE_OK) {
    pool_->give_back(handle);
  } else {
    // A connection abandoned mid-exchange is not reused.
    curl_easy_cleanup(handle);
  }
  if (exchange.cancelled) throw Cancelled("cancelled during " + describe(request));
  if (exchange.overflowed) {
    throw BodyTooLarge("the answer to " + describe(request) + " passed " +
                       std::to_string(request.max_response_bytes) + " bytes");
  }
  if (code == CURLE_OPERATION_TIMEDOUT) {
    throw DeadlineExceeded("no complete answer to " + describe(request) + " before the deadline");
  }
  if (code != CURLE_OK) {
    throw TransportError(describe(request) + ": " + curl_easy_strerror(code));
  }
  response.status = status;
  return response;
}

std::string url_encode(std::string_view value) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(value.size());
  for (unsigned char c : value) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0x0f]);
    }
  }
  return out;
}

std::string query_string(const std::vector<std::pair<std::string, std::string>>& pairs) {
  std::string out;
  for (const auto& [name, value] : pairs) {
    if (!out.empty()) out.push_back('&');
    out += url_encode(name);
    out.push_back('=');
    out += url_encode(value);
  }
  return out;
}

}  // namespace airlock::acas::http
