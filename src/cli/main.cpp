// airlock — the operator's CLI.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <iostream>

#include "airlock/error_table.hpp"
#include "airlock/errors.hpp"
#include "airlock/json.hpp"
#include "cli/command.hpp"

int main(int argc, char** argv) {
  using namespace airlock;
  // Logs go to stderr: stdout carries results (a guest's output, --json documents), and a log
  // line there — an egress denial, say — would corrupt them.
  spdlog::set_default_logger(spdlog::stderr_color_mt("airlock"));
  cli::Context context;
  CLI::App app{"airlock: one seam between agent hosts and the sandboxes that run their code"};
  app.require_subcommand(1);
  app.add_flag("--json", context.json, "machine-readable output on stdout");
  app.add_option("--log-level", context.log_level, "trace, debug, info, warn, error, off")
      ->capture_default_str();
  app.set_version_flag("--version", "airlock 0.1.0");
  for (auto& [name, setup] : cli::registered_commands()) setup(app, context);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int code = app.exit(error);
    return code == 0 ? 0 : cli::kExitAirlockError;
  } catch (const Error& error) {
    if (context.json) {
      std::cout << json::error_to_json(error).dump() << std::endl;
    }
    // The exit code is the error table's: 124 for the timeouts, 125 for everything else.
    const int code = error_kind_of(error).exit_code;
    if (code == cli::kExitTimeout) {
      std::cerr << "airlock: " << error.message() << std::endl;
    } else {
      std::cerr << "airlock: " << error.type() << ": " << error.message() << std::endl;
    }
    return code;
  } catch (const std::exception& error) {
    std::cerr << "airlock: " << error.what() << std::endl;
    return cli::kExitAirlockError;
  }
  return context.exit_code;
}
