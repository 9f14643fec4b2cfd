// airlock._airlock: the C++ core for Python hosts. The package `airlock` (airlock/__init__.py)
// is the public face; this module is its engine and is not meant to be imported directly.
//
// The GIL rule, everywhere in this module: it is released around every sandbox, router, output
// and conformance operation (they block on guests and other threads), and taken back only to
// call into Python (host-tool bodies, caller contexts, sinks) — so a host's other threads and
// coroutines run while a guest command does.
#include "bindings.hpp"
#include "errors.hpp"

PYBIND11_MODULE(_airlock, module) {
  using namespace airlock::python;
  module.doc() = "airlock's C++ core (use the `airlock` package)";
  module.attr("__version__") = AIRLOCK_PYTHON_VERSION;  // the project's, from CMakeLists.txt
  register_error_translator();
  bind_vocabulary(module);
  bind_errors(module);
  bind_records(module);
  bind_sandbox(module);
  bind_router(module);
  bind_outputs(module);
  bind_paths(module);
  bind_host_tools(module);
  bind_tool_binding(module);
  bind_conformance(module);
}
