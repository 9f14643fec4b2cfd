// Host tools whose bodies are Python callables, and the transport helpers around a run.
//
// A body is dispatched from whichever thread serves the guest (the socket channel's server, or
// the thread polling the over-exec transport), never holding the GIL: it takes the GIL and hands
// the call to `airlock._host_tools._invoke_tool`, which calls the function, awaits what it returns
// when that is awaitable (on the host's event loop when the run captured one), and encodes the
// value with Python's own `json.dumps` — so the guest receives what the reference would send, key
// order included. A Python exception is turned into a C++ exception while the GIL is still held:
// the registry's "failed" refusal for a failing body, its "cannot be carried as JSON" refusal for
// a value `json.dumps` refuses. No Python object escapes onto a thread without the GIL.
//
// What a run carries for its bodies (the host's event loop, the run's logger) is a Python object
// captured as the run starts — by `HostToolRun(registry)` in Python, or by the registry's
// `run_context` hook for runs the C++ core starts itself (codeact, `run_program_with_host_tools`).
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

py::module_ host_tools_module() {
  return py::module_::import("airlock._host_tools");
}

// The Python object a run carries (see the file comment); None when the run carries nothing.
py::object run_context_object(const HostToolRun& run) {
  if (!run.context()) return py::none();
  return std::static_pointer_cast<const HeldObject>(run.context())->get();
}

std::shared_ptr<const void> hold_context(py::object context) {
  return std::static_pointer_cast<const void>(hold(std::move(context)));
}

// The run as Python sees it: the object that owns it when it is shared (the observer may keep
// it), None for a run a C++ caller keeps on its stack.
py::object run_object(const HostToolRun& run) {
  const std::shared_ptr<const HostToolRun> shared = run.weak_from_this().lock();
  if (!shared) return py::none();
  return py::cast(std::const_pointer_cast<HostToolRun>(shared));
}

std::function<std::string(const json::Json&, const HostToolRun&)> python_body(py::object function,
                                                                              std::string name) {
  auto held = hold(std::move(function));
  return [held, name = std::move(name)](const json::Json& arguments,
                                        const HostToolRun& run) -> std::string {
    py::gil_scoped_acquire gil;
    try {
      py::module_ tools = host_tools_module();
      py::object text = tools.attr("_invoke_tool")(held->get(), name, from_json_value(arguments),
                                                   run_context_object(run));
      return text.cast<std::string>();
    } catch (py::error_already_set& error) {
      if (error.matches(host_tools_module().attr("_NotCarried"))) {
        throw HostToolValueNotJson(describe_python_error(error));
      }
      throw std::runtime_error(describe_python_error(error));
    }
  };
}

// The C++ observer over a Python one: `_observe` enters the context manager the observer returns
// and hands back the callable that finishes it with the outcome.
DispatchObserver python_observer(py::object observer) {
  auto held = hold(std::move(observer));
  return [held](const HostToolRun& run,
                const json::Json& name) -> std::function<void(const DispatchResult&)> {
    py::gil_scoped_acquire gil;
    py::object finish;
    try {
      finish = host_tools_module().attr("_observe")(held->get(), run_object(run),
                                                    from_json_value(name), run_context_object(run));
    } catch (py::error_already_set& error) {
      throw std::runtime_error(describe_python_error(error));
    }
    if (finish.is_none()) return nullptr;
    auto held_finish = hold(std::move(finish));
    return [held_finish](const DispatchResult& outcome) {
      py::gil_scoped_acquire inner;
      try {
        held_finish->get()(outcome);
      } catch (py::error_already_set& error) {
        throw std::runtime_error(describe_python_error(error));
      }
    };
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

// A layout crosses as the Python record `airlock.GuestRunLayout` (a frozen dataclass) or any
// object with its ten fields.
GuestRunLayout layout_from_python(py::handle value) {
  auto field = [&](const char* name) {
    py::object attribute = py::getattr(value, name, py::none());
    if (!py::isinstance<py::str>(attribute)) {
      throw py::type_error(std::string("layout: expected a GuestRunLayout (its '") + name +
                           "' is not a str)");
    }
    return attribute.cast<std::string>();
  };
  GuestRunLayout layout;
  layout.directory = field("directory");
  layout.work = field("work");
  layout.program = field("program");
  layout.shim = field("shim");
  layout.launcher = field("launcher");
  layout.calls = field("calls");
  layout.output = field("output");
  layout.exit_code = field("exit_code");
  layout.pid = field("pid");
  layout.session = field("session");
  return layout;
}

py::tuple layout_fields(const GuestRunLayout& layout) {
  return py::make_tuple(layout.directory, layout.work, layout.program, layout.shim, layout.launcher,
                        layout.calls, layout.output, layout.exit_code, layout.pid, layout.session);
}

std::optional<HostToolChannel> channel_from_python(const std::optional<std::string>& channel) {
  if (!channel) return std::nullopt;
  if (*channel == "socket") return HostToolChannel::socket;
  if (*channel == "files") return HostToolChannel::files;
  throw InvalidArgument("channel: unknown value \"" + *channel + "\"; allowed: files, socket",
                        "channel");
}

void bind_tool_records(py::module_& module) {
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
      .def("__eq__",
           [](const HostToolDeclaration& a, const HostToolDeclaration& b) {
             return a.source == b.source && a.sink == b.sink && a.identity == b.identity;
           })
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
      .def(py::init([](std::optional<std::string> value_json, std::optional<std::string> refusal) {
             if (value_json.has_value() == refusal.has_value()) {
               throw InvalidArgument(
                   "DispatchResult: exactly one of value_json and refusal must "
                   "be set",
                   "DispatchResult");
             }
             return DispatchResult{std::move(value_json), std::move(refusal)};
           }),
           py::arg("value_json") = py::none(), py::arg("refusal") = py::none())
      .def_property_readonly("value_json", [](const DispatchResult& r) { return r.value_json; })
      .def_property_readonly("refusal", [](const DispatchResult& r) { return r.refusal; })
      .def_property_readonly("ok", &DispatchResult::ok)
      .def("__eq__",
           [](const DispatchResult& a, const DispatchResult& b) {
             return a.value_json == b.value_json && a.refusal == b.refusal;
           })
      .def("__repr__", [](const DispatchResult& r) {
        return r.ok()
                   ? "DispatchResult(value_json=" + std::string(py::repr(py::str(*r.value_json))) +
                         ")"
                   : "DispatchResult(refusal=" + std::string(py::repr(py::str(*r.refusal))) + ")";
      });
}

void bind_tool_registry(py::module_& module) {
  py::class_<HostToolRegistry, std::shared_ptr<HostToolRegistry>>(
      module, "_HostToolRegistry", "The registry's C++ core; use airlock.HostToolRegistry.")
      .def(py::init([](bool require_declared, py::handle allowed_identities,
                       std::uint64_t max_dispatches_per_run, TransferLimits response_limits,
                       py::object observer, py::object run_context) {
             HostToolRegistryOptions options;
             options.require_declared = require_declared;
             options.allowed_identities =
                 enum_set<Identity>(allowed_identities, "allowed_identities",
                                    [](const std::string& text, std::string_view what) {
                                      return parse_identity(text, what);
                                    });
             options.max_dispatches_per_run = max_dispatches_per_run;
             options.response_limits = response_limits;
             if (!observer.is_none()) options.observer = python_observer(std::move(observer));
             auto capture = hold(std::move(run_context));
             options.run_context = [capture]() -> std::shared_ptr<const void> {
               py::gil_scoped_acquire gil;
               return hold_context(capture->get()());
             };
             return std::make_shared<HostToolRegistry>(std::move(options));
           }),
           py::kw_only(), py::arg("require_declared"), py::arg("allowed_identities"),
           py::arg("max_dispatches_per_run"), py::arg("response_limits"),
           py::arg("dispatch_observer"), py::arg("run_context"))
      .def(
          "_register",
          [](HostToolRegistry& registry, py::object function, std::string name,
             std::string description,
             std::vector<std::tuple<std::string, std::string, bool, bool>> parameters,
             bool accepts_any_keyword, std::optional<HostToolDeclaration> declaration) {
            if (!PyCallable_Check(function.ptr())) throw py::type_error("expected a callable");
            HostTool tool;
            tool.name = name;
            tool.description = std::move(description);
            for (auto& [parameter, type, required, accepts_null] : parameters) {
              tool.parameters.push_back(
                  ToolParameter{parameter, parameter_type(type), required, "", accepts_null});
            }
            tool.accepts_any_keyword = accepts_any_keyword;
            tool.encoded_body = python_body(std::move(function), std::move(name));
            tool.declaration = std::move(declaration);
            py::gil_scoped_release release;  // the registry's lock is taken without the GIL
            registry.register_tool(std::move(tool));
          },
          py::arg("function"), py::arg("name"), py::arg("description"), py::arg("parameters"),
          py::arg("accepts_any_keyword"), py::arg("declaration"))
      .def("names", &HostToolRegistry::names)
      .def("__len__", &HostToolRegistry::size)
      .def("__contains__",
           [](const HostToolRegistry& registry, py::handle name) {
             return py::isinstance<py::str>(name) &&
                    registry.resolve(name.cast<std::string>()) != nullptr;
           })
      .def_property_readonly("sealed", &HostToolRegistry::sealed)
      .def("declaration_for", &HostToolRegistry::declaration_for, py::arg("name"),
           "The declaration captured at registration (None: unstamped or unknown). Seals the "
           "registry, as aggregate() does.")
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
          "Seal the registry and derive the policy aggregate (idempotent).");
}

void bind_tool_run(py::module_& module) {
  py::class_<HostToolRun, std::shared_ptr<HostToolRun>>(
      module, "HostToolRun",
      "One guest program's run: its dispatch count and what it has been delivered.\n\n"
      "dispatch(name, arguments=None, *, framing_bytes=0) returns a DispatchResult; refusals are "
      "results, only bad transport input raises (framing_bytes: a plain int, else TypeError; "
      "negative: ValueError). `dispatched` counts refusals too; `delivered` and "
      "`delivered_bytes` count answers with their framing. The host's event loop is captured as "
      "the run starts (the one airlock.aio awaits on, else the one running on this thread): a "
      "coroutine body is awaited on it. `logger` receives the run's failure lines.")
      .def(py::init([](py::handle registry, py::object logger) {
             if (!py::isinstance<HostToolRegistry>(registry)) {
               throw py::type_error("HostToolRun: expected a HostToolRegistry");
             }
             py::object context =
                 host_tools_module().attr("_context_of_a_run_started_here")(std::move(logger));
             return std::make_shared<HostToolRun>(
                 registry.cast<std::shared_ptr<HostToolRegistry>>(), hold_context(context));
           }),
           py::arg("registry"), py::kw_only(), py::arg("logger") = py::none())
      .def(
          "dispatch",
          [](HostToolRun& run, py::handle name, py::handle arguments, py::handle framing_bytes) {
            const auto framing =
                host_tools_module().attr("_framing_bytes")(framing_bytes).cast<std::uint64_t>();
            const json::Json parsed_name = to_json_value(name, "name");
            const json::Json parsed_arguments = to_json_value(arguments, "arguments");
            py::gil_scoped_release release;
            return run.dispatch(parsed_name, parsed_arguments, framing);
          },
          py::arg("name"), py::arg("arguments") = py::none(), py::kw_only(),
          py::arg("framing_bytes") = 0,
          "Dispatch once through the one door: every cap and refusal, in the reference's order.")
      .def_property_readonly("dispatched", &HostToolRun::dispatched)
      .def_property_readonly("delivered", &HostToolRun::delivered)
      .def_property_readonly("delivered_bytes", &HostToolRun::delivered_bytes)
      .def_property_readonly(
          "registry",
          [](const HostToolRun& run) {
            return std::const_pointer_cast<HostToolRegistry>(run.shared_registry());
          })
      .def("__repr__", [](const HostToolRun& run) {
        return "<airlock.HostToolRun dispatched=" + std::to_string(run.dispatched()) +
               " delivered=" + std::to_string(run.delivered()) +
               " delivered_bytes=" + std::to_string(run.delivered_bytes()) + ">";
      });
}

void bind_tool_transport(py::module_& module) {
  module.attr("_SHIM_MODULE") = kShimModule;
  module.attr("_CALLS_DIRECTORY") = kCallsDirectory;
  module.attr("_WORK_DIRECTORY") = kWorkDirectory;
  module.attr("_DEFAULT_MAX_DISPATCHES_PER_RUN") = kDefaultMaxDispatchesPerRun;
  module.attr("_RESPONSE_FRAMING_BYTES") = kResponseFramingBytes;

  module.def(
      "_guest_run_layout",
      [](const std::string& run_directory, const std::string& program) {
        return layout_fields(guest_run_layout(run_directory, program));
      },
      py::arg("run_directory"), py::arg("program"));
  module.def(
      "_host_tool_shim",
      [](const std::vector<std::string>& names, py::handle call_timeout) {
        return host_tool_shim(names, seconds_to_milliseconds(call_timeout, "call_timeout"));
      },
      py::arg("names"), py::arg("call_timeout"));
  module.def(
      "_launcher_script",
      [](py::handle layout, const std::string& interpreter) {
        return launcher_script(layout_from_python(layout), interpreter);
      },
      py::arg("layout"), py::arg("interpreter"));
  module.def(
      "_dispatch_over_exec",
      [](Sandbox& sandbox, HostToolRun& run, py::handle layout, py::handle timeout,
         py::handle poll_interval, const std::string& interpreter) {
        HostToolRunOptions options;
        options.timeout = seconds_to_milliseconds(timeout, "timeout");
        options.poll_interval = seconds_to_milliseconds(poll_interval, "poll_interval");
        options.interpreter = interpreter;
        const GuestRunLayout parsed = layout_from_python(layout);
        py::gil_scoped_release release;
        return dispatch_over_exec(sandbox, run, parsed, options);
      },
      py::arg("sandbox"), py::arg("run"), py::arg("layout"), py::arg("timeout"),
      py::arg("poll_interval"), py::arg("interpreter"));
  module.def(
      "_reclaim_run",
      [](Sandbox& sandbox, py::handle layout, py::handle timeout) {
        const Milliseconds bound = seconds_to_milliseconds(timeout, "timeout");
        const GuestRunLayout parsed = layout_from_python(layout);
        py::gil_scoped_release release;
        return reclaim_run(sandbox, parsed, bound);
      },
      py::arg("sandbox"), py::arg("layout"), py::arg("timeout"));

  module.def(
      "_run_program_with_host_tools",
      [](Sandbox& sandbox, const std::shared_ptr<HostToolRegistry>& registry,
         const std::string& code, py::handle layout, py::handle timeout, py::handle poll_interval,
         py::handle call_timeout, const std::string& interpreter,
         std::optional<std::string> channel, bool reclaim) {
        if (!registry) throw py::type_error("registry: expected a HostToolRegistry");
        HostToolRunOptions options;
        options.timeout = seconds_to_milliseconds(timeout, "timeout");
        options.poll_interval = seconds_to_milliseconds(poll_interval, "poll_interval");
        options.interpreter = interpreter;
        options.channel = channel_from_python(channel);
        const Milliseconds patience = call_timeout.is_none()
                                          ? options.timeout
                                          : seconds_to_milliseconds(call_timeout, "call_timeout");
        const GuestRunLayout parsed = layout_from_python(layout);
        HostToolRunResult ran;
        std::shared_ptr<HostToolRun> run;
        {
          py::gil_scoped_release release;
          // With `reclaim`, the run directory goes however the program ends: nothing is collected
          // from it, and it holds the call traffic.
          struct Reclaim {
            Sandbox& sandbox;
            const GuestRunLayout& layout;
            bool enabled;
            ~Reclaim() {
              if (!enabled) return;
              try {
                reclaim_run(sandbox, layout);
              } catch (...) {  // best effort: a destructor must not throw while unwinding
              }
            }
          } reclaim_guard{sandbox, parsed, reclaim};
          ExecOptions make_work;
          make_work.working_directory = "/";
          make_work.timeout = std::chrono::seconds(30);
          const ExecResult made =
              sandbox.exec(Command::argv({"mkdir", "-p", "--", parsed.work}), make_work);
          if (made.exit_code != 0) {
            throw SystemError("could not create the run's work directory: " + made.stderr_text(), 0,
                              parsed.work);
          }
          sandbox.write_file(parsed.program, code, parsed.directory);
          sandbox.write_file(parsed.shim, host_tool_shim(registry->names(), patience),
                             parsed.directory);
          run = std::make_shared<HostToolRun>(registry);
          ran = run_program_with_host_tools(sandbox, *run, parsed, options);
        }
        py::dict out;
        out["result"] = ran.result;
        out["channel"] = std::string(to_string(ran.channel));
        out["dispatched"] = run->dispatched();
        out["run"] = run;
        return out;
      },
      py::arg("sandbox"), py::arg("registry"), py::arg("code"), py::arg("layout"),
      py::arg("timeout"), py::arg("poll_interval"), py::arg("call_timeout"), py::arg("interpreter"),
      py::arg("channel"), py::arg("reclaim"));
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
  bind_tool_records(module);
  bind_tool_registry(module);
  bind_tool_run(module);
  bind_tool_transport(module);
}

}  // namespace airlock::python
