#include "backends/acas/data_plane.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <ctime>
#include <thread>

#include "airlock/errors.hpp"

namespace airlock::acas {
namespace {

using std::chrono::milliseconds;

// A path segment the SDK would send: no separators, no parent references, no NUL.
void check_segment(std::string_view value, std::string_view name) {
  const bool bad = value.empty() || value.find_first_of(std::string_view("/\\\0", 3)) !=
                                        std::string_view::npos ||
                   value.find("..") != std::string_view::npos;
  if (bad) {
    throw InvalidArgument("acas." + std::string(name) +
                              ": must be non-empty and hold no '/', '\\', '..' or NUL",
                          "acas." + std::string(name));
  }
}

bool retried_status(long status) {
  return status == 408 || status == 429 || status == 500 || status == 502 || status == 503 ||
         status == 504;
}

std::optional<long long> whole_number(std::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  long long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

// An IMF-fixdate ("Wed, 21 Oct 2026 07:28:00 GMT") as a wait from now.
std::optional<milliseconds> until_http_date(const std::string& text) {
  std::tm parts{};
  const char* end = strptime(text.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &parts);
  if (end == nullptr || *end != '\0') return std::nullopt;
  const std::time_t when = timegm(&parts);
  const auto wait = std::chrono::system_clock::from_time_t(when) - std::chrono::system_clock::now();
  return std::max(milliseconds(0), std::chrono::duration_cast<milliseconds>(wait));
}

std::string bounded(std::string_view text, std::size_t limit = 600) {
  return std::string(text.substr(0, limit));
}

// Sleeps `wait`, waking early when `stop` is requested. Returns false when cancelled.
bool interruptible_sleep(milliseconds wait, const std::stop_token& stop) {
  const auto until = Clock::now() + wait;
  while (Clock::now() < until) {
    if (stop.stop_requested()) return false;
    std::this_thread::sleep_for(std::min(milliseconds(50), std::chrono::duration_cast<milliseconds>(
                                                               until - Clock::now())));
  }
  return !stop.stop_requested();
}

}  // namespace

std::string checked_endpoint(std::string_view endpoint, std::string_view where) {
  std::string value(endpoint);
  while (value.ends_with("/")) value.pop_back();
  const std::string field = std::string(where) + ".endpoint";
  if (!value.starts_with("https://") || value.size() == 8 ||
      value.find_first_of("?#@ ", 8) != std::string::npos ||
      value.find('/', 8) != std::string::npos) {
    throw InvalidArgument(field + ": expected https://HOST[:PORT] (the data-plane endpoint, as in "
                                  "https://management.<region>.azuredevcompute.io), got \"" +
                              std::string(endpoint) + "\"",
                          field);
  }
  return value;
}

std::optional<milliseconds> requested_retry_delay(const http::Response& response) {
  for (const char* name : {"retry-after-ms", "x-ms-retry-after-ms"}) {
    if (const auto value = response.header(name)) {
      if (const auto number = whole_number(*value)) return milliseconds(*number);
    }
  }
  if (const auto value = response.header("retry-after")) {
    if (const auto seconds = whole_number(*value)) return milliseconds(*seconds * 1000);
    return until_http_date(*value);
  }
  return std::nullopt;
}

DataPlane::DataPlane(const AcasConfig& config, std::shared_ptr<http::Client> client)
    : config_(config), client_(std::move(client)) {
  base_ = checked_endpoint(config.endpoint, "acas");
  check_segment(config.subscription_id, "subscription_id");
  check_segment(config.resource_group, "resource_group");
  check_segment(config.sandbox_group, "sandbox_group");
  group_path_ = "/subscriptions/" + http::url_encode(config.subscription_id) + "/resourceGroups/" +
                http::url_encode(config.resource_group) + "/sandboxGroups/" +
                http::url_encode(config.sandbox_group);
}

std::string DataPlane::sandbox_path(std::string_view id) const {
  const bool plain = !id.empty() && id.size() <= 256 &&
                     std::all_of(id.begin(), id.end(), [](unsigned char c) {
                       return std::isalnum(c) || c == '-' || c == '_' || c == '.';
                     }) &&
                     id.find("..") == std::string_view::npos;
  if (!plain) {
    throw BackendError("the sandbox service returned a sandbox id airlock will not use",
                       "sandbox id \"" + bounded(id, 80) + "\"");
  }
  return group_path_ + "/sandboxes/" + std::string(id);
}

http::Response DataPlane::request(const Call& call, std::string_view method, std::string_view path,
                                  const Query& query, const std::optional<Body>& body,
                                  std::uint64_t max_response_bytes,
                                  bool forbidden_is_transient) const {
  Query full = query;
  full.emplace_back("api-version", config_.api_version);
  const std::string url = base_ + std::string(path) + "?" + http::query_string(full);
  int retries = 0;
  int forbidden_retries = 0;
  int transport_retries = 0;
  for (int attempt = 1;; ++attempt) {
    if (call.stop.stop_requested()) throw http::Cancelled("cancelled before " + std::string(method) + " " + std::string(path));
    http::Request request;
    request.method = std::string(method);
    request.url = url;
    request.deadline = call.deadline;
    request.stop = call.stop;
    request.max_response_bytes = max_response_bytes;
    AccessToken token;
    try {
      token = call.credential->get_token(config_.token_scope, call.deadline);
    } catch (const CredentialUnavailable& unavailable) {
      throw BackendError("no Azure credential is available to reach the sandbox service",
                         unavailable.what());
    }
    request.headers.emplace_back("Authorization", "Bearer " + token.token);
    request.headers.emplace_back("Accept", "application/json");
    request.headers.emplace_back("User-Agent", "airlock-acas");
    if (body) {
      request.headers.emplace_back("Content-Type", body->content_type);
      request.body = body->bytes;
    }
    std::optional<milliseconds> wait;
    http::Response response;
    try {
      response = client_->perform(request);
    } catch (const http::DeadlineExceeded&) {
      throw;
    } catch (const http::Cancelled&) {
      throw;
    } catch (const http::BodyTooLarge&) {
      throw;
    } catch (const http::TransportError& failure) {
      // A connection that failed before any answer: retried a few times, as the SDK does.
      if (++transport_retries > 3) throw;
      spdlog::debug("acas: {} (retrying)", failure.what());
      wait = std::min<milliseconds>(config_.retry_backoff * (1 << (transport_retries - 1)),
                                     config_.retry_backoff_max);
    }
    if (!wait) {
      const long status = response.status;
      const bool forbidden = status == 403 && forbidden_is_transient &&
                             forbidden_retries < config_.max_forbidden_retries;
      const bool transient = retried_status(status) && retries < config_.max_retries;
      if (!forbidden && !transient) return response;
      const int nth = forbidden ? ++forbidden_retries : ++retries;
      wait = requested_retry_delay(response);
      if (!wait) {
        wait = std::min<milliseconds>(
            milliseconds(config_.retry_backoff.count() * (1LL << std::min(nth - 1, 20))),
            config_.retry_backoff_max);
      }
      spdlog::debug("acas: {} {} answered {}; retry {} in {} ms", method, path, status, nth,
                    wait->count());
      if (Clock::now() + *wait >= call.deadline) {
        throw RetryWaitExpired("the deadline falls within the wait " + std::string(method) + " " +
                                   std::string(path) + " asked for (HTTP " +
                                   std::to_string(status) + ")",
                               status);
      }
    } else if (Clock::now() + *wait >= call.deadline) {
      throw http::DeadlineExceeded("the deadline fell before " + std::string(method) + " " +
                                   std::string(path) + " could be retried");
    }
    if (!interruptible_sleep(*wait, call.stop)) {
      throw http::Cancelled("cancelled while waiting to retry " + std::string(method) + " " +
                            std::string(path));
    }
  }
}

nlohmann::json DataPlane::json(const Call& call, std::string_view method, std::string_view path,
                               std::string_view doing, const Query& query,
                               const std::optional<nlohmann::json>& body) const {
  std::optional<Body> payload;
  if (body) payload = Body{body->dump()};
  const http::Response response = request(call, method, path, query, payload);
  if (response.status < 200 || response.status > 299) fail(doing, method, path, response);
  if (response.body.empty()) return nlohmann::json::object();
  auto parsed = nlohmann::json::parse(response.body, nullptr, false);
  if (parsed.is_discarded()) {
    throw BackendError("the sandbox service answered in a form airlock cannot read",
                       std::string(method) + " " + std::string(path) + ": not JSON: " +
                           bounded(response.body, 200));
  }
  return parsed;
}

void DataPlane::fail(std::string_view doing, std::string_view method, std::string_view path,
                     const http::Response& response) {
  std::string message;
  if (response.status == 401 || response.status == 403) {
    message = "the sandbox service refused airlock's Azure credential (HTTP " +
              std::to_string(response.status) + ") when asked to " + std::string(doing);
  } else if (response.status == 404) {
    message = "the sandbox service found nothing to " + std::string(doing);
  } else {
    message = "the sandbox service failed to " + std::string(doing) + " (HTTP " +
              std::to_string(response.status) + ")";
  }
  throw BackendError(std::move(message), std::string(method) + " " + std::string(path),
                     BackendError::ProviderResponse{response.status, bounded(response.body, 2000)});
}

}  // namespace airlock::acas
