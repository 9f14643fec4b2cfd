// Artifact names and their collision keys, as model-written code spells them: any bytes must
// either pass the name rules or be refused with ArtifactNameInvalid naming a known rule. What
// passes must compose, key and rewrite without a throw, and the opt-in portable rewrite must
// really leave nothing a Windows-legal store refuses.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "airlock/errors.hpp"
#include "airlock/outputs.hpp"
#include "fuzz_check.hpp"

namespace {

const std::set<std::string, std::less<>> kRules = {
    "empty", "backslash", "absolute", "parent-segment", "empty-segment",
    "control-character", "utf8", "length"};

void check_portable(std::string_view name) {
  const std::string portable = airlock::portable_name(name);
  FUZZ_CHECK(!portable.empty());
  std::size_t start = 0;
  while (true) {
    const std::size_t slash = portable.find('/', start);
    const std::string_view segment = std::string_view(portable).substr(
        start, slash == std::string::npos ? std::string::npos : slash - start);
    FUZZ_CHECK(!segment.empty());
    FUZZ_CHECK(segment.back() != '.' && segment.back() != ' ');
    for (const char c : segment) {
      FUZZ_CHECK(static_cast<unsigned char>(c) >= 32);
      FUZZ_CHECK(std::string_view("<>:\"|?*").find(c) == std::string_view::npos);
    }
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  // A rewritten name is already portable: rewriting it again changes nothing.
  FUZZ_CHECK(airlock::portable_name(portable) == portable);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view name(reinterpret_cast<const char*>(data), size);
  bool valid = false;
  try {
    airlock::validate_artifact_name(name);
    valid = true;
  } catch (const airlock::ArtifactNameInvalid& refusal) {
    FUZZ_CHECK(kRules.count(refusal.check()) == 1);
  }
  try {
    check_portable(name);
  } catch (const airlock::ArtifactNameInvalid& refusal) {
    // Upper-casing a stem needs valid UTF-8; anything else passing here is a defect.
    FUZZ_CHECK(refusal.check() == "utf8");
    FUZZ_CHECK(!valid);
  }
  if (!valid) {
    // Invalid names still must not crash the key and composition paths.
    try {
      (void)airlock::artifact_collision_key(name);
    } catch (const airlock::ArtifactNameInvalid&) {
    }
    return 0;
  }
  const std::string composed = airlock::nfc_compose(name);
  FUZZ_CHECK(airlock::nfc_compose(composed) == composed);  // NFC is stable
  // Composition never changes the key two names collide on.
  FUZZ_CHECK(airlock::artifact_collision_key(name) == airlock::artifact_collision_key(composed));
  return 0;
}
