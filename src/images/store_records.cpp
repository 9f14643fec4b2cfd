#include "images/store_records.hpp"

#include <algorithm>

#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "images/fs.hpp"

namespace airlock::images::detail {

using Json = nlohmann::json;

namespace {
Json to_json(const ImageConfig& config) {
  return {{"env", config.env},
          {"entrypoint", config.entrypoint},
          {"cmd", config.cmd},
          {"working_dir", config.working_dir},
          {"user", config.user}};
}
}  // namespace

std::string reference_file(const ImageReference& reference) {
  return sha256_hex(reference.to_string()).substr(0, 32) + ".json";
}

std::string id_hex(const std::string& id) {
  return id.substr(std::string_view("sha256:").size());
}

bool is_image_id(std::string_view text) {
  return text.size() == 7 + 64 && text.starts_with("sha256:") &&
         std::all_of(text.begin() + 7, text.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

Json ownership_json(const OwnershipMap& map) {
  Json out = {{"format", kStoreFormat}, {"ownership", map.is_shifted() ? "shifted" : "caller"}};
  if (map.is_shifted()) out["uid_base"] = map.base();
  return out;
}

void check_store_json(const std::string& text, const OwnershipMap& expected,
                      const std::filesystem::path& root) {
  Json document;
  try {
    document = Json::parse(text);
  } catch (const Json::exception&) {
    throw InvalidArgument("the image store at " + root.string() + " has an unreadable store.json",
                          "store");
  }
  if (!document.is_object() || document.value("format", 0) != kStoreFormat) {
    throw InvalidArgument("the image store at " + root.string() +
                              " has a format this build does not know (store.json)",
                          "store");
  }
  if (document != ownership_json(expected)) {
    const bool shifted = document.value("ownership", std::string()) == "shifted";
    const std::string recorded =
        shifted ? "shifted(" + std::to_string(document.value("uid_base", 0U)) + ")" : "caller";
    throw InvalidArgument("the image store at " + root.string() + " stores files as " + recorded +
                              ", not " + expected.describe() +
                              "; use the same uid base (or a different store)",
                          "ownership");
  }
}

Json to_json(const ReferenceRecord& record) {
  return {{"reference", record.reference.to_string()},
          {"id", record.id},
          {"created_at_ns", std::chrono::duration_cast<std::chrono::nanoseconds>(
                                record.created_at.time_since_epoch())
                                .count()},
          {"source_kind", std::string(to_string(record.source_kind))},
          {"source_digest", record.source_digest},
          {"config", to_json(record.config)}};
}

ReferenceRecord reference_from_json(const std::string& text, const std::string& where) {
  try {
    const Json document = Json::parse(text);
    ReferenceRecord record;
    record.reference = parse_reference(document.at("reference").get<std::string>());
    record.id = document.at("id").get<std::string>();
    if (!is_image_id(record.id)) throw InvalidArgument("bad id", "store");
    record.created_at = std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::nanoseconds(document.at("created_at_ns").get<std::int64_t>())));
    record.source_kind = parse_source_kind(document.at("source_kind").get<std::string>());
    record.source_digest = document.at("source_digest").get<std::string>();
    const Json& config = document.at("config");
    record.config.env = config.at("env").get<std::vector<std::string>>();
    record.config.entrypoint = config.at("entrypoint").get<std::vector<std::string>>();
    record.config.cmd = config.at("cmd").get<std::vector<std::string>>();
    record.config.working_dir = config.at("working_dir").get<std::string>();
    record.config.user = config.at("user").get<std::string>();
    return record;
  } catch (const Json::exception& error) {
    throw SystemError("the image store record " + where + " is damaged: " + error.what());
  } catch (const InvalidArgument& error) {
    throw SystemError("the image store record " + where + " is damaged: " + error.message());
  }
}

}  // namespace airlock::images::detail
