// Commands crossing from Python.
#pragma once

#include <pybind11/pybind11.h>

#include "airlock/sandbox.hpp"

namespace airlock::python {

namespace py = pybind11;

// A str is a shell line (`sh -c`); a list or tuple of str is an argv that reaches execve
// unchanged. TypeError for anything else.
Command command_from_python(py::handle command);

}  // namespace airlock::python
