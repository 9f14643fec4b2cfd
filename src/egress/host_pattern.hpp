// Host patterns of an allowlist: the seeds' case-insensitive shell-style wildcards.
#pragma once

#include <string>
#include <string_view>

namespace airlock::egress {

// The longest pattern accepted; far above any real host name (253) with wildcards.
inline constexpr std::size_t kMaxPatternLength = 1024;

// Checks one pattern and returns its canonical form (lowercase, one trailing dot dropped).
// Refuses (InvalidArgument, naming `what`) an empty pattern, one longer than
// kMaxPatternLength, and one with a character that cannot occur in a host or a wildcard:
// allowed are letters, digits, `.-_:` and the wildcard characters `*?[]!` — and a pattern with
// exactly one ':' is refused, because it names a port (ports are `allowed_ports`).
std::string normalise_host_pattern(std::string_view pattern, std::string_view what);

// fnmatch semantics over canonical (lowercase) text: `*` matches any run including dots and the
// empty run, `?` one character, `[set]` / `[!set]` one character of / not of the set (ranges
// `a-z`; a `]` first in the set is literal; a `[` without a closing `]` is literal).
bool host_matches(std::string_view pattern, std::string_view host) noexcept;

}  // namespace airlock::egress
