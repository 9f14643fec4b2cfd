// Conformance suites from Python: the same probes the CLI runs, against a sandbox acquired
// through any router, with results as dicts (one per probe) so a host's own test runner can
// assert on them.
#include "airlock/conformance.hpp"

#include <pybind11/stl.h>

#include <set>

#include "bindings.hpp"
#include "convert.hpp"
#include "errors.hpp"
#include "sandbox.hpp"

namespace airlock::python {
namespace {

using namespace airlock::conformance;

constexpr const char* kSuites = "egress, exec, files_delete, files_in, files_out";

py::list results_to_python(const std::vector<ProbeResult>& results) {
  py::list out;
  for (const auto& result : results) {
    py::dict item;
    item["suite"] = result.suite;
    item["probe"] = result.probe;
    item["why"] = result.why;
    item["outcome"] = std::string(to_string(result.outcome));
    item["detail"] = result.detail;
    item["note"] = result.note;
    item["milliseconds"] = result.milliseconds;
    item["reference"] = result.reference;
    item["measured"] = result.measured;
    out.append(item);
  }
  return out;
}

// A subject's capabilities: required for a verdict (its gate is read from them), optional for a
// measurement (which reads no gate; None declares nothing).
CapabilitySet declared_capabilities(py::handle capabilities, bool measure) {
  if (capabilities.is_none()) {
    if (measure) return {};
    throw InvalidArgument(
        "capabilities: required — what the sandbox's backend really declares, which gates the "
        "suite (a measurement, measure=True, reads no gate and may leave it out)",
        "capabilities");
  }
  return enum_set<Capability>(
      capabilities, "capabilities",
      [](const std::string& text, std::string_view what) { return parse_capability(text, what); });
}

// The ConformanceFailure a failed run raises carries the whole run as `.results` (the failures
// alone are `.failures`), so a test can still read what passed and what was skipped.
[[noreturn]] void raise_with_results(const ConformanceFailure& failure,
                                     const std::vector<ProbeResult>& results) {
  py::object instance = to_python_error(failure);
  instance.attr("results") = results_to_python(results);
  instance.attr("total") = py::int_(failure.total());
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(instance.ptr())), instance.ptr());
  throw py::error_already_set();
}

py::list run_from_python(Sandbox& sandbox, const std::string& suite,
                         py::handle working_directory, py::handle capabilities,
                         py::handle exec_timeout, const std::optional<std::string>& allowed_url,
                         const std::optional<std::string>& denied_url, bool raise_on_failure,
                         bool measure) {
  if (measure && raise_on_failure) {
    throw InvalidArgument(
        "measure and raise_on_failure contradict each other: a measurement carries no verdict",
        "measure");
  }
  const std::string directory = working_directory_or_default(sandbox, working_directory);
  const CapabilitySet declared = declared_capabilities(capabilities, measure);
  const auto timeout = seconds_to_milliseconds(exec_timeout, "exec_timeout");
  if (suite == "egress" && (!allowed_url || !denied_url)) {
    throw InvalidArgument("the egress suite needs allowed_url and denied_url", "suite");
  }
  static const std::set<std::string> known = {"egress", "exec", "files_delete", "files_in",
                                              "files_out"};
  if (!known.contains(suite)) {
    throw InvalidArgument("suite: unknown suite \"" + suite + "\"; known: " + kSuites, "suite");
  }
  RunOptions options;
  options.measure = measure;
  options.allowed_url = allowed_url.value_or("");
  options.denied_url = denied_url.value_or("");
  options.egress_exec_timeout = timeout;
  std::vector<ProbeResult> results;
  {
    py::gil_scoped_release release;
    PosixGuestSubject subject(sandbox, directory, declared, timeout);
    results = airlock::conformance::run_conformance(subject, suite, options);
  }
  if (raise_on_failure) {
    try {
      assert_passed(results);
    } catch (const ConformanceFailure& failure) {
      raise_with_results(failure, results);
    }
  }
  return results_to_python(results);
}

}  // namespace

void bind_conformance(py::module_& module) {
  module.def("describe_probes", [] {
    py::list out;
    for (const auto& probe : describe_probes()) {
      py::dict item;
      item["suite"] = probe.suite;
      item["probe"] = probe.probe;
      item["why"] = probe.why;
      item["needs"] = to_python(probe.needs);
      item["reference"] = probe.reference;
      out.append(item);
    }
    return out;
  });

  module.def("run_conformance", &run_from_python, py::arg("sandbox"), py::arg("suite"),
             py::kw_only(), py::arg("working_directory") = py::none(),
             py::arg("capabilities") = py::none(),
             py::arg("exec_timeout") = 60, py::arg("allowed_url") = py::none(),
             py::arg("denied_url") = py::none(), py::arg("raise_on_failure") = false,
             py::arg("measure") = false,
             "Run one suite (files_out, files_in, exec, files_delete, egress) against a sandbox. "
             "`capabilities` are what its backend really declares: a suite whose gate is missing "
             "is refused (InvalidArgument), never run green on nothing, and a probe needing "
             "another undeclared capability is skipped. Run exec last: it may destroy the "
             "sandbox. With raise_on_failure, failed probes raise ConformanceFailure carrying "
             "`.results` (every probe) and `.failures`. With measure, no gate is read and "
             "nothing is skipped: every probe runs and reports, marked `measured`, and nothing "
             "raises.");

  module.def(
      "measure_files_delete_probes",
      [](Sandbox& sandbox, py::handle working_directory, py::handle capabilities,
         py::handle exec_timeout) {
        return run_from_python(sandbox, "files_delete", working_directory, capabilities,
                               exec_timeout, std::nullopt, std::nullopt, false, true);
      },
      py::arg("sandbox"), py::kw_only(), py::arg("working_directory") = py::none(),
      py::arg("capabilities") = py::none(), py::arg("exec_timeout") = 60,
      "The files_delete probes with no gate, no skips, no planting and no verdict: a removal "
      "mechanism measured before its capability is declared. Never raises ConformanceFailure.");
}

}  // namespace airlock::python
