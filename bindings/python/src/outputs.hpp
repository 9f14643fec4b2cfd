// Sinks crossing from Python.
#pragma once

#include <pybind11/pybind11.h>

#include "airlock/outputs.hpp"

namespace airlock::python {

namespace py = pybind11;

// An OutputSink whose deliver calls `deliver(Artifact) -> LandedArtifact` with the GIL taken.
OutputSink python_sink(py::object deliver, NameNormalization normalization);

}  // namespace airlock::python
