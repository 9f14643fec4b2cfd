// What several subcommands share: loading specs, building routers from flags, printing.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "airlock/json.hpp"
#include "airlock/router.hpp"

namespace airlock::cli {

// Flags that choose backends and policy, shared by every subcommand that routes:
//   --backend TYPE            a backend type (repeatable; the first serves specs)
//   --backend-config FILE     a JSON object of settings for those backends (keyed by type)
//   --config FILE             a whole router configuration document (see backend_factory.hpp)
//   --min-isolation RUNG      the host's floor (default: microvm, as the seeds require)
//   --deny-capability CAP     a capability the host denies outright (repeatable)
//   --deny-identity ID        an identity the host denies outright (repeatable)
struct RouterFlags {
  std::vector<std::string> backends;
  std::string backend_config_file;
  std::string config_file;
  std::string min_isolation;
  std::vector<std::string> deny_capabilities;
  std::vector<std::string> deny_identities;

  void add_to(CLI::App& app);
  // The router configuration document these flags describe (see backend_factory.hpp), for a
  // caller that adjusts it before building.
  json::Json config(const std::string& default_backend = "linux") const;
  // Refusals (bad flags, floor) surface as airlock errors.
  std::unique_ptr<SandboxRouter> build(const std::string& default_backend = "linux") const;
};

// Reads and parses a spec file; errors name the file and the field.
SandboxSpec load_spec(const std::string& path);
json::Json load_json_file(const std::string& path, std::string_view what);

// stdout, one JSON document per line.
void print_json(const json::Json& value);

}  // namespace airlock::cli
