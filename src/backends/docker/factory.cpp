// The docker backend as a configurable type:
//   {"type": "docker", "host": "unix:///run/docker.sock", "default_image": "busybox", …}
// Every key is checked; an unknown key or an ill-typed value is refused naming it.
#include <cmath>
#include <nlohmann/json.hpp>

#include "airlock/backend_factory.hpp"
#include "airlock/backends/docker.hpp"
#include "airlock/errors.hpp"

namespace airlock::docker {
namespace {

using nlohmann::json;

constexpr const char* kKnownKeys =
    "host, api_version_max, tls, tls_ca_file, tls_cert_file, tls_key_file, tls_verify, "
    "default_image, pull_missing_images, request_timeout_seconds, pull_timeout_seconds, "
    "pids_limit, memory, cpus, read_only_rootfs, disk_bytes, ptys, init, env, runtime, "
    "run_code_interpreter, "
    "proxy_image, proxy_outbound_network, proxy_ready_timeout_seconds, "
    "proxy_allow_nonglobal_for_tests, proxy_allowed_ports, max_exec_output_bytes, "
    "list_max_archive_bytes, file_plane";

std::string string_value(const json& value, const std::string& path) {
  if (!value.is_string()) throw InvalidArgument(path + ": expected a string", path);
  return value.get<std::string>();
}

bool bool_value(const json& value, const std::string& path) {
  if (!value.is_boolean()) throw InvalidArgument(path + ": expected true or false", path);
  return value.get<bool>();
}

std::uint64_t count_value(const json& value, const std::string& path, std::uint64_t minimum = 1) {
  // A JSON number built in C++ from an int is signed; one parsed from text is unsigned.
  if (!value.is_number_integer() || value.get<std::int64_t>() < 0 ||
      value.get<std::uint64_t>() < minimum) {
    throw InvalidArgument(path + ": expected an integer of at least " + std::to_string(minimum),
                          path);
  }
  return value.get<std::uint64_t>();
}

std::chrono::milliseconds seconds_value(const json& value, const std::string& path) {
  if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() <= 0) {
    throw InvalidArgument(path + ": expected a positive number of seconds", path);
  }
  return std::chrono::milliseconds(static_cast<long long>(value.get<double>() * 1000.0));
}

// An integer number of bytes, or a string with a k/m/g suffix ("512m").
std::uint64_t bytes_value(const json& value, const std::string& path) {
  if (value.is_number_integer() && value.get<std::int64_t>() > 0) {
    return value.get<std::uint64_t>();
  }
  if (value.is_string()) {
    const std::string text = value.get<std::string>();
    std::size_t digits = 0;
    while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
    const std::string suffix = text.substr(digits);
    std::uint64_t scale = 0;
    if (suffix.empty() || suffix == "b") scale = 1;
    if (suffix == "k" || suffix == "K") scale = 1ull << 10;
    if (suffix == "m" || suffix == "M") scale = 1ull << 20;
    if (suffix == "g" || suffix == "G") scale = 1ull << 30;
    if (digits > 0 && digits <= 12 && scale != 0) {
      const std::uint64_t amount = std::stoull(text.substr(0, digits)) * scale;
      if (amount > 0) return amount;
    }
  }
  throw InvalidArgument(path + ": expected a positive number of bytes, or a string like \"512m\"",
                        path);
}

std::vector<std::string> string_list(const json& value, const std::string& path) {
  if (!value.is_array()) throw InvalidArgument(path + ": expected an array of strings", path);
  std::vector<std::string> out;
  for (std::size_t i = 0; i < value.size(); ++i) {
    out.push_back(string_value(value[i], path + "[" + std::to_string(i) + "]"));
  }
  return out;
}

}  // namespace

DockerConfig parse_docker_config(const json& config, std::string_view where) {
  if (!config.is_object()) {
    throw InvalidArgument(std::string(where) + ": expected an object", std::string(where));
  }
  DockerConfig out;
  for (const auto& [key, value] : config.items()) {
    const std::string path = std::string(where) + "." + key;
    if (key == "host") {
      out.host = string_value(value, path);
    } else if (key == "api_version_max") {
      out.api_version_max = string_value(value, path);
    } else if (key == "tls") {
      out.tls = bool_value(value, path);
    } else if (key == "tls_ca_file") {
      out.tls_ca_file = string_value(value, path);
    } else if (key == "tls_cert_file") {
      out.tls_cert_file = string_value(value, path);
    } else if (key == "tls_key_file") {
      out.tls_key_file = string_value(value, path);
    } else if (key == "tls_verify") {
      out.tls_verify = bool_value(value, path);
    } else if (key == "default_image") {
      out.default_image = string_value(value, path);
    } else if (key == "pull_missing_images") {
      out.pull_missing_images = bool_value(value, path);
    } else if (key == "request_timeout_seconds") {
      out.request_timeout = seconds_value(value, path);
    } else if (key == "pull_timeout_seconds") {
      out.pull_timeout = seconds_value(value, path);
    } else if (key == "pids_limit") {
      out.pids_limit = count_value(value, path);
    } else if (key == "memory") {
      out.memory_bytes = bytes_value(value, path);
    } else if (key == "cpus") {
      if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() <= 0) {
        throw InvalidArgument(path + ": expected a positive number of CPUs", path);
      }
      out.cpu_millis = static_cast<std::uint64_t>(std::llround(value.get<double>() * 1000.0));
    } else if (key == "read_only_rootfs") {
      out.read_only_rootfs = bool_value(value, path);
    } else if (key == "disk_bytes") {
      out.disk_bytes = bytes_value(value, path);
      if (out.disk_bytes < kMinimumDiskBytes) {
        throw InvalidArgument(path + ": at least 16 MiB (it is shared by every writable place)",
                              path);
      }
    } else if (key == "ptys") {
      out.ptys = bool_value(value, path);
    } else if (key == "init") {
      out.init = bool_value(value, path);
    } else if (key == "env") {
      if (!value.is_object()) throw InvalidArgument(path + ": expected an object", path);
      for (const auto& [name, item] : value.items()) {
        if (name.empty() || name.find('=') != std::string::npos) {
          throw InvalidArgument(path + "." + name + ": not an environment variable name",
                                path + "." + name);
        }
        out.environment[name] = string_value(item, path + "." + name);
      }
    } else if (key == "runtime") {
      out.runtime = string_value(value, path);
    } else if (key == "run_code_interpreter") {
      out.run_code_interpreter = string_value(value, path);
    } else if (key == "proxy_image") {
      out.proxy_image = string_value(value, path);
    } else if (key == "proxy_outbound_network") {
      out.proxy_outbound_network = string_value(value, path);
    } else if (key == "proxy_ready_timeout_seconds") {
      out.proxy_ready_timeout = seconds_value(value, path);
    } else if (key == "proxy_allow_nonglobal_for_tests") {
      out.proxy_allow_nonglobal_for_tests = string_list(value, path);
    } else if (key == "proxy_allowed_ports") {
      if (!value.is_array()) throw InvalidArgument(path + ": expected an array of ports", path);
      for (std::size_t i = 0; i < value.size(); ++i) {
        const std::string item = path + "[" + std::to_string(i) + "]";
        const auto port = count_value(value[i], item);
        if (port > 65535) throw InvalidArgument(item + ": not a port", item);
        out.proxy_allowed_ports.push_back(static_cast<std::uint16_t>(port));
      }
    } else if (key == "max_exec_output_bytes") {
      out.max_exec_output_bytes = bytes_value(value, path);
    } else if (key == "file_plane") {
      out.file_plane = string_value(value, path);
      if (out.file_plane != "auto" && out.file_plane != "host" && out.file_plane != "archive") {
        throw InvalidArgument(path + ": \"" + out.file_plane +
                                  "\" is not a file plane (allowed: auto, host, archive)",
                              path);
      }
    } else if (key == "list_max_archive_bytes") {
      out.list_max_archive_bytes = bytes_value(value, path);
    } else {
      throw InvalidArgument(path + ": unknown field (known: " + kKnownKeys + ")", path);
    }
  }
  if (!out.proxy_image.empty() && out.proxy_outbound_network.empty()) {
    throw InvalidArgument(std::string(where) +
                              ".proxy_outbound_network: required with proxy_image (the network "
                              "that gives the proxy its way out)",
                          std::string(where) + ".proxy_outbound_network");
  }
  return out;
}

namespace {

const bool kRegistered = register_backend_factory(
    "docker", "containers on a Docker Engine or Podman service, over the Engine API",
    [](const json& config, std::string_view where) -> std::shared_ptr<SandboxBackend> {
      return std::make_shared<DockerBackend>(parse_docker_config(config, where));
    });

}  // namespace
}  // namespace airlock::docker
