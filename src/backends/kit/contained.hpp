// One policy for the failures a backend cannot raise: dispose, dispose_kind, dispose_scope and
// purge are noexcept (the router calls them while it unwinds), so a failure there is logged as
// a warning naming the backend, what it was doing and why — never swallowed in silence — and
// the operation answers its "not done" value. The caller's next purge finds what was left.
#pragma once

#include <spdlog/spdlog.h>

#include <exception>
#include <string_view>
#include <utility>

#include "airlock/errors.hpp"

namespace airlock::backend_kit {

// Runs `body`; on any exception logs "<backend>: <operation> failed: <detail>" and returns
// `on_failure`.
template <typename Result, typename Body>
Result contained(std::string_view backend, std::string_view operation, Result on_failure,
                 Body&& body) noexcept {
  try {
    return std::forward<Body>(body)();
  } catch (const std::exception& error) {
    try {
      spdlog::warn("{}: {} failed: {}", backend, operation, error_detail(error));
    } catch (...) {
    }
  } catch (...) {
    try {
      spdlog::warn("{}: {} failed with an exception that is not a std::exception", backend,
                   operation);
    } catch (...) {
    }
  }
  return on_failure;
}

// The same for an operation that answers nothing.
template <typename Body>
void contained(std::string_view backend, std::string_view operation, Body&& body) noexcept {
  (void)contained(backend, operation, true, [&] {
    std::forward<Body>(body)();
    return true;
  });
}

}  // namespace airlock::backend_kit
