// The in-process sandbox's command emulator: a small POSIX vocabulary over the in-memory
// filesystem (see airlock/testing.hpp for the list).
#pragma once

#include <optional>

#include "airlock/testing.hpp"

namespace airlock::testing {

class InProcessSandbox::Emulator {
 public:
  explicit Emulator(InProcessSandbox& sandbox) : sandbox_(sandbox) {}
  // nullopt when the command is outside the emulated vocabulary (the scripted answer applies).
  std::optional<ExecResult> run(const Command& command, const ExecOptions& options);

 private:
  InProcessSandbox& sandbox_;
};

}  // namespace airlock::testing
