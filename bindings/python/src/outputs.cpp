// Declared outputs and sinks. A sink is either ours (make_file_system_sink: a guarantee that
// nothing lands outside its root) or a Python callable; a Python sink is called with the GIL
// taken on whatever thread collects, and its exception propagates unchanged.
#include "airlock/outputs.hpp"

#include <pybind11/stl.h>

#include <filesystem>

#include "airlock/sinks.hpp"
#include "bindings.hpp"
#include "convert.hpp"
#include "errors.hpp"
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

namespace {

// Declared outputs handed in from Python: DeclaredOutput records only, so a name has already
// crossed as text (a lone surrogate is refused where the record is built).
std::vector<DeclaredOutput> declared_outputs_from_python(py::handle values, const char* what) {
  if (py::isinstance<py::str>(values) || !py::isinstance<py::iterable>(values)) {
    throw py::type_error(std::string(what) + ": expected a collection of DeclaredOutput");
  }
  std::vector<DeclaredOutput> outputs;
  std::size_t index = 0;
  for (py::handle value : values) {
    if (!py::isinstance<DeclaredOutput>(value)) {
      throw py::type_error(std::string(what) + "[" + std::to_string(index) +
                           "]: expected a DeclaredOutput, got " + type_name_of(value));
    }
    outputs.push_back(value.cast<DeclaredOutput>());
    ++index;
  }
  return outputs;
}

template <typename Items>
py::tuple as_tuple(const Items& items) {
  py::tuple out(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) out[i] = py::cast(items[i]);
  return out;
}

// A display callable's answer must be text: anything else is the host's bug, said as such.
std::string display_text(const py::object& shown) {
  if (!py::isinstance<py::str>(shown)) {
    throw py::type_error("a file-system sink's display must return a str, got " +
                         type_name_of(shown));
  }
  return utf8_text(shown, "display");
}

}  // namespace

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
      [](py::handle root, bool create_root, bool fsync, py::handle normalization,
         py::object display) {
        // Any path-like root, as the reference takes; the display callable is handed the
        // destination as a pathlib.Path.
        const std::string root_path =
            utf8_text(py::module_::import("os").attr("fspath")(root), "root");
        FileSystemSinkOptions options;
        options.create_root = create_root;
        options.fsync = fsync;
        options.normalization =
            parse_name_normalization(enum_text(normalization, "normalization"), "normalization");
        if (!display.is_none()) {
          if (!PyCallable_Check(display.ptr()))
            throw py::type_error("display: expected a callable");
          auto held = hold(std::move(display));
          options.display = [held](const Artifact& artifact,
                                   const std::filesystem::path& destination) {
            py::gil_scoped_acquire gil;
            py::object path = py::module_::import("pathlib").attr("Path")(destination.string());
            return display_text(held->get()(artifact, path));
          };
        }
        py::gil_scoped_release release;
        return make_file_system_sink(root_path, std::move(options));
      },
      py::arg("root"), py::kw_only(), py::arg("create_root") = false, py::arg("fsync") = false,
      py::arg("normalization") = py::str("nfc"), py::arg("display") = py::none(),
      "A sink that lands artifacts under root and nowhere else: every path is resolved beneath "
      "a held directory with openat2, so no link planted or raced into the tree carries a write "
      "out, and a name resolving outside the root is refused (SandboxLandingNotConfined). The "
      "default display is \"{name} ({n} bytes)\"; an existing file is replaced.");

  module.def(
      "collect_outputs",
      [](Sandbox& sandbox, py::handle spec, const OutputSink* sink, py::handle outputs,
         py::handle call_time_outputs) {
        if (!call_time_outputs.is_none() && !outputs.is_none()) {
          throw py::type_error(
              "collect_outputs: give the call-time outputs once (outputs= or call_time_outputs=)");
        }
        const py::handle named = outputs.is_none() ? call_time_outputs : outputs;
        std::vector<DeclaredOutput> call_time;
        if (!named.is_none()) call_time = declared_outputs_from_python(named, "outputs");
        const SandboxSpec parsed = spec_from_python(spec);
        std::vector<LandedArtifact> landed;
        {
          py::gil_scoped_release release;
          landed = collect_outputs(sandbox, parsed, sink, std::move(call_time));
        }
        return as_tuple(landed);
      },
      py::arg("sandbox"), py::arg("spec"), py::arg("sink") = nullptr,
      py::arg("outputs") = py::none(), py::kw_only(), py::arg("call_time_outputs") = py::none(),
      "Pull the spec's declared outputs (and those named at call time, `outputs`) out under "
      "caps and land them: nothing is delivered until everything is validated, stat-ed, capped "
      "and read. Returns a tuple of LandedArtifact, in declaration order.");

  module.def(
      "landing_outputs",
      [](py::handle spec) { return as_tuple(landing_outputs(spec_from_python(spec))); },
      py::arg("spec"), "The `land` subset of spec.declared_outputs, as a tuple.");
  module.def(
      "spec_lands_artifacts",
      [](py::handle spec) { return spec_lands_artifacts(spec_from_python(spec)); }, py::arg("spec"),
      "Whether the spec lands anything: a `land` declared output, or outputs_named_at_call_time.");
  module.def(
      "missing_sink_refusal",
      [](py::handle spec, py::handle landing, const std::string& asked_by) {
        return to_python_error(missing_sink_refusal(
            spec_from_python(spec), declared_outputs_from_python(landing, "landing"), asked_by));
      },
      py::arg("spec"), py::arg("landing"), py::kw_only(), py::arg("asked_by"),
      "The SandboxOutputSinkRequired a caller raises when something lands and there is no sink "
      "— returned, not raised, so every caller shares one wording.");
  module.attr("MAX_ARTIFACT_NAME_BYTES") = kMaxArtifactNameBytes;

  // Names cross with their lone surrogates passed through as bytes, so the C++ rules refuse
  // them by name (SandboxArtifactNameInvalid, rule "utf8") in the reference's rule order.
  module.def(
      "validate_artifact_name",
      [](py::handle name) { validate_artifact_name(name_bytes(name, "name")); }, py::arg("name"));
  module.def(
      "nfc_compose", [](py::handle name) { return nfc_compose(name_bytes(name, "name")); },
      py::arg("name"));
  module.def(
      "artifact_collision_key",
      [](py::handle name) { return artifact_collision_key(name_bytes(name, "name")); },
      py::arg("name"));
  module.def(
      "portable_name", [](py::handle name) { return portable_name(name_bytes(name, "name")); },
      py::arg("name"));
}

}  // namespace airlock::python
