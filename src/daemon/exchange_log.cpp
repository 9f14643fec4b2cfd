#include "daemon/exchange_log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "airlock/json.hpp"

namespace airlock::daemon {

ExchangeLog::ExchangeLog(const std::string& path)
    : fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600)) {
  if (!fd_) throw SystemError("cannot open the exchange log", errno, path);
}

namespace {

void put_body(json::Json& line, const char* field, std::string_view body) {
  const bool cut = body.size() > ExchangeLog::kMaxBody;
  line[std::string(field) + "_base64"] =
      base64_encode(cut ? body.substr(0, ExchangeLog::kMaxBody) : body);
  line[std::string(field) + "_bytes"] = body.size();
  if (cut) line[std::string(field) + "_cut"] = true;
}

}  // namespace

void ExchangeLog::record(const Exchange& exchange) noexcept {
  try {
    json::Json line{{"method", exchange.method},
                    {"path", exchange.path},
                    {"route", exchange.route},
                    {"query", exchange.query},
                    {"request_content_type", exchange.request_content_type},
                    {"status", exchange.status},
                    {"response_content_type", exchange.response_content_type}};
    put_body(line, "request_body", exchange.request_body);
    put_body(line, "response_body", exchange.response_body);
    std::string text = line.dump(-1, ' ', false, json::Json::error_handler_t::replace);
    text += '\n';
    std::lock_guard guard(mutex_);
    std::size_t written = 0;
    while (written < text.size()) {
      const ssize_t n = ::write(fd_.get(), text.data() + written, text.size() - written);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      written += static_cast<std::size_t>(n);
    }
  } catch (...) {
  }
}

}  // namespace airlock::daemon
