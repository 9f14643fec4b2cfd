#include "cli/common.hpp"

#include <fstream>
#include <iostream>
#include <sstream>

#include "airlock/backend_factory.hpp"
#include "airlock/errors.hpp"

namespace airlock::cli {

void RouterFlags::add_to(CLI::App& app) {
  app.add_option("--backend", backends, "backend type; repeatable, the first serves specs");
  app.add_option("--backend-config", backend_config_file,
                 "JSON file of backend settings, keyed by backend type");
  app.add_option("--config", config_file, "JSON file: a whole router configuration");
  app.add_option("--min-isolation", min_isolation,
                 "the host's isolation floor (default microvm)");
  app.add_option("--deny-capability", deny_capabilities, "deny a capability outright");
  app.add_option("--deny-identity", deny_identities, "deny an identity outright");
}

json::Json load_json_file(const std::string& path, std::string_view what) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    throw InvalidArgument(std::string(what) + ": cannot read '" + path + "'", std::string(what));
  }
  std::ostringstream text;
  text << file.rdbuf();
  return json::parse_text(text.str(), std::string(what) + " (" + path + ")");
}

SandboxSpec load_spec(const std::string& path) {
  return json::parse_spec(load_json_file(path, "spec"), "spec");
}

std::unique_ptr<SandboxRouter> RouterFlags::build(const std::string& default_backend) const {
  return make_router(config(default_backend), "config");
}

json::Json RouterFlags::config(const std::string& default_backend) const {
  json::Json document = json::Json::object();
  if (!config_file.empty()) document = load_json_file(config_file, "config");
  if (!backends.empty() || !document.contains("backends")) {
    json::Json settings = json::Json::object();
    if (!backend_config_file.empty()) {
      settings = load_json_file(backend_config_file, "backend-config");
      if (!settings.is_object()) {
        throw InvalidArgument("backend-config: expected an object keyed by backend type",
                              "backend-config");
      }
    }
    json::Json list = json::Json::array();
    const std::vector<std::string> types =
        backends.empty() ? std::vector<std::string>{default_backend} : backends;
    for (const auto& type : types) {
      json::Json entry = settings.contains(type) ? settings[type] : json::Json::object();
      entry["type"] = type;
      list.push_back(entry);
    }
    document["backends"] = list;
  }
  if (!min_isolation.empty()) document["min_isolation"] = min_isolation;
  for (const auto& capability : deny_capabilities) document["denied_capabilities"].push_back(capability);
  for (const auto& identity : deny_identities) document["denied_identities"].push_back(identity);
  return document;
}

void print_json(const json::Json& value) { std::cout << value.dump() << std::endl; }

}  // namespace airlock::cli
