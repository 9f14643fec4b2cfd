// airlock._airlock_testing: the in-process `testing` backend in a Python process, for tests.
//
// The backend's objects are linked into this extension alone (never into airlock._airlock or
// libairlock), and register the "testing" type with libairlock's factory when the extension is
// loaded — which only `import airlock.testing` does. A process that never imports it cannot
// build a router over the fake, whatever its configuration says.
#include <pybind11/pybind11.h>

PYBIND11_MODULE(_airlock_testing, module) {
  module.doc() =
      "The in-process `testing` backend (a policy fixture with no boundary), registered with "
      "the router's backend factory by loading this extension. Tests only: import airlock.testing.";
  module.attr("BACKEND_TYPE") = "testing";
}
