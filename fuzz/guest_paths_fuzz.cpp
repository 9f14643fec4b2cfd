// Guest paths from model-written code against a working directory: confinement must hold for
// every input (the result is the working directory or lies beneath it), and the write rule must
// refuse every path whose walk meets a link — checked against an independent walk over a
// synthetic guest tree spelled by the input itself.
//
// Input: "<working directory>\n<path>". In the synthetic tree a component's first letter is its
// kind: `l` a link, `f` a regular file, `n` absent; anything else a directory. A path exists
// when every ancestor is a directory.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "airlock/errors.hpp"
#include "airlock/paths.hpp"
#include "fuzz_check.hpp"

namespace {

using airlock::EntryKind;

std::vector<std::string> prefixes(const std::string& absolute) {
  std::vector<std::string> out;
  std::size_t at = 1;
  while (at <= absolute.size()) {
    const std::size_t slash = absolute.find('/', at);
    const std::size_t end = slash == std::string::npos ? absolute.size() : slash;
    if (end > at) out.push_back(absolute.substr(0, end));
    if (slash == std::string::npos) break;
    at = slash + 1;
  }
  return out;
}

std::optional<EntryKind> own_kind(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  const char first = slash + 1 < path.size() ? path[slash + 1] : 'd';
  if (first == 'l') return EntryKind::symlink;
  if (first == 'f') return EntryKind::file;
  if (first == 'n') return std::nullopt;
  return EntryKind::directory;
}

std::optional<EntryKind> synthetic_stat(const std::string& path) {
  const std::vector<std::string> chain = prefixes(path);
  for (std::size_t i = 0; i + 1 < chain.size(); ++i) {
    if (own_kind(chain[i]) != EntryKind::directory) return std::nullopt;
  }
  return chain.empty() ? EntryKind::directory : own_kind(path);
}

bool under(const std::string& path, const std::string& base) {
  if (path == base) return true;
  if (base == "/") return !path.empty() && path[0] == '/';
  return path.size() > base.size() && path.compare(0, base.size(), base) == 0 &&
         path[base.size()] == '/';
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t newline = input.find('\n');
  const std::string_view wd = newline == std::string_view::npos ? "/work" : input.substr(0, newline);
  const std::string_view path = newline == std::string_view::npos ? input : input.substr(newline + 1);

  const std::string normal = airlock::normalize_guest_path(path);
  FUZZ_CHECK(airlock::normalize_guest_path(normal) == normal);  // normpath is idempotent
  FUZZ_CHECK(normal.find("//") == std::string::npos || normal.rfind("//", 0) == 0);
  (void)airlock::posix_quote(path);
  (void)airlock::guest_path_relative_to(path, wd);

  std::string confined;
  try {
    confined = airlock::confine_guest_path(path, wd);
  } catch (const airlock::InvalidArgument&) {
    return 0;  // ConfinementError is an InvalidArgument too
  }
  const std::string base = airlock::normalize_guest_path(wd);
  FUZZ_CHECK(under(confined, base));
  FUZZ_CHECK(airlock::guest_path_relative_to(confined, base).has_value());
  // The chain walks every directory from the top down to the confined path itself. (POSIX
  // normpath keeps a leading "//"; the chain spells it "/", the same directory on Linux.)
  const std::vector<std::string> chain = airlock::guest_directory_chain(confined, wd);
  const std::string single = confined.rfind("//", 0) == 0 ? confined.substr(1) : confined;
  FUZZ_CHECK(chain == prefixes(single));

  std::string written;
  try {
    written = airlock::confine_guest_write_path(synthetic_stat, path, wd);
  } catch (const airlock::Error&) {
    return 0;
  }
  FUZZ_CHECK(written == confined);
  FUZZ_CHECK(written != base);
  // The independent walk: every existing ancestor is a directory, and the leaf is no link.
  for (const std::string& prefix : prefixes(written)) {
    if (prefix == written) break;
    const std::optional<EntryKind> kind = synthetic_stat(prefix);
    if (!kind) break;
    FUZZ_CHECK(*kind == EntryKind::directory);
  }
  FUZZ_CHECK(synthetic_stat(written) != EntryKind::symlink);
  return 0;
}
