#include "airlock/encoding.hpp"

#include <openssl/evp.h>
#include <openssl/sha.h>

#include <algorithm>
#include <string>

namespace airlock {

std::string base64_encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  if (bytes.empty()) return out;
  const int written = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                      reinterpret_cast<const unsigned char*>(bytes.data()),
                                      static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(written));
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.empty()) return std::string();
  if (text.size() % 4 != 0) return std::nullopt;
  for (char c : text) {
    const bool valid = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                       c == '+' || c == '/' || c == '=';
    if (!valid) return std::nullopt;
  }
  std::string out(3 * (text.size() / 4), '\0');
  const int written = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                      reinterpret_cast<const unsigned char*>(text.data()),
                                      static_cast<int>(text.size()));
  if (written < 0) return std::nullopt;
  // EVP_DecodeBlock counts padding as zero bytes; take them back off.
  std::size_t padding = 0;
  if (text.ends_with("==")) {
    padding = 2;
  } else if (text.ends_with("=")) {
    padding = 1;
  }
  // '=' anywhere but the tail is not canonical base64.
  if (text.substr(0, text.size() - padding).find('=') != std::string_view::npos) {
    return std::nullopt;
  }
  out.resize(static_cast<std::size_t>(written) - padding);
  return out;
}

std::string ascii_lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : static_cast<char>(c);
  });
  return out;
}

std::string sha256_hex(std::string_view bytes) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), digest);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * SHA256_DIGEST_LENGTH);
  for (unsigned char byte : digest) {
    out.push_back(kHex[byte >> 4]);
    out.push_back(kHex[byte & 0x0f]);
  }
  return out;
}

namespace {

bool label_safe(std::string_view value) {
  if (value.empty() || value.size() > 63) return false;
  return std::all_of(value.begin(), value.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

bool looks_like_digest(std::string_view value) {
  if (value.size() != 7 + 48 || !value.starts_with("sha256-")) return false;
  return std::all_of(value.begin() + 7, value.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

}  // namespace

std::string map_label_value(std::string_view value) {
  // A raw value that already looks like a digest is hashed too, so no raw value can collide
  // with another value's digest.
  if (label_safe(value) && !looks_like_digest(value)) return std::string(value);
  return label_digest(value);
}

std::string label_digest(std::string_view value) {
  return "sha256-" + sha256_hex(value).substr(0, 48);
}

std::string stored_label_digest(std::string_view stored) {
  // map_label_value hashes every raw value that looks like a digest, so one that does is one.
  if (looks_like_digest(stored)) return std::string(stored);
  return label_digest(stored);
}

std::map<std::string, std::string> sandbox_labels(const SandboxKey& key, const SandboxSpec& spec) {
  std::map<std::string, std::string> labels{
      {"airlock.scope", map_label_value(key.scope)},
      {"airlock.thread", map_label_value(key.thread_id)},
      {"airlock.agent", map_label_value(key.agent_dir)},
      {"airlock.kind", map_label_value(spec.kind())},
      {"airlock.egress", map_label_value(spec.egress_posture())},
  };
  for (const auto& [name, value] : spec.labels()) {
    labels["airlock.label." + name] = map_label_value(value);
  }
  return labels;
}

std::string sandbox_identity(const SandboxKey& key, std::string_view kind,
                             std::string_view egress_posture, std::size_t hex_digits) {
  std::string encoded;
  for (std::string_view part : {std::string_view(key.scope), std::string_view(key.thread_id),
                                std::string_view(key.agent_dir), kind, egress_posture}) {
    encoded += std::to_string(part.size());
    encoded += ':';
    encoded += part;
  }
  return sha256_hex(encoded).substr(0, std::min<std::size_t>(hex_digits, 64));
}

}  // namespace airlock
