// The daemon's Prometheus metrics: a prometheus-cpp registry, rendered by its text serializer
// (exposition format 0.0.4).
//
//   airlock_build_info{version}                               gauge, always 1
//   airlock_http_requests_total{method,route,status}          counter; route is the pattern
//   airlock_http_request_duration_seconds{method,route}       histogram, every request
//   airlock_exec_duration_seconds                             histogram, admitted execs
//                                                             (queueing included)
//   airlock_sandboxes_acquired_total{start}                   counter, calls that got a sandbox:
//                                                             start="cold" when the instance is
//                                                             new to its handle (created, or a
//                                                             condemned one replaced), "warm"
//                                                             when the handle's instance served
//   airlock_sandboxes_live                                    gauge, handles the daemon holds
//   airlock_sandboxes_disposed_total                          counter, sandboxes a dispose/purge
//                                                             took
//   airlock_sandboxes_condemned_total                         counter, instances condemned
//   airlock_snapshots_total{operation}                        counter, snapshot operations that
//                                                             succeeded: operation="taken",
//                                                             "resumed" (a resume or a fork),
//                                                             "deleted"
//   airlock_admissions_waiting                                gauge, calls queued for admission
//   airlock_requests_in_flight                                gauge
//   airlock_http_connections_open                             gauge
//   airlock_clients_gone_total                                counter, clients that hung up
//   airlock_errors_total{type}                                counter, by airlock error type
//   process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
//   process_open_fds, process_max_fds, process_start_time_seconds
//                                                             the daemon process, read from
//                                                             /proc at each scrape
//
// Every method is thread-safe and cheap; nothing here can throw into a request.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace prometheus {
class Registry;
class Counter;
class Gauge;
class Histogram;
template <typename T>
class Family;
}  // namespace prometheus

namespace airlock::daemon {

class Metrics {
 public:
  Metrics();
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  void request(std::string_view method, std::string_view route, int status,
               double seconds) noexcept;
  void exec_finished(double seconds) noexcept;
  void error(std::string_view type) noexcept;

  // `warm`: the instance the handle already named served the call.
  void sandbox_acquired(bool warm) noexcept;
  void sandboxes_disposed(int count) noexcept;
  void sandbox_condemned() noexcept;
  void snapshot_taken() noexcept;
  void snapshot_resumed() noexcept;
  void snapshot_deleted() noexcept;
  void client_gone() noexcept;

  void connection_opened() noexcept;
  void connection_closed() noexcept;
  void request_started() noexcept;
  void request_finished() noexcept;
  std::int64_t requests_in_flight() const noexcept;

  // How many sandboxes are live, asked at each scrape (the handle store's count).
  void count_live_sandboxes(std::function<std::size_t()> count);

  // Counts a call waiting for admission for as long as it lives.
  class Waiting {
   public:
    explicit Waiting(Metrics& metrics);
    ~Waiting();
    Waiting(const Waiting&) = delete;
    Waiting& operator=(const Waiting&) = delete;

   private:
    Metrics& metrics_;
  };

  std::string render() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Histogram>* durations_;
  prometheus::Family<prometheus::Counter>* errors_;
  prometheus::Histogram* exec_;
  prometheus::Counter* cold_;
  prometheus::Counter* warm_;
  prometheus::Counter* disposed_;
  prometheus::Counter* condemned_;
  prometheus::Counter* snapshots_taken_;
  prometheus::Counter* snapshots_resumed_;
  prometheus::Counter* snapshots_deleted_;
  prometheus::Counter* clients_gone_;
  prometheus::Gauge* waiting_;
  prometheus::Gauge* in_flight_;
  prometheus::Gauge* connections_;
  prometheus::Gauge* live_;

  mutable std::mutex live_mutex_;
  std::function<std::size_t()> count_live_;
};

}  // namespace airlock::daemon
