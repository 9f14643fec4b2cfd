#include "cli/declared_backend.hpp"

#include <spdlog/spdlog.h>

#include <cstdint>
#include <limits>

#include "airlock/errors.hpp"
#include "cli/common.hpp"

namespace airlock::cli {
namespace {

template <typename E, typename Parse>
EnumSet<E> declared_members(const json::Json& value, const std::string& path, Parse parse) {
  if (!value.is_array()) throw InvalidArgument(path + ": expected an array of strings", path);
  EnumSet<E> set;
  for (std::size_t i = 0; i < value.size(); ++i) {
    const std::string item = path + "[" + std::to_string(i) + "]";
    if (!value[i].is_string()) throw InvalidArgument(item + ": expected a string", item);
    set.insert(parse(value[i].get<std::string>(), item));
  }
  return set;
}

std::string declared_string(const json::Json& value, const std::string& path) {
  if (!value.is_string()) throw InvalidArgument(path + ": expected a string", path);
  return value.get<std::string>();
}

// The rung a declaration names or, for anything that is not one, a value off the ladder: the
// router's own check refuses it (is_known_rung is false for it). `unknown` says what it was.
Isolation declared_rung(const json::Json& value, const std::string& path, std::string& unknown) {
  if (value.is_string()) {
    try {
      return parse_isolation(value.get<std::string>(), path);
    } catch (const InvalidArgument& error) {
      unknown = error.message();
    }
  } else {
    unknown = path + ": " + value.dump() + " is not a rung's name";
  }
  return static_cast<Isolation>(std::numeric_limits<std::uint8_t>::max());
}

SandboxLimits declared_limits(const json::Json& value, const std::string& path) {
  if (!value.is_object()) throw InvalidArgument(path + ": expected an object", path);
  SandboxLimits limits;
  for (const auto& [direction, caps] : value.items()) {
    if (direction == "files_in") {
      limits.files_in = json::parse_transfer_limits(caps, path + ".files_in");
    } else if (direction == "files_out") {
      limits.files_out = json::parse_transfer_limits(caps, path + ".files_out");
    } else {
      throw InvalidArgument(path + "." + direction +
                                ": unknown field (known: files_in, files_out; a bare "
                                "TransferLimits is not a SandboxLimits)",
                            path + "." + direction);
    }
  }
  return limits;
}

}  // namespace

DeclaredBackend::DeclaredBackend(const json::Json& declarations, std::string source)
    : source_(std::move(source)) {
  const std::string where = "declared";
  if (!declarations.is_object()) {
    throw InvalidArgument(where + ": expected an object of a backend's declarations", where);
  }
  bool named = false;
  bool rung = false;
  std::string unknown_rung;
  for (const auto& [field, value] : declarations.items()) {
    const std::string path = where + "." + field;
    if (field == "name") {
      name_ = declared_string(value, path);
      if (name_.empty()) throw InvalidArgument(path + ": must not be empty", path);
      named = true;
    } else if (field == "isolation") {
      isolation_ = declared_rung(value, path, unknown_rung);
      rung = true;
    } else if (field == "egress_modes") {
      egress_modes_ = declared_members<Egress>(
          value, path,
          [](const std::string& text, const std::string& at) { return parse_egress(text, at); });
    } else if (field == "capabilities") {
      capabilities_ = declared_members<Capability>(
          value, path, [](const std::string& text, const std::string& at) {
            return parse_capability(text, at);
          });
    } else if (field == "os_families") {
      os_families_ = declared_members<OsFamily>(
          value, path,
          [](const std::string& text, const std::string& at) { return parse_os_family(text, at); });
    } else if (field == "limits") {
      try {
        limits_ = declared_limits(value, path);
      } catch (const InvalidArgument& error) {
        unreadable_limits_ = error.message();
      }
    } else {
      throw InvalidArgument(path +
                                ": unknown field (known: name, isolation, egress_modes, "
                                "capabilities, os_families, limits)",
                            path);
    }
  }
  // A rung is the one declaration whose silence means nothing: every backend states one.
  if (!named)
    throw InvalidArgument(where + ".name: required (the backend's name)", where + ".name");
  if (!rung) {
    throw InvalidArgument(where + ".isolation: required (the rung the backend declares)",
                          where + ".isolation");
  }
  if (!unknown_rung.empty()) {
    spdlog::warn("declared backend '{}' ({}): {}; the router refuses it", name_, source_,
                 unknown_rung);
  }
  if (unreadable_limits_) {
    spdlog::warn("declared backend '{}' ({}): {}; the router refuses it at its limits check", name_,
                 source_, *unreadable_limits_);
  }
}

std::optional<SandboxLimits> DeclaredBackend::limits() const {
  if (unreadable_limits_) {
    throw TransferLimitsNotPermitted("sandbox backend '" + name_ +
                                         "' declares transfer limits that are not a "
                                         "SandboxLimits ({\"files_in\": …, \"files_out\": …}): " +
                                         *unreadable_limits_ +
                                         "; nothing can tell what it would carry",
                                     "transfer-limits");
  }
  return limits_;
}

std::shared_ptr<Sandbox> DeclaredBackend::acquire(const SandboxKey&, const SandboxSpec&) {
  throw NoSandboxBackend("'" + name_ + "' is a declaration (" + source_ +
                         "), not a backend: it is for `airlock check` and never acquires a "
                         "sandbox");
}

std::shared_ptr<DeclaredBackend> load_declared_backend(const std::string& path) {
  return std::make_shared<DeclaredBackend>(load_json_file(path, "declared"), path);
}

}  // namespace airlock::cli
