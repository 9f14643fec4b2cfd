// What several subcommands share: loading specs, building routers from flags, the settings file,
// printing, and how an error reads.
#pragma once

#include <CLI/CLI.hpp>
#include <exception>
#include <filesystem>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "airlock/json.hpp"
#include "airlock/router.hpp"

namespace airlock::cli {

// The operator's settings file: the router flags' keys, set once for every command.
//
//   {"min_isolation": "container",
//    "backend": "docker",                      (or a list: the first serves specs)
//    "backend_config": {"docker": {…}},        (an object keyed by type, or a path to one)
//    "deny_capabilities": ["network"], "deny_identities": ["user"]}
//
// Where: $AIRLOCK_CONFIG when set (it must exist); else /etc/airlock/config.json as root, else
// $XDG_CONFIG_HOME/airlock/config.json (XDG_CONFIG_HOME defaulting to $HOME/.config). A default
// location that holds no file means no settings. An unknown key or a mistyped value is refused,
// naming the file and the key.
struct Settings {
  std::filesystem::path file;  // empty: no settings file was found
  std::optional<std::string> min_isolation;
  std::vector<std::string> backends;
  std::optional<json::Json> backend_config;  // an object keyed by backend type
  std::vector<std::string> deny_capabilities;
  std::vector<std::string> deny_identities;
};

// Where the settings file is looked for (whether or not one is there); empty when no location
// can be named (not root, and neither XDG_CONFIG_HOME nor HOME is absolute).
std::filesystem::path settings_path();
// The settings, read once per process.
const Settings& settings();

// Where the floor came from, for notes and refusals.
struct Floor {
  std::string rung;    // empty: the router's default (microvm)
  std::string source;  // "--min-isolation", "--config FILE", "AIRLOCK_MIN_ISOLATION", the file
};

// Flags that choose backends and policy, shared by every subcommand that routes:
//   --backend TYPE            a backend type (repeatable; the first serves specs)
//   --backend-config FILE     a JSON object of settings for those backends (keyed by type)
//   --config FILE             a whole router configuration document (see backend_factory.hpp)
//   --min-isolation RUNG      the host's floor (default: microvm, as the seeds require)
//   --deny-capability CAP     a capability the host denies outright (repeatable)
//   --deny-identity ID        an identity the host denies outright (repeatable)
// Each falls back to the environment (AIRLOCK_MIN_ISOLATION) and then the settings file:
// flags > environment > file > the default.
struct RouterFlags {
  std::vector<std::string> backends;
  std::string backend_config_file;
  std::string config_file;
  std::string min_isolation;
  std::vector<std::string> deny_capabilities;
  std::vector<std::string> deny_identities;

  void add_to(CLI::App& app);
  // Only the flags that pick backends (--backend, --backend-config, --config): for the
  // durable-state commands, which route nothing.
  void add_backend_flags_to(CLI::App& app);
  // The router configuration document these flags describe (see backend_factory.hpp), for a
  // caller that adjusts it before building.
  json::Json config(const std::string& default_backend = "linux") const;
  // Only its "backends" list.
  json::Json backend_entries(const std::string& default_backend = "linux") const;
  // The floor these flags, the environment and the settings file give, and which one gave it.
  Floor floor() const;
  // Refusals (bad flags, floor) surface as airlock errors.
  std::unique_ptr<SandboxRouter> build(const std::string& default_backend = "linux") const;
};

// Reads and parses a spec file; errors name the file and the field.
SandboxSpec load_spec(const std::string& path);
json::Json load_json_file(const std::string& path, std::string_view what);

// "2026-12-06T01:40:29Z", or "-" for the epoch (a record that never said when).
std::string format_utc(std::chrono::system_clock::time_point when);

// stdout, one JSON document per line.
void print_json(const json::Json& value);

// Every command's error under --json, the daemon's shape:
//   {"error": {"type": "…", "message": "…", "check": "…", …the error table's fields}}
// A CLI usage error is an InvalidArgument whose check names the option; anything that is not one
// of airlock's errors is an InternalError carrying its message (the operator reads it).
json::Json error_object(const std::exception& error);
json::Json error_document(const std::exception& error);

// When `error` is the router's default-floor refusal, the ways to lower the floor from this CLI
// (one sentence); otherwise empty.
std::string floor_hint(const std::exception& error);

}  // namespace airlock::cli
