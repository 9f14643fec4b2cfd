// References and source kinds: the names an operator types.
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cctype>

#include "airlock/errors.hpp"
#include "airlock/images.hpp"

namespace airlock::images {

namespace {

bool is_lower_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}
bool is_alnum(char c) {
  return is_lower_alnum(c) || (c >= 'A' && c <= 'Z');
}

// Shows a reference inside a message without letting control bytes through.
std::string shown_text(std::string_view text) {
  std::string out = "'";
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      static constexpr char kDigits[] = "0123456789abcdef";
      out += "\\x";
      out.push_back(kDigits[byte >> 4]);
      out.push_back(kDigits[byte & 0xf]);
    } else {
      out.push_back(c);
    }
  }
  return out + "'";
}

[[noreturn]] void refuse(std::string_view text, const std::string& why) {
  throw InvalidArgument("image reference " + shown_text(text) + " is invalid: " + why, "reference");
}

void check_name(std::string_view text, std::string_view name) {
  if (name.empty()) refuse(text, "the name is empty");
  if (name.size() > 255) refuse(text, "the name is longer than 255 characters");
  if (name.front() == '/') refuse(text, "the name starts with '/'");
  if (name.back() == '/') refuse(text, "the name ends with '/'");
  if (name.find("..") != std::string_view::npos) refuse(text, "the name contains '..'");
  std::size_t start = 0;
  while (start <= name.size()) {
    const std::size_t end = std::min(name.find('/', start), name.size());
    const std::string_view component = name.substr(start, end - start);
    if (component.empty()) refuse(text, "the name contains '//'");
    if (!is_lower_alnum(component.front())) {
      refuse(text, "each part of the name must start with a lowercase letter or a digit");
    }
    for (const char c : component) {
      if (!is_lower_alnum(c) && c != '.' && c != '_' && c != '-') {
        refuse(text, "the name may contain only a-z, 0-9, '.', '_', '-' and '/' (found " +
                         shown_text(std::string(1, c)) + ")");
      }
    }
    start = end + 1;
  }
  if (name == "host") {
    refuse(text, "'host' is reserved: the linux backend uses it for the host's own root");
  }
}

void check_tag(std::string_view text, std::string_view tag) {
  if (tag.empty()) refuse(text, "the tag after ':' is empty");
  if (tag.size() > 128) refuse(text, "the tag is longer than 128 characters");
  if (!is_alnum(tag.front()) && tag.front() != '_') {
    refuse(text, "the tag must start with a letter, a digit or '_'");
  }
  for (const char c : tag) {
    if (!is_alnum(c) && c != '.' && c != '_' && c != '-') {
      refuse(text, "the tag may contain only A-Z, a-z, 0-9, '.', '_' and '-' (found " +
                       shown_text(std::string(1, c)) + ")");
    }
  }
}

}  // namespace

ImageReference parse_reference(std::string_view text) {
  if (text.empty()) refuse(text, "it is empty");
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte == 0) refuse(text, "it contains a NUL byte");
    if (std::isspace(byte) != 0) refuse(text, "it contains whitespace");
  }
  const std::size_t colon = text.find(':');
  if (colon != std::string_view::npos && text.find(':', colon + 1) != std::string_view::npos) {
    refuse(text, "it contains more than one ':'");
  }
  ImageReference reference;
  if (colon == std::string_view::npos) {
    reference.name = std::string(text);
    reference.tag = "latest";
  } else {
    reference.name = std::string(text.substr(0, colon));
    reference.tag = std::string(text.substr(colon + 1));
    if (reference.tag.find('/') != std::string::npos) {
      refuse(text, "a registry host is not part of a local reference (found '/' after ':')");
    }
  }
  check_name(text, reference.name);
  check_tag(text, reference.tag);
  return reference;
}

std::optional<std::string> reference_from_path(const std::filesystem::path& source) {
  std::string name = source.lexically_normal().filename().string();
  if (name.empty()) name = source.lexically_normal().parent_path().filename().string();
  static constexpr std::array<std::string_view, 8> kSuffixes = {
      ".tar.gz", ".tar.xz", ".tar.zst", ".tar.bz2", ".tgz", ".txz", ".tar", ".oci"};
  for (const auto suffix : kSuffixes) {
    if (name.size() > suffix.size() && name.ends_with(suffix)) {
      name.resize(name.size() - suffix.size());
      break;
    }
  }
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  try {
    parse_reference(name);
  } catch (const InvalidArgument&) {
    return std::nullopt;
  }
  return name;
}

std::string_view to_string(SourceKind kind) noexcept {
  switch (kind) {
    case SourceKind::directory:
      return "directory";
    case SourceKind::tar:
      return "tar";
    case SourceKind::oci_layout:
      return "oci-layout";
  }
  return "tar";
}

SourceKind parse_source_kind(std::string_view text) {
  if (text == "directory" || text == "dir") return SourceKind::directory;
  if (text == "tar") return SourceKind::tar;
  if (text == "oci-layout" || text == "oci") return SourceKind::oci_layout;
  throw InvalidArgument("unknown image source format '" + std::string(text) +
                            "'; expected one of: directory, tar, oci-layout",
                        "format");
}

SourceKind detect_source_kind(const std::filesystem::path& source) {
  struct stat st {};
  if (::stat(source.c_str(), &st) != 0) {
    throw NotFound("nothing to import at '" + source.string() + "'", source.string());
  }
  if (!S_ISDIR(st.st_mode)) return SourceKind::tar;
  struct stat marker {};
  if (::stat((source / "oci-layout").c_str(), &marker) == 0 && S_ISREG(marker.st_mode)) {
    return SourceKind::oci_layout;
  }
  return SourceKind::directory;
}

}  // namespace airlock::images
