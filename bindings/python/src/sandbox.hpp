// Commands crossing from Python, and what a handle remembers of where it came from.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "airlock/records.hpp"
#include "airlock/router.hpp"
#include "airlock/sandbox.hpp"

namespace airlock::python {

namespace py = pybind11;

// A str is a shell line (`sh -c`); a list or tuple of str is an argv that reaches execve
// unchanged. TypeError for anything else.
Command command_from_python(py::handle command);

// Where a sandbox handed to Python came from: the work dir of the spec it was first acquired
// with (what a path method defaults its working directory to), and the router that can dispose
// it (null for a tool call's sandbox, which the call's own lifecycle disposes). Remembered per
// live instance; a later acquire of the same instance with another spec changes nothing, as the
// backend keeps the spec it created the instance with.
void remember_origin(const std::shared_ptr<Sandbox>& sandbox, const SandboxSpec& spec,
                     const std::shared_ptr<SandboxRouter>& router);

// `working_directory` when it is a str; when it is None, the work dir of the spec the sandbox
// was acquired with. TypeError when None and the sandbox was not acquired through the router
// or a tool call (there is no spec to default from).
std::string working_directory_or_default(const Sandbox& sandbox, py::handle working_directory);

}  // namespace airlock::python
