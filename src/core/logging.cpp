#include "airlock/logging.hpp"

#include <spdlog/sinks/ansicolor_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace airlock {
namespace {

// spdlog's registry starts with an unnamed logger over one colour stdout sink. Anything else —
// a name, another sink, more sinks — is a logger a host chose.
bool is_spdlog_builtin_default(const spdlog::logger& logger) {
  if (!logger.name().empty() || logger.sinks().size() != 1) return false;
  return dynamic_cast<const spdlog::sinks::ansicolor_stdout_sink_mt*>(
             logger.sinks().front().get()) != nullptr;
}

}  // namespace

bool use_stderr_for_library_logs() noexcept {
  try {
    const std::shared_ptr<spdlog::logger> current = spdlog::default_logger();
    if (!current || !is_spdlog_builtin_default(*current)) return false;
    auto replacement = std::make_shared<spdlog::logger>(
        "", std::make_shared<spdlog::sinks::ansicolor_stderr_sink_mt>());
    replacement->set_level(current->level());
    replacement->flush_on(current->flush_level());
    spdlog::set_default_logger(std::move(replacement));
    return true;
  } catch (...) {
    // Logging must never stop the library loading; the built-in logger stays.
    return false;
  }
}

namespace {
// At load time, before any of the library's code can log.
[[maybe_unused]] const bool kInstalled = use_stderr_for_library_logs();
}  // namespace

}  // namespace airlock
