// airlock-bench (what `airlock bench` runs): side-by-side measurements of airlock against peers
// found on this machine, reported as ratios against targets (SPEC §7). Never asserted in tests.
// It is a client of libairlock like any other: it includes the public headers (include/airlock)
// only, and the host baselines it measures against are its own code (bench_host.cpp).
//
// An area adds its measurements in its own bench/bench_<area>.cpp:
//
//   const bool kLinuxBenchGroup = airlock::bench::register_bench_group(
//       "linux", "cold and warm exec on the linux backend vs host fork+exec and bwrap",
//       [](airlock::bench::BenchRun& run) { … run.time("linux warm exec true", 200, [&] { … }); });
//
// The flag's name is unique across the program: the build may compile several groups as one unit.
#pragma once

#include <chrono>
#include <deque>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "airlock/json.hpp"

namespace airlock::bench {

// A fresh directory under /tmp (mode 0700, or `mode`) for one bench run, removed with everything
// in it when the run ends.
class ScratchDirectory {
 public:
  explicit ScratchDirectory(const std::string& prefix,
                            std::filesystem::perms mode = std::filesystem::perms::owner_all);
  ~ScratchDirectory();
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;

  std::filesystem::path path;
};

using BenchClock = std::chrono::steady_clock;

// Milliseconds since `start`, as a fraction.
double elapsed_ms(BenchClock::time_point start);

// Runs argv (argv[0] a path) with stdout and stderr discarded and returns its exit code: 127 when
// it could not be started, 128 + the signal when one killed it.
int run_quietly(const std::vector<std::string>& argv);

struct Stats {
  std::string subject;
  std::string unit = "ms";  // "ms" for timings; any other unit for rates (e.g. "MB/s")
  std::vector<double> samples;
  double p50() const;
  double p90() const;
  double p99() const;
  double min() const;
};

struct Ratio {
  std::string figure;  // "linux warm exec true / host fork+exec"
  double value = 0;
  std::string target;       // "<= 1.3"
  std::optional<bool> met;  // nullopt when there is no target
};

class BenchRun {
 public:
  explicit BenchRun(bool quick) : quick_(quick) {}

  // Quick mode (`--quick`) shrinks iteration counts for smoke runs.
  bool quick() const noexcept { return quick_; }
  int iterations(int full) const noexcept { return quick_ ? std::max(3, full / 10) : full; }

  // Time `body` `n` times (after `warmup` untimed runs); returns the stats it recorded.
  const Stats& time(const std::string& subject, int n, const std::function<void()>& body,
                    int warmup = 2);
  // Record samples measured another way (e.g. a throughput in MB/s).
  const Stats& record(Stats stats);
  // a.p50 / b.p50 with a target; `at_most` = true means the ratio should be ≤ target.
  void ratio(const std::string& figure, const Stats& numerator, const Stats& denominator,
             std::optional<double> target, bool at_most = true);
  // Something could not be measured (a peer is missing): printed loudly, never silently dropped.
  void skipped(const std::string& subject, const std::string& reason);

  const std::deque<Stats>& stats() const noexcept { return stats_; }
  const std::vector<Ratio>& ratios() const noexcept { return ratios_; }
  const std::vector<std::pair<std::string, std::string>>& skips() const noexcept { return skips_; }

 private:
  bool quick_;
  // A deque: time() and record() hand out references that later records must not move.
  std::deque<Stats> stats_;
  std::vector<Ratio> ratios_;
  std::vector<std::pair<std::string, std::string>> skips_;
};

using BenchGroup = std::function<void(BenchRun& run)>;
bool register_bench_group(std::string name, std::string description, BenchGroup group);

// What airlock-bench was asked (its command line: see main.cpp).
struct BenchOptions {
  std::vector<std::string> only;  // run only these groups; empty: all of them
  bool quick = false;
  bool list = false;  // list the groups instead of running them
  bool json = false;  // one JSON document on stdout instead of the tables
};
// Runs the registered groups, in name order, and prints what they measured. Returns the exit
// code: 1 when a group failed (it is reported as skipped, with the reason), else 0.
int run_bench(const BenchOptions& options);

}  // namespace airlock::bench
