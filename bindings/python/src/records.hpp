// Records crossing from Python: a spec or key given as our record or as plain data.
#pragma once

#include <pybind11/pybind11.h>

#include "airlock/records.hpp"

namespace airlock::python {

namespace py = pybind11;

// A SandboxSpec, or a dict of its fields (validated like SandboxSpec(**fields)).
SandboxSpec spec_from_python(py::handle value);
// A SandboxKey, or a (scope, thread_id, agent_dir) tuple.
SandboxKey key_from_python(py::handle value);

}  // namespace airlock::python
