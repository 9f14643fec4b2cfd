#include "airlock/records.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <string>

#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "airlock/paths.hpp"

namespace airlock {
namespace {

bool blank_or_separated(std::string_view host) {
  if (host.empty()) return true;
  return std::any_of(host.begin(), host.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == ',';
  });
}

}  // namespace

SandboxSpec::SandboxSpec(Fields fields) : fields_(std::move(fields)) {
  if (fields_.kind.empty()) {
    throw InvalidArgument(
        "spec.kind: a sandbox spec needs a kind (it is part of the sandbox's "
        "identity)",
        "spec.kind");
  }
  if (!fields_.egress_allow.empty() && fields_.egress != Egress::allowlist) {
    std::string hosts;
    for (const auto& host : fields_.egress_allow) hosts += (hosts.empty() ? "" : ", ") + host;
    throw InvalidArgument("spec.egress_allow: hosts [" + hosts +
                              "] are the payload of an allowlist run, but spec.egress is '" +
                              std::string(to_string(fields_.egress)) +
                              "'; set egress to 'allowlist' or drop the hosts",
                          "spec.egress_allow");
  }
  for (const auto& host : fields_.egress_allow) {
    if (blank_or_separated(host)) {
      throw InvalidArgument("spec.egress_allow: entry \"" + host +
                                "\" is blank or contains whitespace or a comma; give one host "
                                "pattern per entry",
                            "spec.egress_allow");
    }
  }
  check_work_dir();
}

void SandboxSpec::check_work_dir() {
  const std::string& work_dir = fields_.work_dir;
  if (work_dir.find('\0') != std::string::npos) {
    throw InvalidArgument("spec.work_dir: a guest path may not contain a NUL byte",
                          "spec.work_dir");
  }
  // A Windows guest's work dir is written in its own grammar ("C:/work", "D:\\work"). It is
  // accepted only where the spec asks for that family, and kept exactly as written: POSIX
  // normalisation would corrupt it, and no POSIX file plane may ever be handed one.
  if (fields_.requires_os_family == OsFamily::windows && is_windows_absolute_path(work_dir)) {
    return;
  }
  if (is_windows_absolute_path(work_dir)) {
    throw InvalidArgument("spec.work_dir: \"" + work_dir +
                              "\" is a Windows drive path, which only a spec asking for the "
                              "windows family (requires_os_family) may use",
                          "spec.work_dir");
  }
  if (work_dir.empty() || work_dir.front() != '/') {
    throw InvalidArgument(
        "spec.work_dir: \"" + work_dir + "\" is not an absolute guest path" +
            (fields_.requires_os_family == OsFamily::windows
                 ? std::string(" (a windows guest's is a drive path such as C:/work, or an "
                               "absolute POSIX path)")
                 : std::string()),
        "spec.work_dir");
  }
  if (work_dir.find('\\') != std::string::npos) {
    throw InvalidArgument("spec.work_dir: a POSIX guest path may not contain a backslash",
                          "spec.work_dir");
  }
  // Normalised once, here: every backend, the daemon and the file planes compare against the
  // same spelling ("/w/./x/" and "/w/x" are one working directory).
  fields_.work_dir = normalize_guest_path(work_dir);
}

std::string_view to_string(SnapshotContent content) noexcept {
  return content == SnapshotContent::filesystem_and_memory ? "filesystem+memory" : "filesystem";
}

bool snapshot_belongs_to(const SnapshotRecord& record, const SandboxKey& key) {
  const auto matches = [&record](const char* label, std::string_view value) {
    const auto found = record.labels.find(label);
    return found != record.labels.end() && found->second == map_label_value(value);
  };
  return matches("airlock.scope", key.scope) && matches("airlock.thread", key.thread_id);
}

bool is_snapshot_id(std::string_view id) noexcept {
  constexpr std::string_view prefix = "snap-";
  if (id.size() != prefix.size() + 24 || id.substr(0, prefix.size()) != prefix) return false;
  return std::all_of(id.begin() + prefix.size(), id.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::string SandboxSpec::egress_posture() const {
  std::string posture(to_string(fields_.egress));
  if (fields_.egress == Egress::allowlist) {
    std::vector<std::string> hosts = fields_.egress_allow;
    for (auto& host : hosts) host = ascii_lower(host);
    std::sort(hosts.begin(), hosts.end());
    hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
    posture += ":";
    for (std::size_t i = 0; i < hosts.size(); ++i) posture += (i ? "," : "") + hosts[i];
  }
  return posture;
}

std::string decode_utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const auto* data = reinterpret_cast<const utf8proc_uint8_t*>(bytes.data());
  std::size_t offset = 0;
  while (offset < bytes.size()) {
    // ASCII fast path: most program output is plain ASCII.
    if (data[offset] < 0x80) {
      out.push_back(static_cast<char>(data[offset]));
      ++offset;
      continue;
    }
    utf8proc_int32_t codepoint = 0;
    auto length = utf8proc_iterate(
        data + offset, static_cast<utf8proc_ssize_t>(bytes.size() - offset), &codepoint);
    if (length <= 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++offset;
    } else {
      out.append(bytes.substr(offset, static_cast<std::size_t>(length)));
      offset += static_cast<std::size_t>(length);
    }
  }
  return out;
}

std::string ExecResult::stdout_text() const {
  return decode_utf8_lossy(stdout_bytes);
}
std::string ExecResult::stderr_text() const {
  return decode_utf8_lossy(stderr_bytes);
}

}  // namespace airlock
