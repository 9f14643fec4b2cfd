// Artifact names: the narrow invariant, NFC, collision keys and the portable rewrite.
#include <utf8proc.h>

#include <array>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "airlock/errors.hpp"
#include "airlock/outputs.hpp"
#include "airlock/paths.hpp"
#include "core/outputs/artifact_names_detail.hpp"

namespace airlock {
namespace {

const utf8proc_uint8_t* bytes_of(std::string_view text) {
  return reinterpret_cast<const utf8proc_uint8_t*>(text.data());
}

// Length of the valid UTF-8 sequence starting at `offset`, or 0 when it is not one.
std::size_t utf8_sequence_length(std::string_view text, std::size_t offset,
                                 utf8proc_int32_t* codepoint) {
  const auto length = utf8proc_iterate(
      bytes_of(text) + offset, static_cast<utf8proc_ssize_t>(text.size() - offset), codepoint);
  return length <= 0 ? 0 : static_cast<std::size_t>(length);
}

bool is_valid_utf8(std::string_view text) {
  std::size_t offset = 0;
  while (offset < text.size()) {
    utf8proc_int32_t codepoint = 0;
    const std::size_t length = utf8_sequence_length(text, offset, &codepoint);
    if (length == 0) return false;
    offset += length;
  }
  return true;
}

[[noreturn]] void refuse(std::string_view name, const char* rule, const std::string& why) {
  throw ArtifactNameInvalid("artifact name " + detail::printable_name(name) + " is invalid: " + why,
                            rule);
}

template <typename Map>
std::string map_codepoints(std::string_view text, Map map) {
  std::string out;
  out.reserve(text.size());
  std::size_t offset = 0;
  while (offset < text.size()) {
    utf8proc_int32_t codepoint = 0;
    const std::size_t length = utf8_sequence_length(text, offset, &codepoint);
    if (length == 0) {  // not UTF-8: keep the byte as it is (callers validated already)
      out += text[offset++];
      continue;
    }
    std::array<utf8proc_uint8_t, 4> encoded{};
    const auto written = utf8proc_encode_char(map(codepoint), encoded.data());
    out.append(reinterpret_cast<const char*>(encoded.data()), static_cast<std::size_t>(written));
    offset += length;
  }
  return out;
}

bool is_reserved_device_name(const std::string& upper_stem) {
  static constexpr std::array<std::string_view, 28> kReserved = {
      "CON", "PRN", "AUX", "NUL", "COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8",
      "COM9", "LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9",
      // The superscript digits Windows also reserves (U+00B9, U+00B2, U+00B3).
      "COM\xC2\xB9", "COM\xC2\xB2", "COM\xC2\xB3", "LPT\xC2\xB9", "LPT\xC2\xB2", "LPT\xC2\xB3"};
  for (std::string_view reserved : kReserved) {
    if (upper_stem == reserved) return true;
  }
  return false;
}

std::string portable_segment(std::string_view segment) {
  std::string out;
  out.reserve(segment.size() + 1);
  for (char c : segment) {
    const auto byte = static_cast<unsigned char>(c);
    const bool forbidden = byte < 32 || c == '<' || c == '>' || c == ':' || c == '"' || c == '|' ||
                           c == '?' || c == '*';
    out += forbidden ? '_' : c;
  }
  while (!out.empty() && (out.back() == '.' || out.back() == ' ')) out.pop_back();
  const std::size_t dot = out.find('.');
  const std::string stem = out.substr(0, dot);
  const std::string upper =
      map_codepoints(stem, [](utf8proc_int32_t c) { return utf8proc_toupper(c); });
  if (is_reserved_device_name(upper)) {
    out.insert(stem.size(), "_");
  }
  if (out.empty()) out = "_";
  return out;
}

}  // namespace

namespace detail {

std::string printable_name(std::string_view name) {
  constexpr std::size_t kShown = 120;
  std::string out = "\"";
  std::size_t offset = 0;
  while (offset < name.size() && offset < kShown) {
    const auto byte = static_cast<unsigned char>(name[offset]);
    if (byte >= 0x20 && byte < 0x7F && byte != '"' && byte != '\\') {
      out += name[offset++];
      continue;
    }
    if (byte >= 0x80) {
      utf8proc_int32_t codepoint = 0;
      const std::size_t length = utf8_sequence_length(name, offset, &codepoint);
      if (length != 0) {
        out.append(name.substr(offset, length));
        offset += length;
        continue;
      }
    }
    static constexpr char kHex[] = "0123456789abcdef";
    if (byte == '"' || byte == '\\') {
      out += '\\';
      out += name[offset];
    } else {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xF];
    }
    ++offset;
  }
  out += "\"";
  if (offset < name.size()) out += "…";
  return out;
}

}  // namespace detail

void validate_artifact_name(std::string_view name) {
  if (name.empty()) refuse(name, "empty", "it is empty");
  if (name.find('\\') != std::string_view::npos) {
    refuse(name, "backslash", "it contains a backslash; artifact names use '/' only");
  }
  if (name.front() == '/') refuse(name, "absolute", "it starts with '/'; names are relative");
  // Rules 4 and 5 walk the same segments; `..` is judged first across the whole name so the
  // rule reported does not depend on where the segments sit.
  bool empty_or_dot = false;
  std::size_t start = 0;
  while (true) {
    const std::size_t slash = name.find('/', start);
    const std::string_view segment = name.substr(
        start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (segment == "..") refuse(name, "parent-segment", "a segment is '..'");
    if (segment.empty() || segment == ".") empty_or_dot = true;
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  if (empty_or_dot) {
    refuse(name, "empty-segment",
           "a segment is empty or '.' (a doubled, leading './' or trailing '/')");
  }
  for (char c : name) {
    if (static_cast<unsigned char>(c) < 32) {
      refuse(name, "control-character", "it contains an ASCII control character");
    }
  }
  validate_artifact_name_encoding(name);
  if (name.size() > kMaxArtifactNameBytes) {
    refuse(name, "length",
           "it is " + std::to_string(name.size()) + " bytes of UTF-8; the limit is " +
               std::to_string(kMaxArtifactNameBytes));
  }
}

void validate_artifact_name_encoding(std::string_view name) {
  if (!is_valid_utf8(name)) {
    refuse(name, "utf8",
           "it is not encodable as UTF-8 (a lone surrogate, an encoded surrogate, an overlong or "
           "a malformed sequence)");
  }
}

std::string nfc_compose(std::string_view name) {
  validate_artifact_name_encoding(name);
  if (name.empty()) return {};
  utf8proc_uint8_t* composed = nullptr;
  const auto length =
      utf8proc_map(bytes_of(name), static_cast<utf8proc_ssize_t>(name.size()), &composed,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(composed, &std::free);
  if (length < 0) {
    refuse(name, "utf8", std::string("it cannot be NFC-composed: ") + utf8proc_errmsg(length));
  }
  return std::string(reinterpret_cast<const char*>(composed), static_cast<std::size_t>(length));
}

std::string artifact_collision_key(std::string_view name) {
  const std::string lowered =
      map_codepoints(nfc_compose(name), [](utf8proc_int32_t c) { return utf8proc_tolower(c); });
  return normalize_guest_path(lowered);
}

std::string portable_name(std::string_view name) {
  // The rewrite works on characters; bytes that are none would come out as a name no host
  // text can hold.
  validate_artifact_name_encoding(name);
  std::string out;
  std::size_t start = 0;
  while (true) {
    const std::size_t slash = name.find('/', start);
    const std::string_view segment = name.substr(
        start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    out += portable_segment(segment);
    if (slash == std::string_view::npos) break;
    out += '/';
    start = slash + 1;
  }
  return out;
}

}  // namespace airlock
