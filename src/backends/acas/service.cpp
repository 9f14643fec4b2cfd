#include "backends/acas/service.hpp"

#include "airlock/errors.hpp"
#include "backends/acas/credentials.hpp"

namespace airlock::acas {
namespace {

using nlohmann::json;

std::string id_path(const DataPlane& plane, std::string_view id) { return plane.sandbox_path(id); }

}  // namespace

Service::Service(AcasConfig configuration) : config(std::move(configuration)) {
  client = std::make_shared<http::Client>(http::ClientOptions{config.tls_ca_file, false});
  plane = std::make_unique<DataPlane>(config, client);
}

std::shared_ptr<TokenCredential> Service::credential_for(const CredentialRequest& request) {
  if (config.credential) return config.credential;
  if (config.credential_resolver) {
    CredentialBinding binding;
    try {
      binding = config.credential_resolver(request);
    } catch (const std::exception& failure) {
      throw BackendError("the host's credential resolver failed; nothing was sent to the service",
                         failure.what());
    }
    if (!binding.create_credential) {
      throw BackendError("the host's credential resolver returned no credential factory");
    }
    std::lock_guard lock(mutex_);
    auto& slot = resolved_[{binding.authority, binding.generation}];
    if (!slot) {
      auto created = binding.create_credential();
      if (!created) throw BackendError("the host's credential factory returned no credential");
      slot = cached_credential(std::move(created));
    }
    return slot;
  }
  std::lock_guard lock(mutex_);
  if (!default_credential_) {
    default_credential_ =
        cached_credential(default_credential_chain(CredentialEnvironment::from_process(config.tls_ca_file)));
  }
  return default_credential_;
}

capture::TextReply Service::shell(const Call& call, std::string_view sandbox_id,
                                  const std::string& script,
                                  std::string_view working_directory) const {
  const std::string path = id_path(*plane, sandbox_id) + "/executeShellCommand";
  const json body{{"command", script}, {"workingDirectory", std::string(working_directory)}};
  // An answer carries the script's own output only (capture keeps the command's in files), but
  // the bound still has to hold: base64 chunks are the largest answer, twice a chunk at most.
  const std::uint64_t bound = 4ull * config.capture_chunk_bytes + (1u << 20);
  const http::Response response =
      plane->request(call, "POST", path, {}, Body{body.dump()}, bound, false);
  if (response.status < 200 || response.status > 299) {
    DataPlane::fail("run a command in the sandbox", "POST", path, response);
  }
  const auto parsed = json::parse(response.body, nullptr, false);
  if (!parsed.is_object() || !parsed.contains("exitCode") || !parsed["exitCode"].is_number_integer()) {
    throw BackendError("the sandbox service answered a command in a form airlock cannot read",
                       "POST " + path + ": " + response.body.substr(0, 200));
  }
  capture::TextReply reply;
  reply.exit_code = parsed["exitCode"].get<int>();
  if (parsed.contains("stdout") && parsed["stdout"].is_string()) reply.stdout_text = parsed["stdout"];
  if (parsed.contains("stderr") && parsed["stderr"].is_string()) reply.stderr_text = parsed["stderr"];
  return reply;
}

FileInfo parse_file_info(const json& payload) {
  if (!payload.is_object() || !payload.contains("isDir") || !payload["isDir"].is_boolean() ||
      !payload.contains("isSymlink") || !payload["isSymlink"].is_boolean()) {
    throw BackendError("the sandbox service described a file without saying whether it is a link",
                       "file info: " + payload.dump().substr(0, 200));
  }
  FileInfo info;
  info.is_directory = payload["isDir"].get<bool>();
  info.is_symlink = payload["isSymlink"].get<bool>();
  if (payload.contains("path") && payload["path"].is_string()) info.path = payload["path"];
  if (payload.contains("size") && payload["size"].is_number_unsigned()) {
    info.size = payload["size"].get<std::uint64_t>();
  }
  if (payload.contains("name") && payload["name"].is_string()) info.name = payload["name"];
  if (info.name.empty()) info.name = info.path.substr(info.path.rfind('/') + 1);
  return info;
}

std::optional<FileInfo> Service::stat(const Call& call, std::string_view sandbox_id,
                                      const std::string& path) const {
  const std::string route = id_path(*plane, sandbox_id) + "/files/stat";
  const http::Response response =
      plane->request(call, "GET", route, {{"path", path}}, std::nullopt, 1u << 20, false);
  if (response.status == 404) return std::nullopt;
  if (response.status != 200) DataPlane::fail("describe a file in the sandbox", "GET", route, response);
  const auto parsed = json::parse(response.body, nullptr, false);
  return parse_file_info(parsed);
}

std::vector<FileInfo> Service::list(const Call& call, std::string_view sandbox_id,
                                    const std::string& path) const {
  const std::string route = id_path(*plane, sandbox_id) + "/files/list";
  const http::Response response =
      plane->request(call, "GET", route, {{"path", path}}, std::nullopt, 16ull << 20, false);
  if (response.status != 200) DataPlane::fail("list a directory in the sandbox", "GET", route, response);
  const json parsed = json::parse(response.body, nullptr, false);
  if (!parsed.contains("entries") || !parsed["entries"].is_array()) {
    throw BackendError("the sandbox service listed a directory without its entries",
                       "GET " + route + ": " + parsed.dump().substr(0, 200));
  }
  std::vector<FileInfo> entries;
  for (const auto& entry : parsed["entries"]) entries.push_back(parse_file_info(entry));
  return entries;
}

}  // namespace airlock::acas
