// The in-process backend as a configurable type, so that the programs linking it (the test
// suites, airlock-testing, airlockd-testing, airlock.testing) can use it as a policy fixture:
// {"type": "testing", "isolation": "none", "egress_modes": ["closed"], …}. Registered when the
// program starts, as every backend is — but only a test program has it to register.
#include "airlock/backend_factory.hpp"
#include "airlock/errors.hpp"
#include "airlock/testing.hpp"

namespace airlock::testing {
namespace {

template <typename E, typename Parse>
EnumSet<E> parse_members(const json::Json& value, const std::string& path, Parse parse) {
  if (!value.is_array()) throw InvalidArgument(path + ": expected an array of strings", path);
  EnumSet<E> set;
  for (std::size_t i = 0; i < value.size(); ++i) {
    const std::string item = path + "[" + std::to_string(i) + "]";
    if (!value[i].is_string()) throw InvalidArgument(item + ": expected a string", item);
    set.insert(parse(value[i].get<std::string>(), item));
  }
  return set;
}

std::shared_ptr<SandboxBackend> make(const json::Json& config, std::string_view where) {
  InProcessBackendOptions options;
  options.sandbox_per_key = true;
  for (const auto& [field, value] : config.items()) {
    const std::string path = std::string(where) + "." + field;
    if (field == "name") {
      if (!value.is_string()) throw InvalidArgument(path + ": expected a string", path);
      options.name = value.get<std::string>();
    } else if (field == "isolation") {
      if (!value.is_string()) throw InvalidArgument(path + ": expected a string", path);
      options.isolation = parse_isolation(value.get<std::string>(), path);
    } else if (field == "egress_modes") {
      options.egress_modes = value.is_null() ? std::nullopt
                                             : std::optional(parse_members<Egress>(
                                                   value, path, [](auto t, auto& p) {
                                                     return parse_egress(t, p);
                                                   }));
    } else if (field == "capabilities") {
      options.capabilities = value.is_null() ? std::nullopt
                                             : std::optional(parse_members<Capability>(
                                                   value, path, [](auto t, auto& p) {
                                                     return parse_capability(t, p);
                                                   }));
    } else if (field == "os_families") {
      options.os_families = value.is_null() ? std::nullopt
                                            : std::optional(parse_members<OsFamily>(
                                                  value, path, [](auto t, auto& p) {
                                                    return parse_os_family(t, p);
                                                  }));
    } else if (field == "limits") {
      if (!value.is_object()) throw InvalidArgument(path + ": expected an object", path);
      SandboxLimits limits;
      for (const auto& [direction, caps] : value.items()) {
        if (direction == "files_in") {
          limits.files_in = json::parse_transfer_limits(caps, path + ".files_in");
        } else if (direction == "files_out") {
          limits.files_out = json::parse_transfer_limits(caps, path + ".files_out");
        } else {
          throw InvalidArgument(path + "." + direction + ": unknown field (known: files_in, "
                                                         "files_out)",
                                path + "." + direction);
        }
      }
      options.limits = limits;
    } else if (field == "unemulated_commands") {
      // "scripted" (exit 0, the fixture's default) or "not_found" (exit 127, like a guest).
      if (!value.is_string() ||
          (value.get<std::string>() != "scripted" && value.get<std::string>() != "not_found")) {
        throw InvalidArgument(path + ": expected \"scripted\" or \"not_found\"", path);
      }
      options.sandbox.unemulated_not_found = value.get<std::string>() == "not_found";
    } else {
      throw InvalidArgument(path + ": unknown field (known: name, isolation, egress_modes, "
                                   "capabilities, os_families, limits, unemulated_commands)",
                            path);
    }
  }
  return std::make_shared<InProcessSandboxBackend>(std::move(options));
}

}  // namespace

const bool kRegistered = register_backend_factory(
    "testing", "in-process fake with overridable declarations (no isolation; tests only)", make);

}  // namespace airlock::testing
