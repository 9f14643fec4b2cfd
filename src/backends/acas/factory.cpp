// The acas backend as a configurable type:
//   {"type": "acas", "endpoint": "https://management.<region>.azuredevcompute.io",
//    "subscription_id": "…", "resource_group": "…", "sandbox_group": "…", "registry": "…"}
// Every key is checked; an unknown key or an ill-typed value is refused naming it. Credentials
// are never configuration: the default chain reads the process's environment (credentials.hpp).
#include <cmath>
#include <nlohmann/json.hpp>

#include "airlock/backend_factory.hpp"
#include "airlock/backends/acas.hpp"
#include "airlock/errors.hpp"
#include "backends/acas/data_plane.hpp"

namespace airlock::acas {
namespace {

using nlohmann::json;

std::string text(const json& value, const std::string& path) {
  if (!value.is_string()) throw InvalidArgument(path + ": expected a string", path);
  return value.get<std::string>();
}

std::chrono::milliseconds seconds(const json& value, const std::string& path, bool allow_zero = false) {
  if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < 0 ||
      (!allow_zero && value.get<double>() == 0) || value.get<double>() > 86400.0 * 365) {
    throw InvalidArgument(path + ": expected a positive number of seconds", path);
  }
  return std::chrono::milliseconds(std::llround(value.get<double>() * 1000.0));
}

std::uint64_t count(const json& value, const std::string& path, std::uint64_t low,
                    std::uint64_t high) {
  if (!value.is_number_integer() || value.get<std::int64_t>() < 0 ||
      value.get<std::uint64_t>() < low || value.get<std::uint64_t>() > high) {
    throw InvalidArgument(path + ": expected an integer from " + std::to_string(low) + " to " +
                              std::to_string(high),
                          path);
  }
  return value.get<std::uint64_t>();
}

struct Field {
  const char* name;
  void (*read)(const json& value, const std::string& path, AcasConfig& config);
};

// Chunks travel as one shell word of base64 (4/3 of the bytes) inside one command; Linux caps a
// single argument at 128 KiB, and a guest's `sh -c` gets the command as one.
constexpr std::uint64_t kMaxChunk = 64u << 10;

constexpr Field kFields[] = {
    {"endpoint", [](const json& v, const std::string& p, AcasConfig& c) { c.endpoint = text(v, p); }},
    {"subscription_id",
     [](const json& v, const std::string& p, AcasConfig& c) { c.subscription_id = text(v, p); }},
    {"resource_group",
     [](const json& v, const std::string& p, AcasConfig& c) { c.resource_group = text(v, p); }},
    {"sandbox_group",
     [](const json& v, const std::string& p, AcasConfig& c) { c.sandbox_group = text(v, p); }},
    {"registry", [](const json& v, const std::string& p, AcasConfig& c) { c.registry = text(v, p); }},
    {"default_image",
     [](const json& v, const std::string& p, AcasConfig& c) { c.default_image = text(v, p); }},
    {"auto_suspend_seconds",
     [](const json& v, const std::string& p, AcasConfig& c) {
       c.auto_suspend = std::chrono::seconds(count(v, p, 1, 86400 * 30));
     }},
    {"auto_delete_seconds",
     [](const json& v, const std::string& p, AcasConfig& c) {
       c.auto_delete = std::chrono::seconds(count(v, p, 1, 86400 * 30));
     }},
    {"read_timeout_seconds",
     [](const json& v, const std::string& p, AcasConfig& c) { c.read_timeout = seconds(v, p); }},
    {"api_version",
     [](const json& v, const std::string& p, AcasConfig& c) {
       c.api_version = text(v, p);
       if (c.api_version.empty()) throw InvalidArgument(p + ": must not be empty", p);
     }},
    {"token_scope",
     [](const json& v, const std::string& p, AcasConfig& c) { c.token_scope = text(v, p); }},
    {"tls_ca_file",
     [](const json& v, const std::string& p, AcasConfig& c) { c.tls_ca_file = text(v, p); }},
    {"poll_interval_seconds",
     [](const json& v, const std::string& p, AcasConfig& c) { c.poll_interval = seconds(v, p); }},
    {"create_timeout_seconds",
     [](const json& v, const std::string& p, AcasConfig& c) { c.create_timeout = seconds(v, p); }},
    {"delete_timeout_seconds",
     [](const json& v, const std::string& p, AcasConfig& c) { c.delete_timeout = seconds(v, p); }},
    {"max_retries",
     [](const json& v, const std::string& p, AcasConfig& c) {
       c.max_retries = static_cast<int>(count(v, p, 0, 100));
     }},
    {"max_forbidden_retries",
     [](const json& v, const std::string& p, AcasConfig& c) {
       c.max_forbidden_retries = static_cast<int>(count(v, p, 0, 100));
     }},
    {"retry_backoff_seconds",
     [](const json& v, const std::string& p, AcasConfig& c) { c.retry_backoff = seconds(v, p); }},
    {"retry_backoff_max_seconds",
     [](const json& v, const std::string& p, AcasConfig& c) { c.retry_backoff_max = seconds(v, p); }},
    {"cpu", [](const json& v, const std::string& p, AcasConfig& c) { c.cpu = text(v, p); }},
    {"memory", [](const json& v, const std::string& p, AcasConfig& c) { c.memory = text(v, p); }},
    {"write_chunk_bytes",
     [](const json& v, const std::string& p, AcasConfig& c) {
       c.write_chunk_bytes = static_cast<std::uint32_t>(count(v, p, 1024, kMaxChunk));
     }},
    {"capture_chunk_bytes",
     [](const json& v, const std::string& p, AcasConfig& c) {
       c.capture_chunk_bytes = static_cast<std::uint32_t>(count(v, p, 1024, kMaxChunk));
     }},
    {"max_exec_output_bytes",
     [](const json& v, const std::string& p, AcasConfig& c) {
       c.max_exec_output_bytes = count(v, p, 1, 1ull << 32);
     }},
    {"probe_cache_seconds",
     [](const json& v, const std::string& p, AcasConfig& c) {
       c.probe_cache = std::chrono::seconds(count(v, p, 0, 86400));
     }},
};

}  // namespace

AcasConfig parse_acas_config(const json& config, std::string_view where) {
  if (!config.is_object()) {
    throw InvalidArgument(std::string(where) + ": expected an object", std::string(where));
  }
  AcasConfig parsed;
  for (const auto& [name, value] : config.items()) {
    const std::string path = std::string(where) + "." + name;
    const Field* field = nullptr;
    for (const auto& candidate : kFields) {
      if (name == candidate.name) field = &candidate;
    }
    if (field == nullptr) {
      std::string known;
      for (const auto& candidate : kFields) known += (known.empty() ? "" : ", ") + std::string(candidate.name);
      throw InvalidArgument(path + ": unknown field (known: " + known + ")", path);
    }
    field->read(value, path, parsed);
  }
  for (const auto& [name, value] :
       {std::pair{"endpoint", &parsed.endpoint}, std::pair{"subscription_id", &parsed.subscription_id},
        std::pair{"resource_group", &parsed.resource_group},
        std::pair{"sandbox_group", &parsed.sandbox_group}}) {
    if (value->empty()) {
      const std::string path = std::string(where) + "." + name;
      throw InvalidArgument(path + ": required (the sandbox group's data-plane address)", path);
    }
  }
  parsed.endpoint = checked_endpoint(parsed.endpoint, where);
  return parsed;
}

namespace {

const bool kRegistered = register_backend_factory(
    "acas", "Azure Container Apps Sandboxes (microVMs), over the service's data-plane API",
    [](const json& config, std::string_view where) -> std::shared_ptr<SandboxBackend> {
      return std::make_shared<AcasBackend>(parse_acas_config(config, where));
    });

}  // namespace
}  // namespace airlock::acas
