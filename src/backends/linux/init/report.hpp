// airlock-init's status channel to the library (descriptor 4): the init's pid, then "ready" or
// the step that failed with its errno. A failed step ends the process: a sandbox is either
// fully built or not at all.
#pragma once

#include <string>

namespace airlock::linux_backend::init {

void report_init_pid(long pid) noexcept;
void report_ready() noexcept;
// Marks the end of one step of the start (StatusKind::step), timed now.
void report_step(const char* name) noexcept;
[[noreturn]] void fail(const std::string& step, int error_number) noexcept;
// Closes the status channel in this process (the library sees end of stream once every holder
// has closed it).
void close_status() noexcept;

}  // namespace airlock::linux_backend::init
