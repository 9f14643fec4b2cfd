// Backends for the durable-state commands (`ls`, `purge`): built straight from the --backend /
// --backend-config / --config flags, without a router — listing and purging run no workload, so
// no isolation floor applies to them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "airlock/backend_factory.hpp"
#include "airlock/errors.hpp"
#include "cli/common.hpp"

namespace airlock::cli {

inline std::vector<std::shared_ptr<SandboxBackend>> state_backends(const RouterFlags& flags) {
  json::Json entries = json::Json::array();
  if (!flags.config_file.empty()) {
    const json::Json config = load_json_file(flags.config_file, "config");
    if (config.is_object() && config.contains("backends")) entries = config["backends"];
  }
  if (!flags.backends.empty() || entries.empty()) {
    json::Json settings = json::Json::object();
    if (!flags.backend_config_file.empty()) {
      settings = load_json_file(flags.backend_config_file, "backend-config");
    }
    entries = json::Json::array();
    const std::vector<std::string> types =
        flags.backends.empty() ? std::vector<std::string>{"linux"} : flags.backends;
    for (const auto& type : types) {
      json::Json entry = settings.is_object() && settings.contains(type) ? settings[type]
                                                                          : json::Json::object();
      entry["type"] = type;
      entries.push_back(entry);
    }
  }
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
