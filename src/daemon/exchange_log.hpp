// Every request the daemon answers and the response it gave, one JSON line each, appended to a
// file: what tests/daemon/openapi/check_exchanges.py holds against docs/api/openapi.yaml, so
// that the document and the server cannot drift apart unseen.
//
// A recording holds request and response bodies verbatim (file contents, command output), so it
// is for test rigs only: the shipped airlockd never turns it on (see serve.hpp), and neither
// does `airlock serve`.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "base/unique_fd.hpp"

namespace airlock::daemon {

struct Exchange {
  std::string method;
  std::string path;
  std::string route;  // the route's pattern, or "unmatched"
  std::map<std::string, std::string> query;
  std::string request_content_type;
  std::string_view request_body;
  int status = 0;
  std::string response_content_type;
  std::string_view response_body;
};

class ExchangeLog {
 public:
  // Opens `path` for appending (created 0600). Throws SystemError naming the path.
  explicit ExchangeLog(const std::string& path);

  // One line per exchange, in one write(2), so processes sharing the file never interleave
  // inside a line. A body past `kMaxBody` is cut there and marked. Never throws.
  void record(const Exchange& exchange) noexcept;

  static constexpr std::size_t kMaxBody = 8u << 20;

 private:
  std::mutex mutex_;
  base::UniqueFd fd_;
};

}  // namespace airlock::daemon
