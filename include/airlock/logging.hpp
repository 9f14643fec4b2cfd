// Where libairlock's own log lines go.
//
// The library logs through spdlog's default logger, and spdlog's built-in default writes to
// stdout. A host's stdout is the host's (a CLI's JSON answer, a protocol on a pipe, a program's
// output a parent parses), so a warning from the library must never land there. When libairlock
// is loaded and the default logger is still spdlog's built-in one, it is replaced by a logger
// that writes the same lines, at the same level, to stderr.
//
// A host that installs a default logger of its own (spdlog::set_default_logger) keeps it:
// installed before libairlock loads, it is not spdlog's built-in one and is left alone;
// installed after, it simply replaces ours.
#pragma once

namespace airlock {

// Runs once when libairlock loads; callable again (idempotent). True when it replaced spdlog's
// built-in stdout logger; false when the default logger was anything else and was left alone.
bool use_stderr_for_library_logs() noexcept;

}  // namespace airlock
