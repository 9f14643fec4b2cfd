// What the backend and its sandboxes share: the configuration, the data plane, the credentials
// each operation carries, and the service's operations on one sandbox (text exec and the file
// API) in the shapes airlock reads them.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "airlock/backends/acas.hpp"
#include "backends/acas/capture.hpp"
#include "backends/acas/data_plane.hpp"

namespace airlock::acas {

// The file API's description of one entry (lstat on the final component). A FIFO, a socket or
// a device reads exactly like an empty regular file: the service does not say.
struct FileInfo {
  std::string path;
  std::string name;  // the final component
  std::uint64_t size = 0;
  bool is_directory = false;
  bool is_symlink = false;
};

struct Service {
  explicit Service(AcasConfig configuration);

  AcasConfig config;
  std::shared_ptr<http::Client> client;
  std::unique_ptr<DataPlane> plane;

  // The credential for `request`: the explicit one, the resolver's (one per authority and
  // generation, created once), or the default chain's. A resolver failure is a BackendError;
  // there is no fallback.
  std::shared_ptr<TokenCredential> credential_for(const CredentialRequest& request);

  // executeShellCommand: the script's text reply. Throws what DataPlane::request throws, and
  // BackendError when the service refuses or answers in another shape.
  capture::TextReply shell(const Call& call, std::string_view sandbox_id, const std::string& script,
                           std::string_view working_directory = "/") const;
  // GET files/stat; nullopt on 404.
  std::optional<FileInfo> stat(const Call& call, std::string_view sandbox_id,
                               const std::string& path) const;
  // GET files/list: the direct children.
  std::vector<FileInfo> list(const Call& call, std::string_view sandbox_id,
                             const std::string& path) const;

 private:
  std::mutex mutex_;
  std::shared_ptr<TokenCredential> default_credential_;
  std::map<std::pair<std::string, std::string>, std::shared_ptr<TokenCredential>> resolved_;
};

// The parse of one FileInfo payload; BackendError when a required field is missing or of the
// wrong type (isDir and isSymlink are required: a stat without them cannot refuse a link).
FileInfo parse_file_info(const nlohmann::json& payload);

}  // namespace airlock::acas
