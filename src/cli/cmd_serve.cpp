// airlock serve: the daemon (airlockd) in the foreground — the same flags and the same code.
#include <spdlog/spdlog.h>

#include "cli/command.hpp"
#include "daemon/serve.hpp"

namespace airlock::cli {
namespace {

const bool kServeCommand = register_command("serve", [](CLI::App& app, Context& context) {
  auto flags = std::make_shared<daemon::ServeFlags>();
  CLI::App* serve = app.add_subcommand(
      "serve", "serve the HTTP API (airlockd) on a unix socket, and TCP with a bearer token");
  daemon::add_serve_flags(*serve, *flags);
  serve->callback([flags, &context] {
    spdlog::set_level(spdlog::level::from_str(context.log_level));
    context.exit_code = daemon::run_serve(*flags);
  });
});

}  // namespace
}  // namespace airlock::cli
