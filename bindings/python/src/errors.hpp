// Translating airlock's C++ errors into the Python classes of airlock/errors.py.
#pragma once

#include <pybind11/pybind11.h>

#include "airlock/errors.hpp"

namespace airlock::python {

namespace py = pybind11;

// The airlock.errors class name the error's dynamic type maps to (most-derived first).
const char* python_class_name(const Error& error);
// An instance of that class carrying the message, type, check and every typed field.
py::object to_python_error(const Error& error);
// Registers the translator: every airlock::Error leaving a binding becomes its Python class.
void register_error_translator();

}  // namespace airlock::python
