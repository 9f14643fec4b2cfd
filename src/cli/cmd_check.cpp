// airlock check: can this host's router serve this spec? Prints the decision or the refusal.
#include <spdlog/spdlog.h>

#include <iostream>

#include "airlock/errors.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"

namespace airlock::cli {
namespace {

struct CheckOptions {
  std::string spec_file;
  RouterFlags router;
};

int run_check(const CheckOptions& options, const Context& context) {
  const SandboxSpec spec = load_spec(options.spec_file);
  std::unique_ptr<SandboxRouter> router;
  RoutingDecision decision;
  try {
    router = options.router.build();
    decision = router->ensure_can_serve(spec);
  } catch (const RouterRefusal& refusal) {
    if (context.json) {
      print_json({{"accepted", false}, {"refusal", json::error_to_json(refusal)}});
    } else {
      std::cout << "refused by check '" << refusal.check() << "' (" << refusal.type() << "):\n  "
                << refusal.message() << "\n";
    }
    return kExitAirlockError;
  }
  if (context.json) {
    print_json({{"accepted", true}, {"decision", json::to_json(decision)}});
    return 0;
  }
  if (decision.backend.empty()) {
    std::cout << "no backend is configured: nothing runs, so nothing is reached\n";
    return 0;
  }
  std::cout << "accepted: backend '" << decision.backend << "' ("
            << to_string(decision.backend_isolation) << ") serves the '" << spec.kind()
            << "' workload; effective floor " << to_string(decision.effective_floor) << "\n";
  for (const auto& passed : decision.passed) {
    std::cout << "  ok  " << passed.check << ": " << passed.detail << "\n";
  }
  return 0;
}

const bool kCheckCommand = register_command("check", [](CLI::App& app, Context& context) {
  auto options = std::make_shared<CheckOptions>();
  CLI::App* check = app.add_subcommand(
      "check", "ensure a backend can serve a spec; prints the decision or the refusal");
  check->add_option("--spec", options->spec_file, "the sandbox spec (JSON)")->required();
  options->router.add_to(*check);
  check->callback([options, &context] {
    spdlog::set_level(spdlog::level::from_str(context.log_level));
    context.exit_code = run_check(*options, context);
  });
});

}  // namespace
}  // namespace airlock::cli
