// Byte sizes on the command line, as docker's flags take them: `512m`, `2g`, `64k`, `1.5GiB`.
//
// A size is a decimal number (a fraction only with a unit) and an optional unit: b, k, m, g, t —
// powers of 1024, case-insensitive, optionally followed by `b` or `ib` (so `m`, `mb`, `mib` and
// `MiB` are all 2^20). A fraction is floored to whole bytes. Anything else — an unknown unit,
// a sign, spaces, a value past 2^64 − 1 — is refused by name with an example.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace airlock::cli {

// InvalidArgument naming `flag` ("--memory: '12x' is not a size; use e.g. 512m or 2g").
std::uint64_t parse_size(std::string_view text, std::string_view flag);

// `--name SIZE` into `target`, parsed when the flag is read.
CLI::Option* add_size_option(CLI::App& app, const std::string& name,
                             std::optional<std::uint64_t>& target, const std::string& description);
CLI::Option* add_size_option(CLI::App& app, const std::string& name, std::uint64_t& target,
                             const std::string& description);

}  // namespace airlock::cli
