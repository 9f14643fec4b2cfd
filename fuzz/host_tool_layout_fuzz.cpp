// The run layout of the host-tool transport, from a run directory and a program name: anything
// accepted must give paths that all sit inside the run directory, with the program and the
// transport's files beside each other and the work directory apart from them — the layout is
// what keeps a model-named file from being imported in place of the shim.
//
// Input: "<run directory>\n<program name>".
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "airlock/errors.hpp"
#include "airlock/host_tool_transport.hpp"
#include "airlock/paths.hpp"
#include "fuzz_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t newline = input.find('\n');
  const std::string_view directory = input.substr(0, newline);
  const std::string_view program =
      newline == std::string_view::npos ? "program.py" : input.substr(newline + 1);
  airlock::GuestRunLayout layout;
  try {
    layout = airlock::guest_run_layout(directory, program);
  } catch (const airlock::InvalidArgument&) {
    return 0;
  }
  FUZZ_CHECK(layout.directory != "/");
  const std::string tools = layout.directory + "/host_tools";
  for (const std::string* path : {&layout.program, &layout.shim, &layout.launcher, &layout.calls,
                                  &layout.output, &layout.exit_code, &layout.pid,
                                  &layout.session}) {
    const auto relative = airlock::guest_path_relative_to(*path, tools);
    FUZZ_CHECK(relative && !relative->empty() && relative->find('/') == std::string::npos);
  }
  FUZZ_CHECK(airlock::guest_path_relative_to(layout.work, layout.directory) == "work");
  FUZZ_CHECK(layout.program != layout.shim && layout.program != layout.launcher);
  // A program that passes is never the shim under another spelling.
  FUZZ_CHECK(airlock::normalize_guest_path(layout.program) == layout.program);
  return 0;
}
