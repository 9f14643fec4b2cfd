#include "airlock/backend_factory.hpp"

#include <map>
#include <mutex>

#include "airlock/errors.hpp"

namespace airlock {
namespace {

struct Registered {
  std::string description;
  BackendFactory factory;
};

std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<std::string, Registered, std::less<>>& registry() {
  static std::map<std::string, Registered, std::less<>> factories;
  return factories;
}

// Sorted, because the registry is an ordered map.
std::string known_types() {
  std::string names;
  for (const auto& [type, unused] : registry()) names += (names.empty() ? "" : ", ") + type;
  return names.empty() ? "none" : names;
}

}  // namespace

bool register_backend_factory(std::string type, std::string description, BackendFactory factory) {
  std::lock_guard lock(registry_mutex());
  registry()[std::move(type)] = Registered{std::move(description), std::move(factory)};
  return true;
}

std::vector<BackendType> backend_types() {
  std::lock_guard lock(registry_mutex());
  std::vector<BackendType> types;
  for (const auto& [type, registered] : registry()) types.push_back({type, registered.description});
  return types;
}

std::shared_ptr<SandboxBackend> make_backend(std::string_view type, const json::Json& config,
                                             std::string_view where) {
  BackendFactory factory;
  {
    std::lock_guard lock(registry_mutex());
    auto found = registry().find(type);
    if (found == registry().end()) {
      // A backend is here only when this program was built with it: the in-process `testing`
      // fake, for one, is linked into test programs alone.
      throw InvalidArgument(
          std::string(where) + ".type: no backend named '" + std::string(type) +
              "' is built into this airlock; the registered backends are: " + known_types(),
          std::string(where) + ".type");
    }
    factory = found->second.factory;
  }
  if (!config.is_object()) {
    throw InvalidArgument(std::string(where) + ": expected an object", std::string(where));
  }
  return factory(config, where);
}

std::unique_ptr<SandboxRouter> make_router(const json::Json& config, std::string_view where) {
  const std::string base(where);
  if (!config.is_object()) throw InvalidArgument(base + ": expected an object", base);
  RouterOptions options;
  std::vector<std::shared_ptr<SandboxBackend>> backends;
  for (const auto& [field, value] : config.items()) {
    const std::string path = base + "." + field;
    if (field == "backends") {
      if (!value.is_array()) throw InvalidArgument(path + ": expected an array", path);
      for (std::size_t i = 0; i < value.size(); ++i) {
        const std::string item = path + "[" + std::to_string(i) + "]";
        const auto& entry = value[i];
        if (!entry.is_object() || !entry.contains("type") || !entry["type"].is_string()) {
          throw InvalidArgument(item + ": expected an object with a string \"type\"", item);
        }
        json::Json rest = entry;
        rest.erase("type");
        backends.push_back(make_backend(entry["type"].get<std::string>(), rest, item));
      }
    } else if (field == "min_isolation") {
      if (!value.is_string()) throw InvalidArgument(path + ": expected a string", path);
      options.min_isolation = parse_isolation(value.get<std::string>(), path);
    } else if (field == "selected") {
      if (!value.is_string()) throw InvalidArgument(path + ": expected a string", path);
      options.selected = value.get<std::string>();
    } else if (field == "denied_capabilities") {
      if (!value.is_array()) throw InvalidArgument(path + ": expected an array", path);
      for (std::size_t i = 0; i < value.size(); ++i) {
        const std::string item = path + "[" + std::to_string(i) + "]";
        if (!value[i].is_string()) throw InvalidArgument(item + ": expected a string", item);
        options.denied_capabilities.insert(parse_capability(value[i].get<std::string>(), item));
      }
    } else if (field == "denied_identities") {
      if (!value.is_array()) throw InvalidArgument(path + ": expected an array", path);
      for (std::size_t i = 0; i < value.size(); ++i) {
        const std::string item = path + "[" + std::to_string(i) + "]";
        if (!value[i].is_string()) throw InvalidArgument(item + ": expected a string", item);
        options.denied_identities.insert(parse_identity(value[i].get<std::string>(), item));
      }
    } else {
      throw InvalidArgument(path + ": unknown field (known: backends, min_isolation, selected, "
                                   "denied_capabilities, denied_identities)",
                            path);
    }
  }
  return std::make_unique<SandboxRouter>(std::move(backends), std::move(options));
}

}  // namespace airlock
