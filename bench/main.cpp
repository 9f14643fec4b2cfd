// airlock-bench — side-by-side measurements of airlock against the peers installed here. The
// operator runs it as `airlock bench …`, which executes this program from beside the airlock
// binary with the same arguments (src/cli/cmd_bench.cpp); it runs on its own as well.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>

#include "bench.hpp"

namespace {
// As airlock's: the program could not do what it was asked (a bad flag, say).
constexpr int kExitBenchError = 125;
}  // namespace

int main(int argc, char** argv) {
  using namespace airlock;
  // Logs go to stderr, as in airlock: stdout carries the tables or the --json document.
  spdlog::set_default_logger(spdlog::stderr_color_mt("airlock"));
  bench::BenchOptions options;
  std::string log_level = "warn";
  CLI::App app{
      "airlock-bench: measure airlock side by side with the peers installed here; prints ratios"};
  app.add_option("--only", options.only, "run only these groups (repeatable)");
  app.add_flag("--quick", options.quick, "fewer iterations (a smoke run, not a measurement)");
  app.add_flag("--list", options.list, "list the bench groups");
  app.add_flag("--json", options.json, "machine-readable output on stdout");
  // `airlock --log-level X bench --log-level Y` passes both: the last one counts.
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off")
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int code = app.exit(error);
    return code == 0 ? 0 : kExitBenchError;
  }
  try {
    spdlog::set_level(spdlog::level::from_str(log_level));
    return bench::run_bench(options);
  } catch (const std::exception& error) {
    std::cerr << "airlock-bench: " << error.what() << std::endl;
    return kExitBenchError;
  }
}
