// Conformance suites from Python: the same probes the CLI runs, against a sandboxed acquired
// through any router, with results as dicts (one per probe) so a host's own test runner can
// assert on them.
#include "airlock/conformance.hpp"

#include <pybind11/stl.h>

#include "bindings.hpp"
#include "convert.hpp"

namespace airlock::python {
namespace {

using namespace airlock::conformance;

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
    out.append(item);
  }
  return out;
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

  module.def(
      "run_conformance",
      [](Sandbox& sandbox, const std::string& suite, const std::string& working_directory,
         py::handle capabilities, py::handle exec_timeout, std::optional<std::string> allowed_url,
         std::optional<std::string> denied_url, bool raise_on_failure) {
        const CapabilitySet declared = enum_set<Capability>(
            capabilities, "capabilities", [](const std::string& text, std::string_view what) {
              return parse_capability(text, what);
            });
        const auto timeout = seconds_to_milliseconds(exec_timeout, "exec_timeout");
        if (suite == "egress" && (!allowed_url || !denied_url)) {
          throw InvalidArgument("the egress suite needs allowed_url and denied_url", "suite");
        }
        std::vector<ProbeResult> results;
        {
          py::gil_scoped_release release;
          PosixGuestSubject subject(sandbox, working_directory, declared, timeout);
          if (suite == "files_out") {
            results = run_files_out_conformance(subject);
          } else if (suite == "files_in") {
            results = run_files_in_conformance(subject);
          } else if (suite == "exec") {
            results = run_exec_conformance(subject);
          } else if (suite == "files_delete") {
            results = run_files_delete_conformance(subject);
          } else if (suite == "egress") {
            results = run_egress_conformance(subject, *allowed_url, *denied_url, timeout);
          } else {
            throw InvalidArgument("suite: unknown suite \"" + suite +
                                      "\"; known: egress, exec, files_delete, files_in, files_out",
                                  "suite");
          }
          if (raise_on_failure) assert_passed(results);
        }
        return results_to_python(results);
      },
      py::arg("sandbox"), py::arg("suite"), py::kw_only(), py::arg("working_directory"),
      py::arg("capabilities"), py::arg("exec_timeout") = 60, py::arg("allowed_url") = py::none(),
      py::arg("denied_url") = py::none(), py::arg("raise_on_failure") = false,
      "Run one suite (files_out, files_in, exec, files_delete, egress) against a sandbox. "
      "`capabilities` are what its backend really declares: a suite whose gate is missing is "
      "refused (InvalidArgument), never run green on nothing. Run exec last: it may destroy the "
      "sandbox. With raise_on_failure, failed probes raise ConformanceFailure.");
}

}  // namespace airlock::python
