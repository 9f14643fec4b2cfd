// Declared outputs and sinks. A sink is either ours (make_file_system_sink: a guarantee that
// nothing lands outside its root) or a Python callable; a Python sink is called with the GIL
// taken on whatever thread collects, and its exception propagates unchanged.
#include "airlock/outputs.hpp"

#include <pybind11/stl.h>

#include <filesystem>

#include "airlock/sinks.hpp"
#include "bindings.hpp"
#include "convert.hpp"
#include "outputs.hpp"
#include "records.hpp"

namespace airlock::python {

OutputSink python_sink(py::object deliver, NameNormalization normalization) {
  if (!PyCallable_Check(deliver.ptr())) throw py::type_error("deliver: expected a callable");
  auto held = hold(std::move(deliver));
  OutputSink sink;
  sink.normalization = normalization;
  sink.deliver = [held](const Artifact& artifact) {
    py::gil_scoped_acquire gil;
    py::object landed = held->get()(artifact);
    if (!py::isinstance<LandedArtifact>(landed)) {
      throw py::type_error("a sink's deliver must return a LandedArtifact");
    }
    return landed.cast<LandedArtifact>();
  };
  return sink;
}

void bind_outputs(py::module_& module) {
  py::class_<OutputSink>(module, "OutputSink",
                         "Where landing artifacts go: deliver(Artifact) -> LandedArtifact, "
                         "refusing by raising.")
      .def(py::init([](py::object deliver, py::handle normalization) {
             return python_sink(std::move(deliver),
                                parse_name_normalization(enum_text(normalization, "normalization"),
                                                         "normalization"));
           }),
           py::arg("deliver"), py::arg("normalization") = py::str("nfc"))
      .def_property_readonly("normalization",
                             [](const OutputSink& sink) { return to_python(sink.normalization); })
      .def(
          "deliver",
          [](const OutputSink& sink, const Artifact& artifact) {
            py::gil_scoped_release release;
            return sink.deliver(artifact);
          },
          py::arg("artifact"));

  module.def(
      "make_file_system_sink",
      [](const std::string& root, bool create_root, bool fsync, py::handle normalization,
         py::object display) {
        FileSystemSinkOptions options;
        options.create_root = create_root;
        options.fsync = fsync;
        options.normalization =
            parse_name_normalization(enum_text(normalization, "normalization"), "normalization");
        if (!display.is_none()) {
          auto held = hold(std::move(display));
          options.display = [held](const Artifact& artifact,
                                   const std::filesystem::path& destination) {
            py::gil_scoped_acquire gil;
            return held->get()(artifact, destination.string()).cast<std::string>();
          };
        }
        py::gil_scoped_release release;
        return make_file_system_sink(root, std::move(options));
      },
      py::arg("root"), py::kw_only(), py::arg("create_root") = false, py::arg("fsync") = false,
      py::arg("normalization") = py::str("nfc"), py::arg("display") = py::none(),
      "A sink that lands artifacts under root and nowhere else: every path is resolved beneath "
      "a held directory with openat2, so no link planted or raced into the tree carries a write "
      "out (SandboxLandingNotConfined).");

  module.def(
      "collect_outputs",
      [](Sandbox& sandbox, py::handle spec, const OutputSink* sink,
         std::vector<DeclaredOutput> call_time_outputs) {
        const SandboxSpec parsed = spec_from_python(spec);
        py::gil_scoped_release release;
        return collect_outputs(sandbox, parsed, sink, std::move(call_time_outputs));
      },
      py::arg("sandbox"), py::arg("spec"), py::arg("sink") = nullptr,
      py::arg("call_time_outputs") = std::vector<DeclaredOutput>{},
      "Pull the spec's declared outputs (and call-time ones) out under caps and land them: "
      "nothing is delivered until everything is validated, stat-ed, capped and read.");

  module.def(
      "validate_artifact_name", [](const std::string& name) { validate_artifact_name(name); },
      py::arg("name"));
  module.def("nfc_compose", &nfc_compose, py::arg("name"));
  module.def("artifact_collision_key", &artifact_collision_key, py::arg("name"));
  module.def("portable_name", &portable_name, py::arg("name"));
}

}  // namespace airlock::python
