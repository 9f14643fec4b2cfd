// The store's small JSON records: store.json (format and ownership map) and one record per
// reference. Kept apart from the locking and publication logic in store.cpp.
#pragma once

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "airlock/images.hpp"

namespace airlock::images::detail {

inline constexpr int kStoreFormat = 1;

// What refs/<hash>.json holds.
struct ReferenceRecord {
  ImageReference reference;
  std::string id;
  std::chrono::system_clock::time_point created_at;
  SourceKind source_kind = SourceKind::tar;
  std::string source_digest;
  ImageConfig config;
};

// The record's file name: 32 hex digits of SHA-256 over "name:tag", so no name needs escaping.
std::string reference_file(const ImageReference& reference);
// "sha256:<hex>" → "<hex>", the content directory's name.
std::string id_hex(const std::string& id);
bool is_image_id(std::string_view text);

nlohmann::json ownership_json(const OwnershipMap& map);
// InvalidArgument unless `text` is a store.json of this format recording `expected`.
void check_store_json(const std::string& text, const OwnershipMap& expected,
                      const std::filesystem::path& root);

nlohmann::json to_json(const ReferenceRecord& record);
// SystemError naming `where` when the record is damaged.
ReferenceRecord reference_from_json(const std::string& text, const std::string& where);

}  // namespace airlock::images::detail
