// Host-tool registries crossing from Python.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>

#include "airlock/host_tools.hpp"

namespace airlock::python {

namespace py = pybind11;

// The registry behind an airlock.HostToolRegistry; nullptr for None; TypeError otherwise.
std::shared_ptr<HostToolRegistry> registry_from_python(py::handle value);

}  // namespace airlock::python
