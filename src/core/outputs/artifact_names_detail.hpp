// Internal helpers shared by the outputs, sinks and artifact-name sources.
#pragma once

#include <string>
#include <string_view>

namespace airlock::detail {

// `name` quoted for an error message: control bytes and invalid UTF-8 escaped as \xNN, quotes
// and backslashes escaped, long names cut with "…" — so a message stays one line of valid UTF-8
// whatever a guest named its file.
std::string printable_name(std::string_view name);

}  // namespace airlock::detail
