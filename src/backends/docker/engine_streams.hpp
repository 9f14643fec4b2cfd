// Streaming Engine API calls, read incrementally so that caps refuse before bytes pile up:
//   - EngineDownload: a GET whose body is pulled on demand (archive reads and listings); the
//     transfer pauses when the reader falls behind and is aborted by destroying it;
//   - HijackedConnection: the exec attach, where the engine upgrades the HTTP connection to a raw
//     bidirectional stream (stdin in, multiplexed stdout/stderr out).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/docker/engine_client.hpp"

using CURLM = void;

namespace airlock::docker {

// Raised by a stream when its own deadline passes (the backend's request timeout for the file
// plane, or the caller's timeout for an exec).
class StreamDeadline : public std::exception {
 public:
  const char* what() const noexcept override { return "the engine stream passed its deadline"; }
};

class EngineDownload {
 public:
  EngineDownload(EngineClient& client, std::string versioned_path, Clock::time_point deadline);
  ~EngineDownload();
  EngineDownload(const EngineDownload&) = delete;
  EngineDownload& operator=(const EngineDownload&) = delete;

  // Blocks until the response head has arrived; returns the HTTP status.
  long wait_for_head();
  std::optional<std::string> header(std::string_view lower_name) const;

  // Up to `capacity` body bytes; 0 once the body has ended. Throws BackendError on a transfer
  // failure, StreamDeadline past the deadline.
  std::size_t read(char* out, std::size_t capacity);
  // The rest of the body, for error answers (at most `cap` bytes are kept).
  std::string read_rest(std::size_t cap);
  // Body bytes handed to the reader so far.
  std::uint64_t consumed() const noexcept { return consumed_; }

  // libcurl callbacks.
  std::size_t on_body(const char* data, std::size_t bytes);
  std::size_t on_header(const char* data, std::size_t bytes);

 private:
  void pump();

  EngineClient& client_;
  std::string path_;
  Clock::time_point deadline_;
  CURLM* multi_ = nullptr;
  CURL* easy_ = nullptr;
  std::string buffer_;
  std::size_t offset_ = 0;  // read position in buffer_
  bool paused_ = false;
  bool head_done_ = false;
  bool done_ = false;
  int result_ = 0;  // CURLcode once done
  long status_ = 0;
  std::uint64_t consumed_ = 0;
  std::vector<std::pair<std::string, std::string>> headers_;
};

class HijackedConnection {
 public:
  // Connects, sends `method path` with `json_body` asking for the raw-stream upgrade, and reads
  // the response head. Throws BackendError on transport failures, StreamDeadline past `deadline`.
  HijackedConnection(EngineClient& client, std::string_view method, std::string versioned_path,
                     std::string_view json_body, Clock::time_point deadline);
  ~HijackedConnection();
  HijackedConnection(const HijackedConnection&) = delete;
  HijackedConnection& operator=(const HijackedConnection&) = delete;

  // 101 (upgraded) or 200 (raw stream without upgrade) mean the stream follows; anything else is
  // an error whose body `error_body()` holds.
  long status() const noexcept { return status_; }
  const std::string& error_body() const noexcept { return error_body_; }

  struct ReadResult {
    std::size_t bytes = 0;
    bool end = false;          // the engine closed the stream
    bool would_block = false;  // nothing to read right now
  };
  ReadResult read_some(char* out, std::size_t capacity);
  // Bytes written (0 when the socket would block).
  std::size_t write_some(std::string_view data);
  // Signal end of stdin. Unsupported over TLS (NotSupported): the engine needs a half-close.
  void shutdown_write();
  // The socket to poll.
  int socket() const noexcept { return socket_; }
  bool tls() const noexcept { return tls_; }

 private:
  void send_all(std::string_view data, Clock::time_point deadline);
  void read_head(Clock::time_point deadline);
  void wait_socket(short events, Clock::time_point deadline);

  CURL* easy_ = nullptr;
  int socket_ = -1;
  bool tls_ = false;
  long status_ = 0;
  std::string pending_;  // stream bytes that arrived with the head
  std::string error_body_;
};

}  // namespace airlock::docker
