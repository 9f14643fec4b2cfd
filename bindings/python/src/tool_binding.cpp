// sandboxed_tool and the codeact kind for Python hosts.
//
// A host wraps the returned SandboxTool in its framework's own tool type (MAF, Deep Agents): the
// binding reads the key from the host's callables on every call, answers the sandbox ladder's
// failures with fixed sentences, reclaims the call's guest path however the call ends, and
// offers the information-flow declarations as a dict.
//
// The tool's body is a Python callable `body(call, arguments) -> str`. An exception it raises
// reaches the caller of `invoke` unchanged, after the call was cleaned up. Python's
// cancellations (a BaseException that is not an Exception: CancelledError, KeyboardInterrupt,
// SystemExit) cross the C++ core as a `PythonCancellation`, which the core treats as one (a
// shorter reclaim bound after a cancelled body; a cancelled `on_reclaim_failure` propagates),
// and are raised again unchanged on the way out. `call` is the call's own handle: once the body
// has returned, its methods raise RuntimeError.
#include "airlock/tool_binding.hpp"

#include <pybind11/stl.h>

#include <stdexcept>

#include "airlock/kinds/codeact.hpp"
#include "bindings.hpp"
#include "convert.hpp"
#include "host_tools.hpp"
#include "records.hpp"
#include "sandbox.hpp"

namespace airlock::python {
namespace {

namespace codeact = kinds::codeact;

// Not a std::exception on purpose: the core reads anything else as a cancellation.
struct PythonCancellation {
  py::error_already_set error;
};

// A Python exception raised by a host callable, on its way through the core: an Exception
// travels as itself (pybind11 raises it again unchanged at the boundary); a cancellation as a
// PythonCancellation.
[[noreturn]] void propagate(py::error_already_set& error) {
  if (!error.matches(PyExc_Exception)) throw PythonCancellation{std::move(error)};
  throw;
}

// For a host object the codeact kind maps to its own sentences (a file store): an Exception
// becomes a C++ exception carrying its text (for the log), made while the GIL is held; a
// cancellation still propagates.
[[noreturn]] void rethrow_as_cpp(py::error_already_set& error) {
  if (!error.matches(PyExc_Exception)) throw PythonCancellation{std::move(error)};
  throw std::runtime_error(describe_python_error(error));
}

template <typename Result>
std::function<Result()> python_thunk(py::object function) {
  auto held = hold(std::move(function));
  return [held]() -> Result {
    py::gil_scoped_acquire gil;
    try {
      return held->get()().template cast<Result>();
    } catch (py::error_already_set& error) {
      propagate(error);
    }
  };
}

py::object required_attribute(py::handle object, const char* name) {
  if (!py::hasattr(object, name)) {
    throw py::type_error(std::string("context: missing '") + name + "'");
  }
  return object.attr(name);
}

// The host's CallerContext (any object with current_scope, current_thread_id and optionally
// list_files): the callables are captured, and called on every call.
CallerContext context_from_python(py::handle context) {
  CallerContext out;
  py::object scope = required_attribute(context, "current_scope");
  py::object thread = required_attribute(context, "current_thread_id");
  if (!PyCallable_Check(scope.ptr()) || !PyCallable_Check(thread.ptr())) {
    throw py::type_error("context: current_scope and current_thread_id must be callables");
  }
  out.current_scope = python_thunk<std::string>(scope);
  out.current_thread_id = python_thunk<std::optional<std::string>>(thread);
  if (py::hasattr(context, "list_files") && !context.attr("list_files").is_none()) {
    auto held = hold(context.attr("list_files"));
    out.list_files = [held](const std::string& store) {
      py::gil_scoped_acquire gil;
      try {
        return held->get()(store).cast<std::vector<std::string>>();
      } catch (py::error_already_set& error) {
        // The listing's refusal sentence quotes str(exc), as the reference's does.
        if (!error.matches(PyExc_Exception)) throw PythonCancellation{std::move(error)};
        throw std::runtime_error(py::str(error.value()).cast<std::string>());
      }
    };
  }
  return out;
}

std::function<void(const ReclaimFailure&)> reclaim_hook(py::object hook) {
  if (hook.is_none()) return {};
  if (!PyCallable_Check(hook.ptr())) {
    throw py::type_error("on_reclaim_failure: expected a callable");
  }
  auto held = hold(std::move(hook));
  return [held](const ReclaimFailure& failure) {
    py::gil_scoped_acquire gil;
    try {
      held->get()(failure);
    } catch (py::error_already_set& error) {
      propagate(error);
    }
  };
}

ApprovalMode approval_mode(const std::string& text) {
  if (text == "never_require") return ApprovalMode::never_require;
  if (text == "always_require") return ApprovalMode::always_require;
  throw InvalidArgument(
      "approval_mode: unknown value \"" + text + "\"; allowed: never_require, always_require",
      "approval_mode");
}

// A timeout whose *value* is wrong reaches the attach gate as non-positive, so the gate refuses
// it at its own step, after the checks the reference runs first; a wrong type is refused here.
Milliseconds gate_checked_seconds(py::handle seconds, std::string_view what) {
  try {
    return seconds_to_milliseconds(seconds, what);
  } catch (const InvalidArgument&) {
    return Milliseconds(-1);
  }
}

// The Python face of one call: the core's handle (alive as long as this is) and the sink object
// the host gave, returned as itself.
struct ToolCallHandle {
  SandboxToolCall call;
  std::shared_ptr<HeldObject> sink;  // null: no sink
};

struct PythonTool {
  std::shared_ptr<SandboxRouter> router;  // the tool holds a raw pointer to it
  SandboxTool tool;
};

std::string invoke_tool(const PythonTool& tool, const json::Json& arguments) {
  py::gil_scoped_release release;
  return tool.tool.invoke(arguments);
}

class PythonFileStore : public codeact::FileStore {
 public:
  explicit PythonFileStore(py::object store) : store_(hold(std::move(store))) {}
  std::vector<std::string> list() override {
    py::gil_scoped_acquire gil;
    try {
      return store_->get().attr("list")().cast<std::vector<std::string>>();
    } catch (py::error_already_set& error) {
      rethrow_as_cpp(error);
    }
  }
  std::optional<std::string> read(const std::string& name) override {
    py::gil_scoped_acquire gil;
    try {
      py::object content = store_->get().attr("read")(name);
      if (content.is_none()) return std::nullopt;
      return content.cast<std::string>();
    } catch (py::error_already_set& error) {
      rethrow_as_cpp(error);
    }
  }

 private:
  std::shared_ptr<HeldObject> store_;
};

codeact::Outputs codeact_outputs(const std::string& text) {
  if (text == "none") return codeact::Outputs::none;
  if (text == "declared") return codeact::Outputs::declared;
  if (text == "manifest") return codeact::Outputs::manifest;
  throw InvalidArgument(
      "outputs: unknown value \"" + text + "\"; allowed: declared, manifest, none", "outputs");
}

codeact::SpecOptions codeact_spec_options(const py::dict& options) {
  codeact::SpecOptions out;
  for (auto [key, value] : options) {
    const std::string name = py::str(key);
    if (value.is_none()) continue;
    if (name == "image") {
      out.image = value.cast<std::string>();
    } else if (name == "image_id") {
      out.image_id = value.cast<std::string>();
    } else if (name == "outputs") {
      out.outputs = codeact_outputs(enum_text(value, "outputs"));
    } else if (name == "files_in") {
      out.files_in = value.cast<TransferLimits>();
    } else if (name == "files_out") {
      out.files_out = value.cast<TransferLimits>();
    } else if (name == "host_tools") {
      out.host_tools = registry_from_python(value);
    } else if (name == "egress_allow") {
      out.egress_allow = value.cast<std::vector<std::string>>();
    } else if (name == "work_dir") {
      out.work_dir = value.cast<std::string>();
    } else if (name == "resources") {
      // Through the spec parser, so the legs are checked exactly as on every wire.
      json::Json probe = {{"kind", "probe"}, {"resources", to_json_value(value, "resources")}};
      out.resources = json::parse_spec(probe, "codeact").resources();
    } else {
      throw py::type_error("codeact: unknown option '" + name + "'");
    }
  }
  return out;
}

py::object optional_tool(std::shared_ptr<SandboxRouter> router, std::optional<SandboxTool> tool) {
  if (!tool) return py::none();
  return py::cast(std::make_shared<PythonTool>(PythonTool{std::move(router), std::move(*tool)}));
}

}  // namespace

void bind_tool_binding(py::module_& module) {
  py::register_exception_translator([](std::exception_ptr pointer) {
    if (!pointer) return;
    try {
      std::rethrow_exception(pointer);
    } catch (PythonCancellation& cancellation) {
      cancellation.error.restore();
    }
  });

  py::class_<ToolCallHandle, std::shared_ptr<ToolCallHandle>>(
      module, "SandboxToolCall",
      "One call of a sandboxed tool, handed to its body; its methods raise RuntimeError once the "
      "body has returned.")
      .def(
          "key",
          [](ToolCallHandle& handle) -> py::object {
            std::variant<SandboxKey, std::string> key;
            {
              py::gil_scoped_release release;
              key = handle.call.key();
            }
            if (auto* refusal = std::get_if<std::string>(&key)) return py::str(*refusal);
            return py::cast(std::get<SandboxKey>(key));
          },
          "The host's key, read from the context now, or the fixed refusal sentence (a str).")
      .def(
          "acquire",
          [](ToolCallHandle& handle, const SandboxKey& key) -> py::object {
            std::variant<std::shared_ptr<Sandbox>, std::string> acquired;
            {
              py::gil_scoped_release release;
              acquired = handle.call.acquire(key);
            }
            if (auto* refusal = std::get_if<std::string>(&acquired)) return py::str(*refusal);
            const auto& sandbox = std::get<std::shared_ptr<Sandbox>>(acquired);
            remember_origin(sandbox, handle.call.spec(), nullptr);
            return py::cast(sandbox);
          },
          py::arg("key"),
          "Admission + acquire, once per key for the call (another key: its own sandbox); a "
          "Sandbox, or the ladder's fixed sentence.")
      .def(
          "guest_call_path", [](ToolCallHandle& handle) { return handle.call.guest_call_path(); },
          "`<work_dir>/<12 hex>`, fixed for the call, reclaimed in every sandbox it acquired.")
      .def(
          "condemn",
          [](ToolCallHandle& handle, std::optional<SandboxKey> key) {
            if (key) {
              handle.call.condemn(*key);
            } else {
              handle.call.condemn();
            }
          },
          py::arg("key") = py::none(),
          "The command's end is unknown: the sandbox (of `key`, or every one this call acquired) "
          "is deleted once the last call in flight leaves.")
      .def(
          "list_files",
          [](ToolCallHandle& handle, const std::string& store) -> py::object {
            std::variant<std::vector<std::string>, std::string> listing;
            {
              py::gil_scoped_release release;
              listing = handle.call.list_files(store);
            }
            if (auto* refusal = std::get_if<std::string>(&listing)) return py::str(*refusal);
            return py::cast(std::get<std::vector<std::string>>(listing));
          },
          py::arg("store"))
      .def_property_readonly(
          "sink",
          [](const ToolCallHandle& handle) -> py::object {
            return handle.sink ? handle.sink->get() : py::none();
          },
          "The OutputSink given to sandboxed_tool, or None: collect_outputs(sandbox, spec, "
          "call.sink).")
      .def_property_readonly("spec",
                             [](const ToolCallHandle& handle) { return handle.call.spec(); })
      .def_property_readonly("tool_name",
                             [](const ToolCallHandle& handle) { return handle.call.tool_name(); })
      .def_property_readonly("ended",
                             [](const ToolCallHandle& handle) { return handle.call.ended(); });

  py::class_<PythonTool, std::shared_ptr<PythonTool>>(
      module, "SandboxTool",
      "A sandboxed workload as a tool: wrap it in the host framework's own tool type. invoke() "
      "answers the sandbox's failures with fixed sentences; an exception the body raises "
      "propagates, after the call's guest path was reclaimed.")
      .def_property_readonly("name", [](const PythonTool& t) { return t.tool.name(); })
      .def_property_readonly("description",
                             [](const PythonTool& t) { return t.tool.description(); })
      .def_property_readonly("approval_mode",
                             [](const PythonTool& t) {
                               return t.tool.approval_mode() == ApprovalMode::always_require
                                          ? "always_require"
                                          : "never_require";
                             })
      .def_property_readonly("spec", [](const PythonTool& t) { return t.tool.spec(); })
      .def(
          "declarations",
          [](const PythonTool& t) { return from_json_value(t.tool.declarations()); },
          "The information-flow declarations, as a dict for the host framework's policy.")
      .def(
          "invoke",
          [](const PythonTool& t, py::handle arguments) {
            return invoke_tool(t, to_json_value(arguments, "arguments"));
          },
          py::arg("arguments"))
      .def("__call__", [](const PythonTool& t, py::kwargs arguments) {
        return invoke_tool(t, to_json_value(arguments, "arguments"));
      });

  module.def(
      "_sandboxed_tool",
      [](std::shared_ptr<SandboxRouter> router, py::handle spec, py::object body,
         py::handle context, std::string agent_dir, std::string name, std::string description,
         const std::string& approval, py::object declarations,
         std::optional<std::string> source_integrity,
         std::optional<std::string> outbound_max_confidentiality, py::object output_sink,
         bool also_carries_out, py::object on_reclaim_failure, py::handle reclaim_timeout,
         py::handle admission_timeout) -> py::object {
        // The gate's first step: no router, or a disabled one, attaches nothing — before any
        // other argument is looked at.
        if (!router || !router->enabled()) return py::none();
        if (!PyCallable_Check(body.ptr())) throw py::type_error("body: expected a callable");
        ToolBindingOptions options;
        options.router = router.get();
        options.context = context_from_python(context);
        options.agent_dir = std::move(agent_dir);
        options.name = std::move(name);
        options.description = std::move(description);
        options.approval_mode = approval_mode(approval);
        if (!declarations.is_none()) {
          if (!py::isinstance<py::dict>(declarations)) {
            throw py::type_error("declarations: expected a dict");
          }
          options.declarations = to_json_value(declarations, "declarations");
        }
        options.source_integrity = std::move(source_integrity);
        options.outbound_max_confidentiality = std::move(outbound_max_confidentiality);
        std::shared_ptr<HeldObject> held_sink;
        if (!output_sink.is_none()) {
          if (!py::isinstance<OutputSink>(output_sink)) {
            throw py::type_error("output_sink: expected an airlock.OutputSink");
          }
          options.output_sink = output_sink.cast<OutputSink>();
          held_sink = hold(output_sink);
        }
        options.also_carries_out = also_carries_out;
        options.on_reclaim_failure = reclaim_hook(std::move(on_reclaim_failure));
        options.reclaim_timeout = gate_checked_seconds(reclaim_timeout, "reclaim_timeout");
        options.admission_timeout = gate_checked_seconds(admission_timeout, "admission_timeout");
        auto held = hold(std::move(body));
        SandboxToolBody tool_body = [held, held_sink](SandboxToolCall& call,
                                                      const json::Json& arguments) {
          py::gil_scoped_acquire gil;
          auto handle = std::make_shared<ToolCallHandle>(ToolCallHandle{call, held_sink});
          py::object text;
          try {
            text = held->get()(handle, from_json_value(arguments));
          } catch (py::error_already_set& error) {
            propagate(error);
          }
          if (!py::isinstance<py::str>(text)) {
            throw py::type_error("the body of tool '" + call.tool_name() +
                                 "' must return a str, not " +
                                 std::string(py::str(text.get_type().attr("__name__"))));
          }
          return text.cast<std::string>();
        };
        const SandboxSpec parsed = spec_from_python(spec);
        std::optional<SandboxTool> tool;
        {
          py::gil_scoped_release release;
          tool = sandboxed_tool(std::move(options), parsed, std::move(tool_body));
        }
        return optional_tool(std::move(router), std::move(tool));
      },
      py::arg("router"), py::arg("spec"), py::arg("body"), py::kw_only(), py::arg("context"),
      py::arg("agent_dir"), py::arg("name"), py::arg("description"), py::arg("approval_mode"),
      py::arg("declarations"), py::arg("source_integrity"), py::arg("outbound_max_confidentiality"),
      py::arg("output_sink"), py::arg("also_carries_out"), py::arg("on_reclaim_failure"),
      py::arg("reclaim_timeout"), py::arg("admission_timeout"));

  module.def(
      "_sandbox_tool_declarations",
      [](py::handle spec, std::optional<std::string> source_integrity,
         std::optional<std::string> outbound_max_confidentiality, bool has_output_sink,
         bool also_carries_out) {
        const SandboxSpec parsed = spec_from_python(spec);
        return from_json_value(sandbox_tool_declarations(
            parsed,
            DeclarationOptions{std::move(source_integrity), std::move(outbound_max_confidentiality),
                               has_output_sink, also_carries_out}));
      },
      py::arg("spec"), py::kw_only(), py::arg("source_integrity"),
      py::arg("outbound_max_confidentiality"), py::arg("has_output_sink"),
      py::arg("also_carries_out"));

  module.def(
      "reclaim_guest_path",
      [](Sandbox& sandbox, const std::string& path, py::handle working_directory,
         py::handle timeout) {
        const Milliseconds bound = seconds_to_milliseconds(timeout, "timeout");
        const std::string directory = working_directory_or_default(sandbox, working_directory);
        py::gil_scoped_release release;
        return reclaim_guest_path(sandbox, path, directory, bound);
      },
      py::arg("sandbox"), py::arg("path"), py::kw_only(),
      py::arg("working_directory") = py::none(),
      py::arg("timeout") = 30.0,
      "Remove a call-owned guest path and everything under it: None when it is gone, else the "
      "reason (a str). Refused without touching the guest: a path outside working_directory, the "
      "working directory itself, a path fewer than two components deep. Never raises for what "
      "the sandbox did.");

  module.def("_codeact_sandbox_spec", [](py::dict options) {
    return codeact::codeact_sandbox_spec(codeact_spec_options(options));
  });

  module.def(
      "_make_codeact_tool",
      [](std::shared_ptr<SandboxRouter> router, py::handle context, std::string agent_dir,
         py::dict spec_options, py::object file_store, py::object output_sink,
         std::optional<std::string> outbound_max_confidentiality, py::handle exec_timeout,
         py::object on_reclaim_failure) -> py::object {
        // As for sandboxed_tool: without a router nothing is attached, and nothing is checked.
        if (!router || !router->enabled()) return py::none();
        codeact::ToolOptions options;
        options.router = router ? router.get() : nullptr;
        options.context = context_from_python(context);
        options.agent_dir = std::move(agent_dir);
        options.spec = codeact_spec_options(spec_options);
        if (!file_store.is_none()) {
          options.file_store = std::make_shared<PythonFileStore>(std::move(file_store));
        }
        if (!output_sink.is_none()) options.output_sink = output_sink.cast<OutputSink>();
        options.outbound_max_confidentiality = std::move(outbound_max_confidentiality);
        options.exec_timeout = seconds_to_milliseconds(exec_timeout, "exec_timeout");
        options.on_reclaim_failure = reclaim_hook(std::move(on_reclaim_failure));
        std::optional<SandboxTool> tool;
        {
          py::gil_scoped_release release;
          tool = codeact::make_codeact_tool(std::move(options));
        }
        return optional_tool(std::move(router), std::move(tool));
      },
      py::arg("router"), py::kw_only(), py::arg("context"), py::arg("agent_dir"),
      py::arg("spec_options"), py::arg("file_store"), py::arg("output_sink"),
      py::arg("outbound_max_confidentiality"), py::arg("exec_timeout"),
      py::arg("on_reclaim_failure"));
}

}  // namespace airlock::python
