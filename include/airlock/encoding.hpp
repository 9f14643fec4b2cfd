// Encodings every backend shares: base64 for shell roads and wires, SHA-256 for names and labels.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "airlock/records.hpp"

namespace airlock {

std::string base64_encode(std::string_view bytes);
// nullopt when `text` is not canonical base64 (whitespace is not skipped).
std::optional<std::string> base64_decode(std::string_view text);

// `text` with A–Z mapped to a–z and every other byte kept (host names, header names, hex).
std::string ascii_lower(std::string_view text);

// Lowercase hex SHA-256 of `bytes`.
std::string sha256_hex(std::string_view bytes);

// A label value as it is stored and queried: the raw value when it is ≤ 63 characters of
// [A-Za-z0-9._-] and does not already look like a digest; otherwise "sha256-" + 48 hex digits.
// Never truncated: a truncation collision would let one conversation's purge delete another's.
std::string map_label_value(std::string_view value);

// The labels a sandbox carries, already mapped: airlock.scope, airlock.thread, airlock.agent,
// airlock.kind, airlock.egress, and airlock.label.<k> for each spec label.
std::map<std::string, std::string> sandbox_labels(const SandboxKey& key, const SandboxSpec& spec);

// A stable identity for (key, kind, egress posture): sha256 over length-prefixed parts
// ("<len>:" + bytes each), so no two distinct tuples share an encoding. Returns `hex_digits`
// hex characters of it.
std::string sandbox_identity(const SandboxKey& key, std::string_view kind,
                             std::string_view egress_posture, std::size_t hex_digits = 24);

}  // namespace airlock
