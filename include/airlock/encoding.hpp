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

// A label value as a digest, always: "sha256-" + 48 hex digits of SHA-256 over `value` — exactly
// what map_label_value stores for a value it does not keep raw. For answers to callers who may
// not learn the value (airlockd's listings): a short scope is stored raw, and shown digested.
std::string label_digest(std::string_view value);

// A label value as map_label_value stored it, digested: a value stored raw is hashed, one stored
// as a digest already is one. So stored_label_digest(map_label_value(v)) == label_digest(v).
std::string stored_label_digest(std::string_view stored);

// The labels a sandbox carries, already mapped: airlock.scope, airlock.thread, airlock.agent,
// airlock.kind, airlock.egress, and airlock.label.<k> for each spec label.
std::map<std::string, std::string> sandbox_labels(const SandboxKey& key, const SandboxSpec& spec);

// A stable identity for (key, kind, egress posture): sha256 over length-prefixed parts
// ("<len>:" + bytes each), so no two distinct tuples share an encoding. Returns `hex_digits`
// hex characters of it.
std::string sandbox_identity(const SandboxKey& key, std::string_view kind,
                             std::string_view egress_posture, std::size_t hex_digits = 24);

}  // namespace airlock
