// The parts of the `airlock._airlock` module, one function per binding file.
#pragma once

#include <pybind11/pybind11.h>

namespace airlock::python {

namespace py = pybind11;

void bind_vocabulary(py::module_& module);    // records.cpp
void bind_records(py::module_& module);       // records.cpp
void bind_errors(py::module_& module);        // errors.cpp
void bind_sandbox(py::module_& module);       // sandbox.cpp
void bind_router(py::module_& module);        // router.cpp
void bind_outputs(py::module_& module);       // outputs.cpp
void bind_paths(py::module_& module);         // paths.cpp
void bind_host_tools(py::module_& module);    // host_tools.cpp
void bind_tool_binding(py::module_& module);  // tool_binding.cpp (sandboxed_tool, codeact)
void bind_conformance(py::module_& module);   // conformance.cpp

}  // namespace airlock::python
