#include "daemon/metrics.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <sys/resource.h>
#include <unistd.h>

#include <sstream>
#include <vector>

#ifndef AIRLOCK_VERSION
#error "AIRLOCK_VERSION must name the version this daemon is built as"
#endif

namespace airlock::daemon {
namespace {

const prometheus::Histogram::BucketBoundaries& latency_bounds() {
  static const prometheus::Histogram::BucketBoundaries bounds{
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 30, 120};
  return bounds;
}

prometheus::MetricFamily single(std::string name, std::string help, prometheus::MetricType type,
                                double value) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  prometheus::ClientMetric metric;
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(metric);
  return family;
}

// A /proc file whole (they are small, and read in one go they are one consistent snapshot);
// empty when it cannot be read.
std::string read_small_file(const char* path) {
  std::string text;
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return text;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) {
    text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return text;
}

// The process_* families every Prometheus client exports, from /proc/self at scrape time. A
// field /proc does not give (another kernel's layout) is left out rather than guessed.
std::vector<prometheus::MetricFamily> process_families() {
  std::vector<prometheus::MetricFamily> out;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  const std::string stat = read_small_file("/proc/self/stat");
  // Fields after the command name, which is parenthesised and may hold spaces: the third
  // field (state) comes first here.
  const auto close = stat.rfind(')');
  if (close != std::string::npos && ticks > 0) {
    std::istringstream fields(stat.substr(close + 2));
    std::vector<std::string> field;
    for (std::string value; fields >> value;) field.push_back(value);
    // Numbered as proc(5) numbers them, from 3 (state): utime 14, stime 15, starttime 22,
    // vsize 23, rss 24.
    const auto at = [&](std::size_t number) { return std::stod(field.at(number - 3)); };
    if (field.size() >= 22) {
      out.push_back(single("process_cpu_seconds_total", "user and system CPU time spent",
                           prometheus::MetricType::Counter, (at(14) + at(15)) / ticks));
      out.push_back(single("process_virtual_memory_bytes", "virtual memory size",
                           prometheus::MetricType::Gauge, at(23)));
      out.push_back(single("process_resident_memory_bytes", "resident memory size",
                           prometheus::MetricType::Gauge, at(24) * page));
      std::istringstream system(read_small_file("/proc/stat"));
      for (std::string line; std::getline(system, line);) {
        if (line.rfind("btime ", 0) == 0) {
          out.push_back(
              single("process_start_time_seconds", "start time of the process since the Unix epoch",
                     prometheus::MetricType::Gauge, std::stod(line.substr(6)) + at(22) / ticks));
          break;
        }
      }
    }
  }
  if (DIR* fds = opendir("/proc/self/fd")) {
    double open = 0;
    while (const dirent* entry = readdir(fds)) {
      if (entry->d_name[0] != '.') ++open;
    }
    closedir(fds);
    out.push_back(single("process_open_fds", "open file descriptors (this scrape's own included)",
                         prometheus::MetricType::Gauge, open - 1));
  }
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    out.push_back(single("process_max_fds", "the most file descriptors the process may open",
                         prometheus::MetricType::Gauge, static_cast<double>(limit.rlim_cur)));
  }
  return out;
}

// A family of one unlabelled series, registered in `registry`.
template <typename Builder>
auto& single_series(Builder builder, prometheus::Registry& registry, const char* name,
                    const char* help) {
  return builder.Name(name).Help(help).Register(registry).Add({});
}

}  // namespace

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  using prometheus::BuildCounter;
  using prometheus::BuildGauge;
  using prometheus::BuildHistogram;
  prometheus::Registry& registry = *registry_;
  BuildGauge()
      .Name("airlock_build_info")
      .Help("the airlock version this daemon was built as")
      .Register(registry)
      .Add({{"version", AIRLOCK_VERSION}})
      .Set(1);
  requests_ = &BuildCounter()
                   .Name("airlock_http_requests_total")
                   .Help("HTTP requests by method, route, status")
                   .Register(registry);
  durations_ = &BuildHistogram()
                    .Name("airlock_http_request_duration_seconds")
                    .Help("time from a request's headers to its completion, by method and route")
                    .Register(registry);
  exec_ = &BuildHistogram()
               .Name("airlock_exec_duration_seconds")
               .Help("admitted execs, from admission to result (queueing included)")
               .Register(registry)
               .Add({}, latency_bounds());
  auto& acquired = BuildCounter()
                       .Name("airlock_sandboxes_acquired_total")
                       .Help(
                           "calls that got a sandbox: cold when the instance is new to its "
                           "handle, warm when the handle's instance served")
                       .Register(registry);
  cold_ = &acquired.Add({{"start", "cold"}});
  warm_ = &acquired.Add({{"start", "warm"}});
  errors_ = &BuildCounter()
                 .Name("airlock_errors_total")
                 .Help("errors answered, by airlock error type")
                 .Register(registry);
  live_ = &single_series(BuildGauge(), registry, "airlock_sandboxes_live",
                         "sandbox handles the daemon holds");
  disposed_ = &single_series(BuildCounter(), registry, "airlock_sandboxes_disposed_total",
                             "sandboxes a dispose or purge reported gone");
  condemned_ = &single_series(BuildCounter(), registry, "airlock_sandboxes_condemned_total",
                              "instances condemned after a command whose end is unknown");
  auto& snapshots = BuildCounter()
                        .Name("airlock_snapshots_total")
                        .Help(
                            "snapshot operations that succeeded: taken, resumed (a resume or a "
                            "fork), deleted")
                        .Register(registry);
  snapshots_taken_ = &snapshots.Add({{"operation", "taken"}});
  snapshots_resumed_ = &snapshots.Add({{"operation", "resumed"}});
  snapshots_deleted_ = &snapshots.Add({{"operation", "deleted"}});
  waiting_ = &single_series(BuildGauge(), registry, "airlock_admissions_waiting",
                            "calls waiting for admission");
  in_flight_ = &single_series(BuildGauge(), registry, "airlock_requests_in_flight",
                              "requests being received or handled");
  connections_ = &single_series(BuildGauge(), registry, "airlock_http_connections_open",
                                "open client connections");
  clients_gone_ = &single_series(BuildCounter(), registry, "airlock_clients_gone_total",
                                 "clients that hung up mid-request");
}

Metrics::~Metrics() = default;

void Metrics::request(std::string_view method, std::string_view route, int status,
                      double seconds) noexcept {
  try {
    requests_
        ->Add({{"method", std::string(method)},
               {"route", std::string(route)},
               {"status", std::to_string(status)}})
        .Increment();
    durations_
        ->Add({{"method", std::string(method)}, {"route", std::string(route)}}, latency_bounds())
        .Observe(seconds);
  } catch (...) {
    // Metrics never fail a request.
  }
}

void Metrics::exec_finished(double seconds) noexcept {
  exec_->Observe(seconds);
}

void Metrics::error(std::string_view type) noexcept {
  try {
    errors_->Add({{"type", std::string(type)}}).Increment();
  } catch (...) {
  }
}

void Metrics::sandbox_acquired(bool warm) noexcept {
  (warm ? warm_ : cold_)->Increment();
}
void Metrics::sandboxes_disposed(int count) noexcept {
  if (count > 0) disposed_->Increment(count);
}
void Metrics::sandbox_condemned() noexcept {
  condemned_->Increment();
}
void Metrics::snapshot_taken() noexcept {
  snapshots_taken_->Increment();
}
void Metrics::snapshot_resumed() noexcept {
  snapshots_resumed_->Increment();
}
void Metrics::snapshot_deleted() noexcept {
  snapshots_deleted_->Increment();
}
void Metrics::client_gone() noexcept {
  clients_gone_->Increment();
}
void Metrics::connection_opened() noexcept {
  connections_->Increment();
}
void Metrics::connection_closed() noexcept {
  connections_->Decrement();
}
void Metrics::request_started() noexcept {
  in_flight_->Increment();
}
void Metrics::request_finished() noexcept {
  in_flight_->Decrement();
}
std::int64_t Metrics::requests_in_flight() const noexcept {
  return static_cast<std::int64_t>(in_flight_->Value());
}

void Metrics::count_live_sandboxes(std::function<std::size_t()> count) {
  std::lock_guard lock(live_mutex_);
  count_live_ = std::move(count);
}

Metrics::Waiting::Waiting(Metrics& metrics) : metrics_(metrics) {
  metrics_.waiting_->Increment();
}
Metrics::Waiting::~Waiting() {
  metrics_.waiting_->Decrement();
}

std::string Metrics::render() const {
  {
    std::lock_guard lock(live_mutex_);
    if (count_live_) {
      try {
        live_->Set(static_cast<double>(count_live_()));
      } catch (...) {
        // The last count stands.
      }
    }
  }
  auto families = registry_->Collect();
  try {
    for (auto& family : process_families()) families.push_back(std::move(family));
  } catch (...) {
    // /proc said something unexpected: the scrape goes on without the process families.
  }
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace airlock::daemon
