#include "backends/testing/emulator.hpp"

namespace airlock::testing {

std::optional<ExecResult> InProcessSandbox::Emulator::run(const Command&, const ExecOptions&) {
  return std::nullopt;
}

}  // namespace airlock::testing
