// airlock bench: the measurements are a program of their own, airlock-bench (bench/), installed
// beside airlock. This command runs it — the one next to the running airlock, else the first on
// $PATH — with the arguments that follow `bench`, and airlock's --json and --log-level when given.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/command.hpp"

namespace airlock::cli {
namespace {

constexpr const char* kBenchProgram = "airlock-bench";

bool runnable(const std::filesystem::path& candidate) {
  std::error_code ignored;
  return std::filesystem::is_regular_file(candidate, ignored) &&
         ::access(candidate.c_str(), X_OK) == 0;
}

// Replaces this process by airlock-bench; returns only by throwing, naming where it looked.
[[noreturn]] void exec_bench(const std::vector<std::string>& arguments) {
  std::vector<std::filesystem::path> candidates;
  std::string looked;
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!self.empty()) {
    candidates.push_back(self.parent_path() / kBenchProgram);
    looked = candidates.back().string() + " (beside this airlock)";
  } else {
    looked = "beside this airlock (/proc/self/exe unreadable: " + error.message() + ")";
  }
  const char* path = std::getenv("PATH");
  if (path == nullptr || *path == '\0') {
    looked += ", and not in $PATH (it is empty)";
  } else {
    std::string directories(path);
    for (std::size_t start = 0; start <= directories.size();) {
      std::size_t end = directories.find(':', start);
      if (end == std::string::npos) end = directories.size();
      // An empty entry would mean the working directory: not a place to run a program from.
      if (end > start) {
        candidates.push_back(std::filesystem::path(directories.substr(start, end - start)) /
                             kBenchProgram);
      }
      start = end + 1;
    }
    looked += ", and in $PATH (" + directories + ")";
  }
  for (const auto& candidate : candidates) {
    if (!runnable(candidate)) continue;
    std::vector<char*> argv{const_cast<char*>(candidate.c_str())};
    for (const auto& argument : arguments) argv.push_back(const_cast<char*>(argument.c_str()));
    argv.push_back(nullptr);
    ::execv(candidate.c_str(), argv.data());
    throw std::runtime_error("bench: could not run " + candidate.string() + ": " +
                             std::strerror(errno));
  }
  throw std::runtime_error(std::string("bench: the bench program ") + kBenchProgram +
                           " was not found: looked for " + looked +
                           ". Build it (AIRLOCK_BUILD_BENCH=ON, target airlock-bench) or "
                           "install it beside airlock.");
}

const bool kBenchCommand = register_command("bench", [](CLI::App& app, Context& context) {
  CLI::App* bench = app.add_subcommand(
      "bench",
      "measure airlock side by side with the peers installed here; prints ratios (airlock-bench)");
  // Everything after `bench`, --help included, is airlock-bench's to parse.
  bench->prefix_command();
  bench->set_help_flag();
  bench->callback([bench, &app, &context] {
    std::vector<std::string> arguments;
    if (context.json) arguments.emplace_back("--json");
    if (app.get_option("--log-level")->count() > 0) {
      arguments.emplace_back("--log-level");
      arguments.push_back(context.log_level);
    }
    for (const auto& argument : bench->remaining()) arguments.push_back(argument);
    exec_bench(arguments);
  });
});

}  // namespace
}  // namespace airlock::cli
