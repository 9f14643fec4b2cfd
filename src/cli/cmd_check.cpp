// airlock check: can this host's router serve this spec? Prints the decision or the refusal.
//
// Against the backends this airlock has (--backend, --config), or against a declaration
// (--declared FILE): a backend's declarations as data, routed by the same router with the same
// checks, with nothing behind them — the output says so, and nothing is ever acquired.
#include <spdlog/spdlog.h>

#include <iostream>

#include "airlock/backend_factory.hpp"
#include "airlock/errors.hpp"
#include "cli/command.hpp"
#include "cli/common.hpp"
#include "cli/declared_backend.hpp"

namespace airlock::cli {
namespace {

struct CheckOptions {
  std::string spec_file;
  std::string declared_file;
  RouterFlags router;
};

// The router over a declaration: the host's policy from the flags (floor, denials), the
// declaration as its one backend.
std::unique_ptr<SandboxRouter> declared_router(const CheckOptions& options,
                                               const std::shared_ptr<DeclaredBackend>& declared) {
  if (!options.router.backends.empty() || !options.router.config_file.empty() ||
      !options.router.backend_config_file.empty()) {
    throw InvalidArgument(
        "--declared is checked instead of a backend: it does not combine with --backend, "
        "--backend-config or --config",
        "declared");
  }
  json::Json policy = options.router.config();
  policy["backends"] = json::Json::array();
  const RouterOptions router_options = make_router(policy, "config")->options();
  return std::make_unique<SandboxRouter>(std::vector<std::shared_ptr<SandboxBackend>>{declared},
                                         router_options);
}

int run_check(const CheckOptions& options, const Context& context) {
  const SandboxSpec spec = load_spec(options.spec_file);
  std::shared_ptr<DeclaredBackend> declared;
  json::Json declaration_json;
  if (!options.declared_file.empty()) {
    declared = load_declared_backend(options.declared_file);
    const std::string note =
        "a declaration, not a backend: the router's checks ran against "
        "what it declares, and nothing is acquired";
    declaration_json = {{"name", declared->name()}, {"file", declared->source()}, {"note", note}};
    if (!context.json) {
      std::cout << "declared: '" << declared->name() << "' from " << declared->source() << " is "
                << note << "\n";
    }
  }
  auto report = [&](json::Json document) {
    if (declared) document["declared"] = declaration_json;
    print_json(document);
  };
  std::unique_ptr<SandboxRouter> router;
  RoutingDecision decision;
  try {
    router = declared ? declared_router(options, declared) : options.router.build();
    decision = router->ensure_can_serve(spec);
  } catch (const RouterRefusal& refusal) {
    if (context.json) {
      report({{"accepted", false}, {"error", error_object(refusal)}});
    } else {
      std::cout << "refused by check '" << refusal.check() << "' (" << refusal.type() << "):\n  "
                << refusal.message() << "\n";
      if (const std::string hint = floor_hint(refusal); !hint.empty()) {
        std::cout << "  " << hint << "\n";
      }
    }
    return kExitAirlockError;
  }
  // What the chosen backend says it cannot hold, beside the decision: an accepted spec is not a
  // promise the backend never made.
  std::vector<std::string> residuals;
  for (const auto& backend : router->backends()) {
    if (backend->name() == decision.backend) residuals = backend->stated_residuals();
  }
  if (context.json) {
    json::Json document{{"accepted", true}, {"decision", json::to_json(decision)}};
    if (!residuals.empty()) document["residuals"] = residuals;
    report(std::move(document));
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
  for (const auto& residual : residuals) {
    std::cout << "  residual  " << decision.backend << ": " << residual << "\n";
  }
  return 0;
}

const bool kCheckCommand = register_command("check", [](CLI::App& app, Context& context) {
  auto options = std::make_shared<CheckOptions>();
  CLI::App* check = app.add_subcommand(
      "check", "ensure a backend can serve a spec; prints the decision or the refusal");
  check->add_option("--spec", options->spec_file, "the sandbox spec (JSON)")->required();
  check->add_option("--declared", options->declared_file,
                    "check against a backend's declarations (JSON) instead of a backend: a dry "
                    "run that never acquires");
  options->router.add_to(*check);
  check->callback([options, &context] {
    spdlog::set_level(spdlog::level::from_str(context.log_level));
    context.exit_code = run_check(*options, context);
  });
});

}  // namespace
}  // namespace airlock::cli
