// airlock-bench: every registered bench group, one run, printed as stats and ratios; and what the
// groups share (see bench.hpp).
#include "bench.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <iostream>
#include <map>

extern char** environ;

namespace airlock::bench {
namespace {

struct Group {
  std::string description;
  BenchGroup run;
};
std::map<std::string, Group>& groups() {
  static std::map<std::string, Group> registered;
  return registered;
}

double percentile(std::vector<double> samples, double fraction) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const auto index = static_cast<std::size_t>(fraction * static_cast<double>(samples.size() - 1));
  return samples[index];
}

}  // namespace

int run_bench(const BenchOptions& options) {
  if (options.list) {
    for (const auto& [name, group] : groups())
      std::cout << name << "\t" << group.description << "\n";
    return 0;
  }
  BenchRun run(options.quick);
  json::Json failures = json::Json::array();
  for (const auto& [name, group] : groups()) {
    if (!options.only.empty() &&
        std::find(options.only.begin(), options.only.end(), name) == options.only.end()) {
      continue;
    }
    if (!options.json) std::cerr << "bench: " << name << " …" << std::endl;
    try {
      group.run(run);
    } catch (const std::exception& error) {
      run.skipped(name, std::string("the group failed: ") + error.what());
      failures.push_back(name);
    }
  }
  if (options.json) {
    json::Json stats = json::Json::array();
    for (const auto& s : run.stats()) {
      stats.push_back({{"subject", s.subject},
                       {"unit", s.unit},
                       {"n", s.samples.size()},
                       {"p50", s.p50()},
                       {"p90", s.p90()},
                       {"p99", s.p99()},
                       {"min", s.min()}});
    }
    json::Json ratios = json::Json::array();
    for (const auto& r : run.ratios()) {
      json::Json entry{{"figure", r.figure}, {"value", r.value}, {"target", r.target}};
      if (r.met) entry["met"] = *r.met;
      ratios.push_back(entry);
    }
    json::Json skips = json::Json::array();
    for (const auto& [subject, reason] : run.skips()) {
      skips.push_back({{"subject", subject}, {"reason", reason}});
    }
    const json::Json document{
        {"stats", stats}, {"ratios", ratios}, {"skipped", skips}, {"failed", failures}};
    std::cout << document.dump() << std::endl;
    return failures.empty() ? 0 : 1;
  }
  std::printf("%-58s %6s %9s %9s %9s %9s\n", "subject", "n", "p50", "p90", "min", "unit");
  for (const auto& s : run.stats()) {
    std::printf("%-58s %6zu %9.3f %9.3f %9.3f %9s\n", s.subject.c_str(), s.samples.size(), s.p50(),
                s.p90(), s.min(), s.unit.c_str());
  }
  if (!run.ratios().empty()) {
    std::printf("\n%-70s %9s %10s %6s\n", "ratio (p50 / p50)", "value", "target", "met");
    for (const auto& r : run.ratios()) {
      std::printf("%-70s %9.3f %10s %6s\n", r.figure.c_str(), r.value, r.target.c_str(),
                  !r.met ? "-" : (*r.met ? "yes" : "NO"));
    }
  }
  for (const auto& [subject, reason] : run.skips()) {
    std::printf("SKIPPED %s: %s\n", subject.c_str(), reason.c_str());
  }
  return failures.empty() ? 0 : 1;
}

double Stats::p50() const {
  return percentile(samples, 0.5);
}
double Stats::p90() const {
  return percentile(samples, 0.9);
}
double Stats::p99() const {
  return percentile(samples, 0.99);
}
double Stats::min() const {
  return samples.empty() ? 0 : *std::min_element(samples.begin(), samples.end());
}

const Stats& BenchRun::time(const std::string& subject, int n, const std::function<void()>& body,
                            int warmup) {
  for (int i = 0; i < warmup; ++i) body();
  Stats stats;
  stats.subject = subject;
  stats.samples.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const auto start = std::chrono::steady_clock::now();
    body();
    const auto elapsed = std::chrono::steady_clock::now() - start;
    stats.samples.push_back(std::chrono::duration<double, std::milli>(elapsed).count());
  }
  return record(std::move(stats));
}

const Stats& BenchRun::record(Stats stats) {
  stats_.push_back(std::move(stats));
  return stats_.back();
}

void BenchRun::ratio(const std::string& figure, const Stats& numerator, const Stats& denominator,
                     std::optional<double> target, bool at_most) {
  Ratio ratio;
  ratio.figure = figure;
  ratio.value = denominator.p50() == 0 ? 0 : numerator.p50() / denominator.p50();
  if (target) {
    char text[32];
    std::snprintf(text, sizeof text, "%s %.2f", at_most ? "<=" : ">=", *target);
    ratio.target = text;
    ratio.met = at_most ? ratio.value <= *target : ratio.value >= *target;
  }
  ratios_.push_back(std::move(ratio));
}

void BenchRun::skipped(const std::string& subject, const std::string& reason) {
  skips_.emplace_back(subject, reason);
}

ScratchDirectory::ScratchDirectory(const std::string& prefix, std::filesystem::perms mode) {
  std::string pattern = "/tmp/" + prefix + "-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr)
    throw std::runtime_error("mkdtemp failed for " + pattern);
  path = pattern;
  if (mode != std::filesystem::perms::owner_all) std::filesystem::permissions(path, mode);
}

ScratchDirectory::~ScratchDirectory() {
  std::error_code ignored;
  std::filesystem::remove_all(path, ignored);
}

double elapsed_ms(BenchClock::time_point start) {
  return std::chrono::duration<double, std::milli>(BenchClock::now() - start).count();
}

int run_quietly(const std::vector<std::string>& argv) {
  std::vector<char*> arguments;
  for (const auto& argument : argv) arguments.push_back(const_cast<char*>(argument.c_str()));
  arguments.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t child = 0;
  const int failed =
      ::posix_spawn(&child, arguments[0], &actions, nullptr, arguments.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (failed != 0) return 127;
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool register_bench_group(std::string name, std::string description, BenchGroup group) {
  groups()[std::move(name)] = Group{std::move(description), std::move(group)};
  return true;
}

}  // namespace airlock::bench
