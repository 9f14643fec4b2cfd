// The daemon's Prometheus metrics, rendered in the text exposition format (version 0.0.4).
//
//   airlock_http_requests_total{method,route,status}     counter; route is the pattern
//   airlock_http_request_duration_seconds                histogram, every request
//   airlock_exec_duration_seconds                         histogram, admitted execs (queue+run)
//   airlock_sandboxes_acquired_total                      counter, successful acquires
//   airlock_sandboxes_disposed_total                      counter, sandboxes a dispose/purge took
//   airlock_sandboxes_condemned_total                     counter, instances condemned
//   airlock_admissions_waiting                            gauge, calls queued for admission
//   airlock_requests_in_flight                            gauge
//   airlock_http_connections_open                         gauge
//   airlock_clients_gone_total                            counter, clients that hung up mid-request
//   airlock_errors_total{type}                            counter, by airlock error type
//
// Every method is thread-safe and cheap; nothing here can throw into a request.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>

namespace airlock::daemon {

class Histogram {
 public:
  static constexpr std::array<double, 15> kBounds{
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 30, 120};
  void observe(double seconds) noexcept;
  // Appends the `_bucket`, `_sum` and `_count` lines for `name`.
  void render(std::string& out, std::string_view name) const;

 private:
  mutable std::mutex mutex_;
  std::array<std::uint64_t, kBounds.size() + 1> buckets_{};  // last: +Inf
  double sum_ = 0;
  std::uint64_t count_ = 0;
};

class Metrics {
 public:
  void request(std::string_view method, std::string_view route, int status,
               double seconds) noexcept;
  void exec_finished(double seconds) noexcept { exec_.observe(seconds); }
  void error(std::string_view type) noexcept;

  void sandbox_acquired() noexcept { ++acquired_; }
  void sandboxes_disposed(int count) noexcept;
  void sandbox_condemned() noexcept { ++condemned_; }
  void client_gone() noexcept { ++clients_gone_; }

  void connection_opened() noexcept { ++connections_; }
  void connection_closed() noexcept { --connections_; }
  void request_started() noexcept { ++in_flight_; }
  void request_finished() noexcept { --in_flight_; }
  std::int64_t requests_in_flight() const noexcept { return in_flight_; }

  // Counts a call waiting for admission for as long as it lives.
  class Waiting {
   public:
    explicit Waiting(Metrics& metrics) : metrics_(metrics) { ++metrics_.waiting_; }
    ~Waiting() { --metrics_.waiting_; }
    Waiting(const Waiting&) = delete;
    Waiting& operator=(const Waiting&) = delete;

   private:
    Metrics& metrics_;
  };

  std::string render() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::tuple<std::string, std::string, int>, std::uint64_t> requests_;
  std::map<std::string, std::uint64_t> errors_;
  Histogram durations_;
  Histogram exec_;
  std::atomic<std::uint64_t> acquired_{0};
  std::atomic<std::uint64_t> disposed_{0};
  std::atomic<std::uint64_t> condemned_{0};
  std::atomic<std::uint64_t> clients_gone_{0};
  std::atomic<std::int64_t> waiting_{0};
  std::atomic<std::int64_t> in_flight_{0};
  std::atomic<std::int64_t> connections_{0};
};

}  // namespace airlock::daemon
