// The CLI's entry: every command registered, the parse, and how an error is reported.
#include "cli/cli_main.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstring>
#include <iostream>

#include "airlock/error_table.hpp"
#include "airlock/errors.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"

namespace airlock::cli {
namespace {

// --json anywhere before `--` (the guest's words are not ours): a parse error must answer in
// the shape asked for even when CLI11 stopped before it read the flag.
bool json_requested(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) return false;
    if (std::strcmp(argv[i], "--json") == 0) return true;
  }
  return false;
}

int report_error(const std::exception& error, bool as_json) {
  if (as_json) print_json(error_document(error));
  const auto* ours = dynamic_cast<const Error*>(&error);
  if (ours == nullptr) {
    std::cerr << "airlock: " << error.what() << std::endl;
    return kExitAirlockError;
  }
  // The exit code is the error table's: 124 for the timeouts, 125 for everything else.
  const int code = error_kind_of(*ours).exit_code;
  if (code == kExitTimeout || ours->type() == "InvalidArgument") {
    std::cerr << "airlock: " << ours->message() << std::endl;
  } else {
    std::cerr << "airlock: " << ours->type() << ": " << ours->message() << std::endl;
  }
  if (const std::string hint = floor_hint(error); !hint.empty()) {
    std::cerr << "airlock: " << hint << std::endl;
  }
  return code;
}

}  // namespace

int cli_main(int argc, char** argv) {
  // Logs go to stderr: stdout carries results (a guest's output, --json documents), and a log
  // line there — an egress denial, say — would corrupt them.
  spdlog::set_default_logger(spdlog::stderr_color_mt("airlock"));
  Context context;
  CLI::App app{"airlock: one seam between agent hosts and the sandboxes that run their code"};
  app.require_subcommand(1);
  add_global_options(app, context);
  app.set_version_flag("--version", "airlock 0.1.0");
  for (auto& [name, setup] : registered_commands()) setup(app, context);
  prepare_app(app, context);

  const bool as_json = json_requested(argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForAllHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForVersion& version) {
    return app.exit(version);
  } catch (const CLI::ParseError& error) {
    // What was not understood is named first: CLI11's own message then describes only what
    // followed from it ("a subcommand is required", "arguments were not expected").
    return report_error(usage_error(app, error), as_json || context.json);
  } catch (const std::exception& error) {
    return report_error(error, as_json || context.json);
  }
  return context.exit_code;
}

}  // namespace airlock::cli
