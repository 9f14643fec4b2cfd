// Backends for the durable-state commands (`ls`, `purge`): built straight from the --backend /
// --backend-config / --config flags (else the settings file's), without a router — listing and
// purging run no workload, so no isolation floor applies to them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "airlock/backend_factory.hpp"
#include "airlock/errors.hpp"
#include "cli/common.hpp"

namespace airlock::cli {

inline std::vector<std::shared_ptr<SandboxBackend>> state_backends(const RouterFlags& flags) {
  const json::Json entries = flags.backend_entries("linux");
  std::vector<std::shared_ptr<SandboxBackend>> backends;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const std::string where = "config.backends[" + std::to_string(i) + "]";
    if (!entries[i].is_object() || !entries[i].contains("type") || !entries[i]["type"].is_string()) {
      throw InvalidArgument(where + ": expected an object with a string \"type\"", where);
    }
    json::Json rest = entries[i];
    rest.erase("type");
    backends.push_back(make_backend(entries[i]["type"].get<std::string>(), rest, where));
  }
  return backends;
}

}  // namespace airlock::cli
