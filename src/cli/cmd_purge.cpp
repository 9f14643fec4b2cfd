// airlock purge: remove sandboxes found in durable state — one conversation's (--scope,
// optionally --thread), or every one (--all). What a crashed host left behind goes too.
#include <spdlog/spdlog.h>

#include <iostream>

#include "airlock/errors.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/state_backends.hpp"

namespace airlock::cli {
namespace {

struct PurgeOptions {
  RouterFlags flags;
  std::string scope;
  std::string thread;
  bool all = false;
};

int run_purge(const PurgeOptions& options, const Context& context) {
  if (options.all == !options.scope.empty()) {
    throw InvalidArgument("purge: give either --scope (optionally with --thread) or --all",
                          "purge");
  }
  if (!options.thread.empty() && options.scope.empty()) {
    throw InvalidArgument("purge: --thread needs --scope", "purge.thread");
  }
  int removed = 0;
  for (const auto& backend : state_backends(options.flags)) {
    if (options.all) {
      removed += backend->purge_all();
    } else {
      removed += backend->dispose_scope(
          options.scope,
          options.thread.empty() ? std::nullopt : std::optional<std::string_view>(options.thread));
    }
  }
  if (context.json) {
    print_json({{"removed", removed}});
  } else {
    std::cout << "removed " << removed << " sandbox" << (removed == 1 ? "" : "es") << "\n";
  }
  return 0;
}

const bool kPurgeCommand = register_command("purge", [](CLI::App& app, Context& context) {
  auto options = std::make_shared<PurgeOptions>();
  CLI::App* purge = app.add_subcommand(
      "purge", "remove sandboxes found in durable state: --scope S [--thread T], or --all");
  purge->add_option("--scope", options->scope, "the conversation scope whose sandboxes go");
  purge->add_option("--thread", options->thread, "only this thread of the scope");
  purge->add_flag("--all", options->all, "every sandbox in durable state, whoever made it");
  options->flags.add_backend_flags_to(*purge);
  purge->callback([options, &context] {
    spdlog::set_level(spdlog::level::from_str(context.log_level));
    context.exit_code = run_purge(*options, context);
  });
});

}  // namespace
}  // namespace airlock::cli
