#include "daemon/metrics.hpp"

#include <fmt/format.h>

namespace airlock::daemon {
namespace {

// Label values are escaped as the exposition format asks: backslash, quote, newline.
std::string escape(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

void header(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

}  // namespace

void Histogram::observe(double seconds) noexcept {
  std::lock_guard lock(mutex_);
  std::size_t index = 0;
  while (index < kBounds.size() && seconds > kBounds[index]) ++index;
  ++buckets_[index];
  sum_ += seconds;
  ++count_;
}

void Histogram::render(std::string& out, std::string_view name) const {
  std::lock_guard lock(mutex_);
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < kBounds.size(); ++i) {
    cumulative += buckets_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, kBounds[i], cumulative);
  }
  cumulative += buckets_.back();
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, cumulative);
  out += fmt::format("{}_sum {}\n{}_count {}\n", name, sum_, name, count_);
}

void Metrics::request(std::string_view method, std::string_view route, int status,
                      double seconds) noexcept {
  try {
    {
      std::lock_guard lock(mutex_);
      ++requests_[{std::string(method), std::string(route), status}];
    }
    durations_.observe(seconds);
  } catch (...) {
    // Metrics never fail a request.
  }
}

void Metrics::error(std::string_view type) noexcept {
  try {
    std::lock_guard lock(mutex_);
    ++errors_[std::string(type)];
  } catch (...) {
  }
}

void Metrics::sandboxes_disposed(int count) noexcept {
  if (count > 0) disposed_ += static_cast<std::uint64_t>(count);
}

std::string Metrics::render() const {
  std::string out;
  header(out, "airlock_http_requests_total", "counter", "HTTP requests by method, route, status");
  {
    std::lock_guard lock(mutex_);
    for (const auto& [labels, count] : requests_) {
      const auto& [method, route, status] = labels;
      out += fmt::format(
          "airlock_http_requests_total{{method=\"{}\",route=\"{}\",status=\"{}\"}} {}\n",
          escape(method), escape(route), status, count);
    }
  }
  header(out, "airlock_http_request_duration_seconds", "histogram",
         "time from a request's headers to its completion");
  durations_.render(out, "airlock_http_request_duration_seconds");
  header(out, "airlock_exec_duration_seconds", "histogram",
         "admitted execs, from admission to result (queueing included)");
  exec_.render(out, "airlock_exec_duration_seconds");

  header(out, "airlock_sandboxes_acquired_total", "counter", "successful acquires");
  out += fmt::format("airlock_sandboxes_acquired_total {}\n", acquired_.load());
  header(out, "airlock_sandboxes_disposed_total", "counter",
         "sandboxes a dispose or purge reported gone");
  out += fmt::format("airlock_sandboxes_disposed_total {}\n", disposed_.load());
  header(out, "airlock_sandboxes_condemned_total", "counter",
         "instances condemned after a command whose end is unknown");
  out += fmt::format("airlock_sandboxes_condemned_total {}\n", condemned_.load());
  header(out, "airlock_admissions_waiting", "gauge", "calls waiting for admission");
  out += fmt::format("airlock_admissions_waiting {}\n", waiting_.load());
  header(out, "airlock_requests_in_flight", "gauge", "requests being received or handled");
  out += fmt::format("airlock_requests_in_flight {}\n", in_flight_.load());
  header(out, "airlock_http_connections_open", "gauge", "open client connections");
  out += fmt::format("airlock_http_connections_open {}\n", connections_.load());
  header(out, "airlock_clients_gone_total", "counter", "clients that hung up mid-request");
  out += fmt::format("airlock_clients_gone_total {}\n", clients_gone_.load());

  header(out, "airlock_errors_total", "counter", "errors answered, by airlock error type");
  {
    std::lock_guard lock(mutex_);
    for (const auto& [type, count] : errors_) {
      out += fmt::format("airlock_errors_total{{type=\"{}\"}} {}\n", escape(type), count);
    }
  }
  return out;
}

}  // namespace airlock::daemon
