// The one table of how every airlock error travels: its wire name, its C++ class, its base, the
// daemon's HTTP status, the CLI's exit code and the Python class it becomes.
//
// The daemon (src/daemon/http_errors.cpp), the Python module (bindings/python) and the CLI take
// their answers from here, and tests hold the table against the classes of errors.hpp, the
// Python classes of airlock/errors.py and the error types docs/api/openapi.yaml lists, so a class
// missing from any of them fails the build's tests rather than surfacing as a 500 or a bare
// AirlockError.
#pragma once

#include <exception>
#include <span>
#include <string>
#include <string_view>

#include "airlock/errors.hpp"

namespace airlock {

struct ErrorKind {
  // The stable name on every wire (Error::type(), the JSON "type").
  std::string_view type;
  // The C++ class that carries it ("airlock::QueuedTimeout"); the daemon's own HTTP refusals
  // are all `airlock::daemon::HttpError`.
  std::string_view cpp_class;
  // The wire name of the kind it specialises; empty only for the root, "Error".
  std::string_view parent;
  // The daemon's status for it. Two kinds refine theirs by what they carry: a FileRefused by its
  // refusal, a plain SystemError by its errno (docs/daemon.md has both).
  int http_status;
  // The `airlock` CLI's exit code when the error ends a command (124 timeouts, 125 the rest).
  int exit_code;
  // The class of airlock.errors it becomes; empty for the daemon's own HTTP refusals, which a
  // Python host never meets.
  std::string_view python_class;
  // Whether an error of this kind can be raised and so appear on a wire. The abstract bases
  // (RouterRefusal, OutputError) cannot; a host catches them.
  bool concrete;
  // True when `error` is of this kind or one derived from it (a dynamic_cast); null for the
  // daemon's HTTP refusals, which share one class and differ by type only.
  bool (*is)(const std::exception& error) noexcept;
  // Throws an example of the kind: fixed fields, `message` as its message. Null for abstract
  // kinds and the daemon's. Tests and the Python module's `_raise_error` use it.
  void (*raise_example)(const std::string& message);
};

// Every kind, bases before the kinds derived from them.
std::span<const ErrorKind> error_kinds() noexcept;

// The kind with this wire name, or null.
const ErrorKind* find_error_kind(std::string_view type) noexcept;

// The kind of `error`: by its wire name, else the most derived kind whose class it is an
// instance of (an error built with a type string of its own), else the root.
const ErrorKind& error_kind_of(const Error& error) noexcept;

}  // namespace airlock
