// The engine's no-follow path stat: the base64 JSON in X-Docker-Container-Path-Stat, answered by
// HEAD (and GET) /containers/{id}/archive. The final component is described, not followed (a
// link has the link bit in `mode`); parents are resolved inside the container's root — which is
// why the confinement walk stats every component itself.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "airlock/vocabulary.hpp"

namespace airlock::docker {

struct PathStat {
  std::string name;
  EntryKind kind = EntryKind::other;
  std::uint64_t size = 0;  // meaningful for files only
  std::uint64_t mode = 0;  // Go os.FileMode bits as the engine sent them
};

// Go's os.FileMode type bits → our kinds. Regular = none of the type bits.
EntryKind kind_from_file_mode(std::uint64_t mode) noexcept;

// Decode the header value. nullopt when it is not base64 of a JSON object with a numeric mode:
// the caller refuses rather than guesses.
std::optional<PathStat> decode_path_stat(std::string_view header_value);

}  // namespace airlock::docker
