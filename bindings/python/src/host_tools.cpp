// Host tools whose bodies are Python callables.
//
// A body is dispatched from whichever thread serves the guest (the socket channel's server, or
// the thread polling the over-exec transport), never holding the GIL: it takes the GIL, calls
// the callable with the validated arguments as keywords, converts the result to JSON, and lets
// go. A Python exception — or a result JSON cannot carry — is turned into a C++ exception while
// the GIL is still held, so the registry's one "tool failed" path handles it (a fixed sentence
// to the guest, the reason to the log) and no Python object escapes onto a thread without it.
#include "host_tools.hpp"

#include <pybind11/stl.h>

#include <stdexcept>

#include "airlock/host_tool_transport.hpp"
#include "airlock/host_tools.hpp"
#include "bindings.hpp"
#include "convert.hpp"
#include "sandbox.hpp"

namespace airlock::python {
namespace {

ToolParameter::Type parameter_type(const std::string& text) {
  using Type = ToolParameter::Type;
  if (text == "string") return Type::string;
  if (text == "integer") return Type::integer;
  if (text == "number") return Type::number;
  if (text == "boolean") return Type::boolean;
  if (text == "object") return Type::object;
  if (text == "array") return Type::array;
  if (text == "any") return Type::any;
  throw InvalidArgument("parameter type \"" + text +
                            "\" is not one of string, integer, number, boolean, object, array, any",
                        "parameters");
}

std::function<json::Json(const json::Json&)> python_body(py::object function) {
  auto held = hold(std::move(function));
  return [held](const json::Json& arguments) -> json::Json {
    py::gil_scoped_acquire gil;
    try {
      py::dict keywords = from_json_value(arguments);
      py::object result = held->get()(**keywords);
      return to_json_value(result, "result");
    } catch (py::error_already_set& error) {
      throw std::runtime_error(describe_python_error(error));
    }
  };
}

std::optional<SourceIntegrity> optional_source(py::handle value) {
  if (value.is_none()) return std::nullopt;
  return parse_source_integrity(enum_text(value, "source"), "source");
}

std::optional<Identity> optional_identity(py::handle value) {
  if (value.is_none()) return std::nullopt;
  return parse_identity(enum_text(value, "identity"), "identity");
}

py::object optional_enum(const auto& value) {
  return value ? to_python(*value) : py::object(py::none());
}

}  // namespace

std::shared_ptr<HostToolRegistry> registry_from_python(py::handle value) {
  if (value.is_none()) return nullptr;
  if (!py::isinstance<HostToolRegistry>(value)) {
    throw py::type_error("host_tools: expected a HostToolRegistry");
  }
  return value.cast<std::shared_ptr<HostToolRegistry>>();
}

void bind_host_tools(py::module_& module) {
  py::class_<HostToolDeclaration>(
      module, "HostToolDeclaration",
      "A tool's answers to the three information-flow questions. No defaults: each leg must be "
      "answered, and None is an answer ('not that role').")
      .def(py::init([](py::handle source, py::handle sink, py::handle identity) {
             if (!sink.is_none() && !py::isinstance<py::str>(sink)) {
               throw py::type_error("sink: expected a str or None");
             }
             return HostToolDeclaration(
                 optional_source(source),
                 sink.is_none() ? std::nullopt : std::optional(sink.cast<std::string>()),
                 optional_identity(identity));
           }),
           py::kw_only(), py::arg("source"), py::arg("sink"), py::arg("identity"))
      .def_property_readonly("source",
                             [](const HostToolDeclaration& d) { return optional_enum(d.source); })
      .def_property_readonly("sink", [](const HostToolDeclaration& d) { return d.sink; })
      .def_property_readonly("identity",
                             [](const HostToolDeclaration& d) { return optional_enum(d.identity); })
      .def("__repr__", [](const HostToolDeclaration& d) {
        auto text = [](const std::optional<std::string>& value) {
          return value ? std::string(py::repr(py::str(*value))) : std::string("None");
        };
        return "HostToolDeclaration(source=" +
               text(d.source ? std::optional(std::string(to_string(*d.source))) : std::nullopt) +
               ", sink=" + text(d.sink) + ", identity=" +
               text(d.identity ? std::optional(std::string(to_string(*d.identity)))
                               : std::nullopt) +
               ")";
      });

  py::class_<DispatchResult>(module, "DispatchResult",
                             "One dispatch's outcome: exactly one of value_json and refusal.")
      .def_property_readonly("value_json", [](const DispatchResult& r) { return r.value_json; })
      .def_property_readonly("refusal", [](const DispatchResult& r) { return r.refusal; })
      .def_property_readonly("ok", &DispatchResult::ok)
      .def("__repr__", [](const DispatchResult& r) {
        return r.ok()
                   ? "DispatchResult(value_json=" + std::string(py::repr(py::str(*r.value_json))) +
                         ")"
                   : "DispatchResult(refusal=" + std::string(py::repr(py::str(*r.refusal))) + ")";
      });

  py::class_<HostToolRegistry, std::shared_ptr<HostToolRegistry>>(
      module, "_HostToolRegistry", "The registry's C++ core; use airlock.HostToolRegistry.")
      .def(py::init([](bool require_declared, py::handle allowed_identities,
                       py::handle max_dispatches_per_run, TransferLimits response_limits) {
             if (py::isinstance<py::bool_>(max_dispatches_per_run) ||
                 !py::isinstance<py::int_>(max_dispatches_per_run)) {
               throw py::type_error("max_dispatches_per_run: expected an int");
             }
             if (py::reinterpret_borrow<py::int_>(max_dispatches_per_run) < py::int_(0)) {
               throw InvalidArgument("max_dispatches_per_run: must be at least 1",
                                     "max_dispatches_per_run");
             }
             HostToolRegistryOptions options;
             options.require_declared = require_declared;
             options.allowed_identities =
                 enum_set<Identity>(allowed_identities, "allowed_identities",
                                    [](const std::string& text, std::string_view what) {
                                      return parse_identity(text, what);
                                    });
             options.max_dispatches_per_run = max_dispatches_per_run.cast<std::uint64_t>();
             options.response_limits = response_limits;
             return std::make_shared<HostToolRegistry>(std::move(options));
           }),
           py::kw_only(), py::arg("require_declared"), py::arg("allowed_identities"),
           py::arg("max_dispatches_per_run"), py::arg("response_limits"))
      .def(
          "_register",
          [](HostToolRegistry& registry, py::object function, std::string name,
             std::string description,
             std::vector<std::tuple<std::string, std::string, bool, std::string>> parameters,
             std::optional<HostToolDeclaration> declaration) {
            if (!PyCallable_Check(function.ptr())) throw py::type_error("expected a callable");
            HostTool tool;
            tool.name = std::move(name);
            tool.description = std::move(description);
            for (auto& [parameter, type, required, text] : parameters) {
              tool.parameters.push_back(
                  ToolParameter{parameter, parameter_type(type), required, text});
            }
            tool.body = python_body(std::move(function));
            tool.declaration = std::move(declaration);
            registry.register_tool(std::move(tool));
          },
          py::arg("function"), py::arg("name"), py::arg("description"), py::arg("parameters"),
          py::arg("declaration"))
      .def("names", &HostToolRegistry::names)
      .def("__len__", &HostToolRegistry::size)
      .def("__contains__",
           [](const HostToolRegistry& registry, const std::string& name) {
             return registry.resolve(name) != nullptr;
           })
      .def_property_readonly("sealed", &HostToolRegistry::sealed)
      .def("declaration_for", &HostToolRegistry::declaration_for, py::arg("name"))
      .def(
          "aggregate",
          [](HostToolRegistry& registry) {
            const HostToolAggregate aggregate = registry.aggregate();
            py::dict out;
            out["result_integrity"] = optional_enum(aggregate.result_integrity);
            out["outbound_caps"] = py::frozenset(py::cast(aggregate.outbound_caps));
            out["identities"] = to_python(aggregate.identities);
            out["requires_approval"] = aggregate.requires_approval;
            out["has_undeclared"] = aggregate.has_undeclared;
            return out;
          },
          "Seal the registry and derive the policy aggregate (idempotent).")
      .def(
          "dispatch",
          [](const std::shared_ptr<HostToolRegistry>& registry, py::handle name,
             py::handle arguments) {
            // One fresh run per call: for a host's own tests of its tools, through the one door.
            const json::Json parsed_name = to_json_value(name, "name");
            const json::Json parsed_arguments = to_json_value(arguments, "arguments");
            py::gil_scoped_release release;
            HostToolRun run(registry);
            return run.dispatch(parsed_name, parsed_arguments);
          },
          py::arg("name"), py::arg("arguments") = py::none(),
          "Dispatch once through the registry's door, as a guest would: every cap and check.");

  module.def(
      "run_program_with_host_tools",
      [](Sandbox& sandbox, const std::shared_ptr<HostToolRegistry>& registry,
         const std::string& code, const std::string& run_directory, py::handle timeout,
         std::optional<std::string> channel) {
        HostToolRunOptions options;
        options.timeout = seconds_to_milliseconds(timeout, "timeout");
        if (channel) {
          if (*channel == "socket") {
            options.channel = HostToolChannel::socket;
          } else if (*channel == "files") {
            options.channel = HostToolChannel::files;
          } else {
            throw InvalidArgument(
                "channel: unknown value \"" + *channel + "\"; allowed: files, socket", "channel");
          }
        }
        const GuestRunLayout layout = guest_run_layout(run_directory);
        HostToolRunResult ran;
        std::uint64_t dispatched = 0;
        {
          py::gil_scoped_release release;
          // The run directory goes however the program ends: it holds the call traffic.
          struct Reclaim {
            Sandbox& sandbox;
            const GuestRunLayout& layout;
            ~Reclaim() {
              try {
                reclaim_run(sandbox, layout);
              } catch (...) {  // best effort: a destructor must not throw while unwinding
              }
            }
          } reclaim{sandbox, layout};
          ExecOptions make_work;
          make_work.working_directory = "/";
          make_work.timeout = std::chrono::seconds(30);
          const ExecResult made =
              sandbox.exec(Command::argv({"mkdir", "-p", layout.work}), make_work);
          if (made.exit_code != 0) {
            throw SystemError("could not create the run's work directory: " + made.stderr_text(), 0,
                              layout.work);
          }
          sandbox.write_file(layout.program, code, layout.directory);
          sandbox.write_file(layout.shim, host_tool_shim(registry->names(), options.timeout),
                             layout.directory);
          HostToolRun run(registry);
          ran = run_program_with_host_tools(sandbox, run, layout, options);
          dispatched = run.dispatched();
        }
        py::dict out;
        out["result"] = ran.result;
        out["channel"] = std::string(to_string(ran.channel));
        out["dispatched"] = dispatched;
        return out;
      },
      py::arg("sandbox"), py::arg("registry"), py::arg("code"), py::kw_only(),
      py::arg("run_directory"), py::arg("timeout") = 120, py::arg("channel") = py::none(),
      "Run a Python program in the guest that may `import airlock_host_tools` and call the "
      "registry's tools (socket channel when the sandbox offers one, else over exec and files). "
      "Returns {'result': ExecResult, 'channel': …, 'dispatched': n}. The run directory is "
      "removed afterwards, however the program ended.");
}

}  // namespace airlock::python
