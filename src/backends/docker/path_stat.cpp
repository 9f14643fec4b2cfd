#include "backends/docker/path_stat.hpp"

#include <nlohmann/json.hpp>

#include "airlock/encoding.hpp"

namespace airlock::docker {
namespace {

// Go's os.FileMode type bits (io/fs): the engines marshal FileMode as this number.
constexpr std::uint64_t kModeDir = 1ull << 31;
constexpr std::uint64_t kModeSymlink = 1ull << 27;
constexpr std::uint64_t kModeDevice = 1ull << 26;
constexpr std::uint64_t kModeNamedPipe = 1ull << 25;
constexpr std::uint64_t kModeSocket = 1ull << 24;
constexpr std::uint64_t kModeCharDevice = 1ull << 21;
constexpr std::uint64_t kModeIrregular = 1ull << 19;

}  // namespace

EntryKind kind_from_file_mode(std::uint64_t mode) noexcept {
  // The link bit is checked first: an engine that also set the directory bit for a link to a
  // directory still describes a link.
  if ((mode & kModeSymlink) != 0) return EntryKind::symlink;
  if ((mode & kModeDir) != 0) return EntryKind::directory;
  if ((mode & (kModeDevice | kModeNamedPipe | kModeSocket | kModeCharDevice | kModeIrregular)) !=
      0) {
    return EntryKind::other;
  }
  return EntryKind::file;
}

std::optional<PathStat> decode_path_stat(std::string_view header_value) {
  while (!header_value.empty() && (header_value.back() == ' ' || header_value.back() == '\r')) {
    header_value.remove_suffix(1);
  }
  const auto decoded = base64_decode(header_value);
  if (!decoded) return std::nullopt;
  const auto parsed = nlohmann::json::parse(*decoded, nullptr, false);
  if (!parsed.is_object() || !parsed.contains("mode") || !parsed["mode"].is_number_unsigned()) {
    return std::nullopt;
  }
  PathStat stat;
  stat.mode = parsed["mode"].get<std::uint64_t>();
  stat.kind = kind_from_file_mode(stat.mode);
  if (parsed.contains("name") && parsed["name"].is_string()) {
    stat.name = parsed["name"].get<std::string>();
  }
  if (parsed.contains("size") && parsed["size"].is_number_unsigned()) {
    stat.size = parsed["size"].get<std::uint64_t>();
  } else if (stat.kind == EntryKind::file) {
    return std::nullopt;  // a file without a size cannot be capped
  }
  return stat;
}

}  // namespace airlock::docker
