#include "cli/common.hpp"

#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>

#include "airlock/backend_factory.hpp"
#include "airlock/errors.hpp"

namespace airlock::cli {
namespace {

constexpr const char* kMinIsolationVariable = "AIRLOCK_MIN_ISOLATION";
constexpr const char* kConfigVariable = "AIRLOCK_CONFIG";

const char* environment(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

std::vector<std::string> string_list(const json::Json& value, const std::string& where) {
  if (value.is_string()) return {value.get<std::string>()};
  std::vector<std::string> out;
  if (value.is_array()) {
    for (const auto& item : value) {
      if (!item.is_string()) break;
      out.push_back(item.get<std::string>());
    }
    if (out.size() == value.size()) return out;
  }
  throw InvalidArgument(where + ": expected a string or a list of strings", where);
}

Settings read_settings(const std::filesystem::path& file, bool must_exist) {
  Settings settings;
  std::error_code error;
  if (!must_exist && !std::filesystem::exists(file, error)) return settings;
  settings.file = file;
  const std::string shown = "config file " + file.string();
  const json::Json document = load_json_file(file.string(), shown);
  if (!document.is_object()) throw InvalidArgument(shown + ": expected a JSON object", shown);
  for (const auto& [key, value] : document.items()) {
    const std::string where = shown + ": \"" + key + "\"";
    if (key == "min_isolation") {
      if (!value.is_string()) throw InvalidArgument(where + ": expected a rung", key);
      parse_isolation(value.get<std::string>(), where);  // refused here, naming the file
      settings.min_isolation = value.get<std::string>();
    } else if (key == "backend") {
      settings.backends = string_list(value, where);
    } else if (key == "backend_config") {
      if (value.is_string()) {
        std::filesystem::path path(value.get<std::string>());
        // Relative to the settings file, so the pair can move together.
        if (path.is_relative()) path = file.parent_path() / path;
        settings.backend_config = load_json_file(path.string(), where);
      } else {
        settings.backend_config = value;
      }
      if (!settings.backend_config->is_object()) {
        throw InvalidArgument(where +
                                  ": expected an object keyed by backend type (or a path to "
                                  "a file holding one)",
                              key);
      }
    } else if (key == "deny_capabilities") {
      settings.deny_capabilities = string_list(value, where);
    } else if (key == "deny_identities") {
      settings.deny_identities = string_list(value, where);
    } else {
      throw InvalidArgument(shown + ": unknown key \"" + key +
                                "\" (known: min_isolation, backend, backend_config, "
                                "deny_capabilities, deny_identities)",
                            key);
    }
  }
  return settings;
}

}  // namespace

std::filesystem::path settings_path() {
  if (const char* configured = environment(kConfigVariable)) return configured;
  if (::geteuid() == 0) return "/etc/airlock/config.json";
  if (const char* xdg = environment("XDG_CONFIG_HOME");
      xdg != nullptr && std::filesystem::path(xdg).is_absolute()) {
    return std::filesystem::path(xdg) / "airlock" / "config.json";
  }
  if (const char* home = environment("HOME");
      home != nullptr && std::filesystem::path(home).is_absolute()) {
    return std::filesystem::path(home) / ".config" / "airlock" / "config.json";
  }
  return {};
}

const Settings& settings() {
  static const Settings loaded = [] {
    const std::filesystem::path path = settings_path();
    if (path.empty()) return Settings{};
    return read_settings(path, environment(kConfigVariable) != nullptr);
  }();
  return loaded;
}

void RouterFlags::add_backend_flags_to(CLI::App& app) {
  app.add_option("--backend", backends,
                 "backend type; repeatable, the first serves specs (default: the config "
                 "file's \"backend\", else linux)");
  app.add_option("--backend-config", backend_config_file,
                 "JSON file of backend settings, keyed by backend type (default: the config "
                 "file's \"backend_config\")");
  app.add_option("--config", config_file, "JSON file: a whole router configuration");
}

void RouterFlags::add_to(CLI::App& app) {
  add_backend_flags_to(app);
  app.add_option("--min-isolation", min_isolation,
                 "the host's isolation floor (default: $AIRLOCK_MIN_ISOLATION, else the config "
                 "file's \"min_isolation\", else microvm)");
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

json::Json RouterFlags::backend_entries(const std::string& default_backend) const {
  if (!config_file.empty() && backends.empty()) {
    const json::Json document = load_json_file(config_file, "config");
    if (document.is_object() && document.contains("backends")) return document["backends"];
  }
  const Settings& file = settings();
  json::Json settings_by_type = json::Json::object();
  if (!backend_config_file.empty()) {
    settings_by_type = load_json_file(backend_config_file, "backend-config");
    if (!settings_by_type.is_object()) {
      throw InvalidArgument("backend-config: expected an object keyed by backend type",
                            "backend-config");
    }
  } else if (file.backend_config) {
    settings_by_type = *file.backend_config;
  }
  std::vector<std::string> types = backends;
  if (types.empty()) types = file.backends;
  if (types.empty()) types = {default_backend};
  json::Json list = json::Json::array();
  for (const auto& type : types) {
    json::Json entry =
        settings_by_type.contains(type) ? settings_by_type[type] : json::Json::object();
    if (!entry.is_object()) {
      throw InvalidArgument("backend-config: the settings for '" + type + "' must be an object",
                            "backend-config");
    }
    entry["type"] = type;
    list.push_back(entry);
  }
  return list;
}

Floor RouterFlags::floor() const {
  if (!min_isolation.empty()) return {min_isolation, "--min-isolation"};
  if (!config_file.empty()) {
    const json::Json document = load_json_file(config_file, "config");
    if (document.is_object() && document.contains("min_isolation") &&
        document["min_isolation"].is_string()) {
      return {document["min_isolation"].get<std::string>(), "--config " + config_file};
    }
  }
  if (const char* variable = environment(kMinIsolationVariable)) {
    return {variable, kMinIsolationVariable};
  }
  const Settings& file = settings();
  if (file.min_isolation) return {*file.min_isolation, "config file " + file.file.string()};
  return {};
}

json::Json RouterFlags::config(const std::string& default_backend) const {
  json::Json document = json::Json::object();
  if (!config_file.empty()) document = load_json_file(config_file, "config");
  if (!document.is_object()) throw InvalidArgument("config: expected a JSON object", "config");
  if (!backends.empty() || !document.contains("backends")) {
    document["backends"] = backend_entries(default_backend);
  }
  if (const Floor given = floor(); !given.rung.empty()) {
    parse_isolation(given.rung, given.source);  // a bad rung names where it came from
    document["min_isolation"] = given.rung;
  }
  const Settings& file = settings();
  for (const auto& capability : file.deny_capabilities)
    document["denied_capabilities"].push_back(capability);
  for (const auto& capability : deny_capabilities)
    document["denied_capabilities"].push_back(capability);
  for (const auto& identity : file.deny_identities)
    document["denied_identities"].push_back(identity);
  for (const auto& identity : deny_identities) document["denied_identities"].push_back(identity);
  return document;
}

std::string format_utc(std::chrono::system_clock::time_point when) {
  if (when == std::chrono::system_clock::time_point{}) return "-";
  const std::time_t seconds = std::chrono::system_clock::to_time_t(when);
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

void print_json(const json::Json& value) { std::cout << value.dump() << std::endl; }

json::Json error_object(const std::exception& error) {
  if (dynamic_cast<const Error*>(&error) == nullptr) {
    return {{"type", "InternalError"}, {"message", error.what()}};
  }
  json::Json out = json::error_to_json(error);
  if (const std::string hint = floor_hint(error); !hint.empty()) out["hint"] = hint;
  return out;
}

json::Json error_document(const std::exception& error) {
  return {{"error", error_object(error)}};
}

std::string floor_hint(const std::exception& error) {
  const auto* refusal = dynamic_cast<const BackendNotPermitted*>(&error);
  if (refusal == nullptr || refusal->check() != "isolation-floor") return {};
  static const std::regex kDeclared("declares isolation ([a-z_]+),");
  std::smatch match;
  const std::string message = refusal->message();
  if (!std::regex_search(message, match, kDeclared)) return {};
  const std::string rung = match[1];
  const std::filesystem::path file = settings_path();
  return "to accept it, lower the floor to " + rung + ": --min-isolation " + rung + ", or " +
         kMinIsolationVariable + "=" + rung + ", or \"min_isolation\": \"" + rung + "\" in " +
         (file.empty() ? std::string("the config file ($AIRLOCK_CONFIG)") : file.string());
}

}  // namespace airlock::cli
