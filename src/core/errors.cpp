#include "airlock/errors.hpp"

#include <algorithm>
#include <string>

namespace airlock {

Error::Error(std::string type, std::string message, std::string check)
    : type_(std::move(type)), message_(std::move(message)), check_(std::move(check)) {}

namespace {
std::string cap_message(const std::string& cap, const std::string& file, std::uint64_t limit,
                        std::optional<std::uint64_t> size) {
  std::string message = "'" + file + "' breaches " + cap + " (" + std::to_string(limit);
  message += cap.ends_with("max_files") ? " files" : " bytes";
  message += ")";
  if (size) message += ": it would make " + std::to_string(*size);
  return message;
}
}  // namespace

TransferCapExceeded::TransferCapExceeded(std::string cap, std::string file, std::uint64_t limit,
                                         std::optional<std::uint64_t> size)
    : OutputError("SandboxTransferCapExceeded", cap_message(cap, file, limit, size), cap),
      cap_(std::move(cap)),
      file_(std::move(file)),
      limit_(limit),
      size_(size) {}

ExecOutputLimitExceeded::ExecOutputLimitExceeded(std::uint64_t limit,
                                                 std::optional<bool> kill_confirmed)
    : Error("SandboxExecOutputLimitExceeded",
            "the command's output exceeded " + std::to_string(limit) + " bytes and was dropped",
            "max_output_bytes"),
      limit_(limit),
      kill_confirmed_(kill_confirmed) {}

std::string_view to_string(FileRefusal refusal) noexcept {
  switch (refusal) {
    case FileRefusal::not_found: return "file_not_found";
    case FileRefusal::is_directory: return "is_directory";
    case FileRefusal::permission_denied: return "permission_denied";
    case FileRefusal::invalid_path: return "invalid_path";
  }
  return "invalid_path";
}

FileRefused::FileRefused(FileRefusal refusal, std::string path, std::string detail)
    : Error("SandboxFileRefused",
            "'" + path + "' was refused: " + std::string(to_string(refusal)),
            std::string(to_string(refusal))),
      refusal_(refusal),
      path_(std::move(path)),
      detail_(std::move(detail)) {}

namespace {
std::string conformance_message(const std::vector<ConformanceFailure::Failed>& failures,
                                std::size_t total) {
  std::string message = std::to_string(failures.size()) + " of " + std::to_string(total) +
                        (total == 1 ? " conformance probe failed:" : " conformance probes failed:");
  for (const auto& failed : failures) {
    message += "\n  - " + failed.probe + " (" + failed.why + "): " + failed.failure;
  }
  return message;
}
}  // namespace

ConformanceFailure::ConformanceFailure(std::vector<Failed> failures,
                                       std::optional<std::size_t> total)
    : Error("ConformanceFailure",
            conformance_message(failures, std::max(total.value_or(0), failures.size()))),
      failures_(std::move(failures)),
      total_(std::max(total.value_or(0), failures_.size())) {}

namespace {
// The first `count` characters of UTF-8 text, never cutting one in half.
std::string first_characters(const std::string& text, std::size_t count) {
  std::size_t end = 0;
  for (std::size_t seen = 0; end < text.size(); ++end) {
    const bool starts_character = (static_cast<unsigned char>(text[end]) & 0xC0) != 0x80;
    if (starts_character && seen++ == count) break;
  }
  return text.substr(0, end);
}
}  // namespace

std::string error_detail(const std::exception& error) noexcept {
  constexpr std::size_t kBodyShown = 600;
  std::string out;
  try {
    const auto* ours = dynamic_cast<const Error*>(&error);
    if (ours == nullptr) return std::string("exception: ") + error.what();
    out = ours->type() + ": " + ours->message();
    const auto* backend = dynamic_cast<const BackendError*>(&error);
    if (backend == nullptr) return out;
    if (!backend->detail().empty()) out += " | " + backend->detail();
    if (const auto& response = backend->response()) {
      out += " | status=" + std::to_string(response->status);
      if (!response->body.empty()) out += " | body=" + first_characters(response->body, kBodyShown);
    }
  } catch (...) {
    // Out of memory while describing a failure: the log gets what was built so far.
  }
  return out;
}

}  // namespace airlock
