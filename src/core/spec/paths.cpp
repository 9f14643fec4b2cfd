#include "airlock/paths.hpp"

#include <string>
#include <vector>

#include "airlock/errors.hpp"

namespace airlock {
namespace {

std::vector<std::string_view> split_components(std::string_view path) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    if (end > start) parts.push_back(path.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

std::string dirname_of(const std::string& absolute) {
  auto slash = absolute.rfind('/');
  if (slash == 0 || slash == std::string::npos) return "/";
  return absolute.substr(0, slash);
}

void check_working_directory(std::string_view working_directory) {
  if (working_directory.empty() || working_directory.front() != '/') {
    throw InvalidArgument("working_directory \"" + std::string(working_directory) +
                              "\" is not an absolute guest path",
                          "working_directory");
  }
  if (working_directory.find('\0') != std::string_view::npos ||
      working_directory.find('\\') != std::string_view::npos) {
    throw InvalidArgument("working_directory may contain neither NUL nor a backslash",
                          "working_directory");
  }
}

}  // namespace

bool is_windows_absolute_path(std::string_view path) noexcept {
  if (path.size() < 3) return false;
  const char drive = path[0];
  const bool letter = (drive >= 'A' && drive <= 'Z') || (drive >= 'a' && drive <= 'z');
  return letter && path[1] == ':' && (path[2] == '/' || path[2] == '\\');
}

std::string normalize_guest_path(std::string_view path) {
  if (path.empty()) return ".";
  const bool absolute = path.front() == '/';
  std::vector<std::string_view> kept;
  for (std::string_view part : split_components(path)) {
    if (part == ".") continue;
    if (part == "..") {
      if (!kept.empty() && kept.back() != "..") {
        kept.pop_back();
      } else if (!absolute) {
        kept.push_back(part);
      }
      // "/.." is "/": nothing above the root.
      continue;
    }
    kept.push_back(part);
  }
  std::string out = absolute ? "/" : "";
  for (std::size_t i = 0; i < kept.size(); ++i) {
    if (i != 0) out += '/';
    out += kept[i];
  }
  if (out.empty()) return ".";
  return out;
}

std::string confine_guest_path(std::string_view path, std::string_view working_directory) {
  check_working_directory(working_directory);
  if (path.find('\\') != std::string_view::npos) {
    throw ConfinementError("'" + std::string(path) +
                           "' contains a backslash; guest paths have one grammar (POSIX)");
  }
  if (path.find('\0') != std::string_view::npos) {
    throw ConfinementError("a guest path contains a NUL byte");
  }
  const std::string base = normalize_guest_path(working_directory);
  std::string joined;
  if (!path.empty() && path.front() == '/') {
    joined = std::string(path);
  } else {
    joined = base + "/" + std::string(path);
  }
  std::string resolved = normalize_guest_path(joined);
  if (!guest_path_relative_to(resolved, base)) {
    throw ConfinementError("'" + std::string(path) + "' resolves outside the working directory " +
                           base);
  }
  return resolved;
}

std::optional<std::string> guest_path_relative_to(std::string_view path, std::string_view base) {
  const std::string normal_path = normalize_guest_path(path);
  const std::string normal_base = normalize_guest_path(base);
  if (normal_path == normal_base) return std::string();
  if (normal_base == "/") {
    if (normal_path.size() > 1 && normal_path.front() == '/') return normal_path.substr(1);
    return std::nullopt;
  }
  // Compare against base + "/": "/work-outside" must not count as under "/work".
  const std::string prefix = normal_base + "/";
  if (normal_path.compare(0, prefix.size(), prefix) == 0) {
    return normal_path.substr(prefix.size());
  }
  return std::nullopt;
}

std::vector<std::string> guest_directory_chain(std::string_view guest_path,
                                               std::string_view working_directory) {
  check_working_directory(working_directory);
  const std::string base = normalize_guest_path(working_directory);
  std::vector<std::string> chain;
  std::string prefix;
  for (std::string_view part : split_components(base)) {
    prefix += "/";
    prefix += part;
    chain.push_back(prefix);
  }
  auto relative = guest_path_relative_to(guest_path, base);
  if (!relative) {
    throw ConfinementError("'" + std::string(guest_path) + "' is outside the working directory " +
                           base);
  }
  for (std::string_view part : split_components(*relative)) {
    prefix += "/";
    prefix += part;
    chain.push_back(prefix);
  }
  return chain;
}

void refuse_symlinked_parents(const GuestStat& stat, std::string_view guest_path,
                              std::string_view working_directory, bool include_self) {
  const std::string normal = normalize_guest_path(guest_path);
  const std::string walked = include_self ? normal : dirname_of(normal);
  // A path that *is* the working directory walks only the working directory's own chain.
  std::vector<std::string> chain;
  if (guest_path_relative_to(walked, working_directory)) {
    chain = guest_directory_chain(walked, working_directory);
  } else {
    chain = guest_directory_chain(working_directory, working_directory);
  }
  for (const auto& component : chain) {
    auto kind = stat(component);
    if (!kind) return;  // nothing further exists; there is nothing to pass through
    if (*kind == EntryKind::symlink) {
      throw ConfinementError("'" + std::string(guest_path) + "' passes through the link " +
                             component);
    }
    if (*kind != EntryKind::directory) {
      throw NotADirectory(component + " is not a directory", component);
    }
  }
}

std::string confine_guest_write_path(const GuestStat& stat, std::string_view path,
                                     std::string_view working_directory) {
  std::string absolute = confine_guest_path(path, working_directory);
  if (absolute == normalize_guest_path(working_directory)) {
    throw ConfinementError("'" + std::string(path) +
                           "' names the working directory itself; a write needs a file path");
  }
  refuse_symlinked_parents(stat, absolute, working_directory);
  if (auto leaf = stat(absolute); leaf && *leaf == EntryKind::symlink) {
    throw ConfinementError("'" + std::string(path) +
                           "' is a link; a write replaces a file and never follows a link");
  }
  return absolute;
}

std::string posix_quote(std::string_view argument) {
  std::string out = "'";
  for (char c : argument) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += "'";
  return out;
}

std::string posix_join(const std::vector<std::string>& arguments) {
  std::string out;
  for (std::size_t i = 0; i < arguments.size(); ++i) {
    if (i != 0) out += ' ';
    out += posix_quote(arguments[i]);
  }
  return out;
}

}  // namespace airlock
