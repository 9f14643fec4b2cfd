#include "daemon/http_errors.hpp"

#include <cerrno>

#include "airlock/error_table.hpp"
#include "airlock/shell_roads.hpp"

namespace airlock::daemon {

HttpError::HttpError(std::string type, std::string message, std::string check)
    : InvalidArgument(std::move(type), std::move(message), std::move(check)) {
  const ErrorKind* kind = find_error_kind(this->type());
  status_ = kind ? kind->http_status : 500;
}

int http_status_for(const std::exception& error) noexcept {
  if (const auto* http = dynamic_cast<const HttpError*>(&error)) return http->status();
  const auto* ours = dynamic_cast<const Error*>(&error);
  if (!ours) return 500;
  // Two kinds refine the table's status by what they carry.
  if (const auto* refused = dynamic_cast<const FileRefused*>(&error)) {
    switch (refused->refusal()) {
      case FileRefusal::not_found:
        return 404;
      case FileRefusal::is_directory:
        return 409;
      case FileRefusal::permission_denied:
        return 403;
      case FileRefusal::invalid_path:
        return 400;
    }
    return 400;
  }
  const ErrorKind& kind = error_kind_of(*ours);
  if (kind.type == "SystemError") {
    const auto& system = static_cast<const SystemError&>(*ours);
    switch (system.error_number()) {
      case EACCES:
      case EPERM:
        return 403;
      case ENOENT:
        return 404;
      case EISDIR:
      case ENOTDIR:
        return 409;
      case ELOOP:   // a link the file plane refuses to read
      case EINVAL:  // a non-regular entry
      case 0:
        return 400;
      default:
        return 500;
    }
  }
  return kind.http_status;
}

std::optional<FileRefusal> file_refusal_of(const std::exception& error) noexcept {
  if (const auto* refused = dynamic_cast<const FileRefused*>(&error)) return refused->refusal();
  try {
    if (auto refusal = file_refusal(error)) return refusal;  // the core's reading first
  } catch (...) {
  }
  if (dynamic_cast<const ConfinementError*>(&error)) return FileRefusal::invalid_path;
  if (dynamic_cast<const NotFound*>(&error)) return FileRefusal::not_found;
  if (dynamic_cast<const IsADirectory*>(&error)) return FileRefusal::is_directory;
  // A parent that is a file: the path cannot name anything, as with a link in it.
  if (dynamic_cast<const NotADirectory*>(&error)) return FileRefusal::invalid_path;
  if (dynamic_cast<const Timeout*>(&error)) return std::nullopt;
  if (const auto* system = dynamic_cast<const SystemError*>(&error)) {
    switch (system->error_number()) {
      case EACCES:
      case EPERM:
        return FileRefusal::permission_denied;
      case ENOENT:
        return FileRefusal::not_found;
      case EISDIR:
        return FileRefusal::is_directory;
      case ENOTDIR:
      case ELOOP:
      case EINVAL:
      case 0:
        // The file plane refuses a link or a non-regular entry without following it.
        return FileRefusal::invalid_path;
      default:
        return std::nullopt;
    }
  }
  return std::nullopt;
}

HttpResponse error_response(const std::exception& error, bool file_route, const json::Json& extra) {
  const int status = http_status_for(error);
  json::Json body = json::error_to_json(error);
  if (status == 500 && dynamic_cast<const Error*>(&error) == nullptr) {
    body = json::Json{{"type", "InternalError"}, {"message", "internal error; see the daemon log"}};
  }
  if (file_route) {
    if (auto refusal = file_refusal_of(error)) body["refusal"] = std::string(to_string(*refusal));
  }
  if (extra.is_object()) {
    for (const auto& [name, value] : extra.items()) body[name] = value;
  }
  HttpResponse response = HttpResponse::json(status, json::Json{{"error", body}});
  if (status == 503 && dynamic_cast<const QueuedTimeout*>(&error)) {
    response.headers.emplace_back("Retry-After", "1");
  }
  return response;
}

}  // namespace airlock::daemon
