#include "backends/docker/engine_streams.hpp"

#include <curl/curl.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "airlock/encoding.hpp"

namespace airlock::docker {
namespace {

// The reader pauses the transfer once this much is waiting; a cap then refuses before the
// engine's bytes pile up in memory.
constexpr std::size_t kHighWater = 1u << 20;
constexpr std::size_t kMaxHeadBytes = 64u << 10;

int remaining_ms(Clock::time_point deadline, int ceiling) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<long long>(left, ceiling));
}

std::size_t download_body(char* data, std::size_t size, std::size_t count, void* user) {
  return static_cast<EngineDownload*>(user)->on_body(data, size * count);
}

std::size_t download_header(char* data, std::size_t size, std::size_t count, void* user) {
  return static_cast<EngineDownload*>(user)->on_header(data, size * count);
}

}  // namespace

// ---- EngineDownload ---------------------------------------------------------------------------

EngineDownload::EngineDownload(EngineClient& client, std::string versioned_path,
                               Clock::time_point deadline)
    : client_(client), path_(std::move(versioned_path)), deadline_(deadline) {
  easy_ = curl_easy_init();
  multi_ = curl_multi_init();
  if (easy_ == nullptr || multi_ == nullptr) {
    if (easy_ != nullptr) curl_easy_cleanup(easy_);
    if (multi_ != nullptr) curl_multi_cleanup(multi_);
    throw BackendError("the HTTP client could not be initialised");
  }
  const auto budget = std::chrono::milliseconds(std::max(1, remaining_ms(deadline, INT32_MAX)));
  client_.configure(easy_, path_, budget + std::chrono::seconds(5));
  curl_easy_setopt(easy_, CURLOPT_HTTPGET, 1L);
  curl_easy_setopt(easy_, CURLOPT_WRITEFUNCTION, download_body);
  curl_easy_setopt(easy_, CURLOPT_WRITEDATA, this);
  curl_easy_setopt(easy_, CURLOPT_HEADERFUNCTION, download_header);
  curl_easy_setopt(easy_, CURLOPT_HEADERDATA, this);
  curl_multi_add_handle(multi_, easy_);
}

EngineDownload::~EngineDownload() {
  // Removing the handle mid-transfer aborts it: the rest of the body is never read.
  curl_multi_remove_handle(multi_, easy_);
  curl_easy_cleanup(easy_);
  curl_multi_cleanup(multi_);
}

std::size_t EngineDownload::on_body(const char* data, std::size_t bytes) {
  if (buffer_.size() - offset_ >= kHighWater) {
    paused_ = true;
    return CURL_WRITEFUNC_PAUSE;
  }
  buffer_.append(data, bytes);
  return bytes;
}

std::size_t EngineDownload::on_header(const char* data, std::size_t bytes) {
  std::string_view line(data, bytes);
  if (line.starts_with("HTTP/")) {
    headers_.clear();
  } else if (line == "\r\n" || line == "\n") {
    long status = 0;
    curl_easy_getinfo(easy_, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 200) {  // not an interim 1xx head
      status_ = status;
      head_done_ = true;
    }
  } else if (auto colon = line.find(':'); colon != std::string_view::npos) {
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == '\r' || value.back() == '\n')) value.remove_suffix(1);
    headers_.emplace_back(ascii_lower(line.substr(0, colon)), std::string(value));
  }
  return bytes;
}

void EngineDownload::pump() {
  int running = 0;
  curl_multi_perform(multi_, &running);
  int queued = 0;
  while (CURLMsg* message = curl_multi_info_read(multi_, &queued)) {
    if (message->msg == CURLMSG_DONE) {
      done_ = true;
      result_ = message->data.result;
      if (!head_done_) {
        curl_easy_getinfo(easy_, CURLINFO_RESPONSE_CODE, &status_);
        head_done_ = status_ != 0;
      }
    }
  }
}

long EngineDownload::wait_for_head() {
  while (!head_done_ && !done_) {
    pump();
    if (head_done_ || done_) break;
    const int wait = remaining_ms(deadline_, 100);
    if (wait == 0) throw StreamDeadline();
    curl_multi_poll(multi_, nullptr, 0, wait, nullptr);
  }
  if (!head_done_) {
    throw BackendError("the container engine could not be reached",
                       "GET " + path_ + " on " + client_.endpoint().display() + ": " +
                           curl_easy_strerror(static_cast<CURLcode>(result_)));
  }
  return status_;
}

std::optional<std::string> EngineDownload::header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers_) {
    if (name == lower_name) return value;
  }
  return std::nullopt;
}

std::size_t EngineDownload::read(char* out, std::size_t capacity) {
  while (offset_ == buffer_.size()) {
    buffer_.clear();
    offset_ = 0;
    if (paused_) {
      paused_ = false;
      // Unpausing may deliver the held bytes right here, through on_body.
      curl_easy_pause(easy_, CURLPAUSE_CONT);
      if (!buffer_.empty()) break;
    }
    if (done_) {
      if (result_ != CURLE_OK) {
        throw BackendError(
            "the container engine's answer was cut short",
            "GET " + path_ + ": " + curl_easy_strerror(static_cast<CURLcode>(result_)));
      }
      return 0;
    }
    pump();
    if (offset_ < buffer_.size() || done_) continue;
    const int wait = remaining_ms(deadline_, 100);
    if (wait == 0) throw StreamDeadline();
    curl_multi_poll(multi_, nullptr, 0, wait, nullptr);
  }
  const std::size_t bytes = std::min(capacity, buffer_.size() - offset_);
  std::memcpy(out, buffer_.data() + offset_, bytes);
  offset_ += bytes;
  consumed_ += bytes;
  return bytes;
}

std::string EngineDownload::read_rest(std::size_t cap) {
  std::string out;
  char chunk[16384];
  while (out.size() < cap) {
    const std::size_t bytes = read(chunk, std::min(sizeof chunk, cap - out.size()));
    if (bytes == 0) break;
    out.append(chunk, bytes);
  }
  return out;
}

// ---- HijackedConnection -----------------------------------------------------------------------

HijackedConnection::HijackedConnection(EngineClient& client, std::string_view method,
                                       std::string versioned_path, std::string_view json_body,
                                       Clock::time_point deadline) {
  easy_ = curl_easy_init();
  if (easy_ == nullptr) throw BackendError("the HTTP client could not be initialised");
  const auto budget = std::chrono::milliseconds(std::max(1, remaining_ms(deadline, INT32_MAX)));
  client.configure(easy_, "/", budget);
  curl_easy_setopt(easy_, CURLOPT_CONNECT_ONLY, 1L);
  if (const CURLcode code = curl_easy_perform(easy_); code != CURLE_OK) {
    curl_easy_cleanup(easy_);
    throw BackendError("the container engine could not be reached",
                       std::string(method) + " " + versioned_path + " on " +
                           client.endpoint().display() + ": " + curl_easy_strerror(code));
  }
  curl_socket_t socket = CURL_SOCKET_BAD;
  curl_easy_getinfo(easy_, CURLINFO_ACTIVESOCKET, &socket);
  socket_ = static_cast<int>(socket);
  tls_ = client.endpoint().tls;

  const std::string host = client.endpoint().unix_socket ? "docker" : client.endpoint().authority;
  std::string request = std::string(method) + " " + versioned_path + " HTTP/1.1\r\n";
  request += "Host: " + host + "\r\n";
  request += "User-Agent: airlock\r\n";
  request += "Content-Type: application/json\r\n";
  request += "Content-Length: " + std::to_string(json_body.size()) + "\r\n";
  request += "Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n";
  request += json_body;
  try {
    send_all(request, deadline);
    read_head(deadline);
  } catch (...) {
    curl_easy_cleanup(easy_);
    throw;
  }
}

HijackedConnection::~HijackedConnection() {
  curl_easy_cleanup(easy_);
}

void HijackedConnection::wait_socket(short events, Clock::time_point deadline) {
  const int wait = remaining_ms(deadline, 1000);
  if (wait == 0) throw StreamDeadline();
  pollfd descriptor{socket_, events, 0};
  ::poll(&descriptor, 1, wait);
}

void HijackedConnection::send_all(std::string_view data, Clock::time_point deadline) {
  while (!data.empty()) {
    std::size_t sent = 0;
    const CURLcode code = curl_easy_send(easy_, data.data(), data.size(), &sent);
    if (code == CURLE_AGAIN) {
      wait_socket(POLLOUT, deadline);
      continue;
    }
    if (code != CURLE_OK) {
      throw BackendError("the container engine closed the connection",
                         std::string("send: ") + curl_easy_strerror(code));
    }
    data.remove_prefix(sent);
  }
}

void HijackedConnection::read_head(Clock::time_point deadline) {
  std::string head;
  char chunk[4096];
  std::size_t end = std::string::npos;
  while ((end = head.find("\r\n\r\n")) == std::string::npos) {
    if (head.size() > kMaxHeadBytes) {
      throw BackendError("the container engine sent an oversized response head");
    }
    std::size_t received = 0;
    const CURLcode code = curl_easy_recv(easy_, chunk, sizeof chunk, &received);
    if (code == CURLE_AGAIN) {
      wait_socket(POLLIN, deadline);
      continue;
    }
    if (code != CURLE_OK || received == 0) {
      throw BackendError("the container engine closed the connection before answering",
                         code != CURLE_OK ? curl_easy_strerror(code) : "end of stream");
    }
    head.append(chunk, received);
  }
  pending_ = head.substr(end + 4);
  head.resize(end);

  // "HTTP/1.1 101 UPGRADED"
  const auto space = head.find(' ');
  if (!head.starts_with("HTTP/") || space == std::string::npos) {
    throw BackendError("the container engine answered something that is not HTTP",
                       head.substr(0, 200));
  }
  status_ = std::strtol(head.c_str() + space + 1, nullptr, 10);
  if (status_ == 101 || status_ == 200) return;

  // An error answer: keep its body (bounded) for the message.
  std::optional<std::size_t> length;
  const std::string lowered = ascii_lower(head);
  if (auto at = lowered.find("\r\ncontent-length:"); at != std::string::npos) {
    length = static_cast<std::size_t>(std::strtoull(lowered.c_str() + at + 17, nullptr, 10));
  }
  error_body_ = std::move(pending_);
  pending_.clear();
  const std::size_t want = std::min<std::size_t>(length.value_or(kMaxHeadBytes), kMaxHeadBytes);
  while (error_body_.size() < want) {
    std::size_t received = 0;
    const CURLcode code = curl_easy_recv(easy_, chunk, sizeof chunk, &received);
    if (code == CURLE_AGAIN) {
      wait_socket(POLLIN, deadline);
      continue;
    }
    if (code != CURLE_OK || received == 0) break;
    error_body_.append(chunk, received);
  }
}

HijackedConnection::ReadResult HijackedConnection::read_some(char* out, std::size_t capacity) {
  ReadResult result;
  if (!pending_.empty()) {
    result.bytes = std::min(capacity, pending_.size());
    std::memcpy(out, pending_.data(), result.bytes);
    pending_.erase(0, result.bytes);
    return result;
  }
  std::size_t received = 0;
  const CURLcode code = curl_easy_recv(easy_, out, capacity, &received);
  if (code == CURLE_AGAIN) {
    result.would_block = true;
  } else if (code != CURLE_OK || received == 0) {
    result.end = true;
  } else {
    result.bytes = received;
  }
  return result;
}

std::size_t HijackedConnection::write_some(std::string_view data) {
  std::size_t sent = 0;
  const CURLcode code = curl_easy_send(easy_, data.data(), data.size(), &sent);
  if (code == CURLE_AGAIN) return 0;
  if (code != CURLE_OK) {
    throw BackendError("the container engine closed the connection while stdin was sent",
                       curl_easy_strerror(code));
  }
  return sent;
}

void HijackedConnection::shutdown_write() {
  if (tls_) {
    throw NotSupported(
        "stdin over a TLS connection to the engine is not supported: the engine learns that "
        "stdin ended only from a half-closed connection");
  }
  ::shutdown(socket_, SHUT_WR);
}

}  // namespace airlock::docker
