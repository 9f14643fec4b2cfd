// C++ errors → the Python classes of airlock/errors.py. The class is chosen by dynamic type,
// most-derived first, so a QueuedTimeout never surfaces as a plain timeout and a confinement
// refusal never as a plain ValueError; every typed field of the C++ error is copied over.
#include "errors.hpp"

#include "airlock/error_table.hpp"
#include "airlock/errors.hpp"
#include "convert.hpp"

namespace airlock::python {
namespace {

template <typename T>
const T* as(const Error& error) {
  return dynamic_cast<const T*>(&error);
}

std::optional<bool> kill_confirmed_of(const Error& error) {
  if (const auto* timeout = as<Timeout>(error)) return timeout->kill_confirmed();
  if (const auto* overflow = as<ExecOutputLimitExceeded>(error)) return overflow->kill_confirmed();
  return std::nullopt;
}

py::object optional_bool(std::optional<bool> value) {
  return value ? py::object(py::bool_(*value)) : py::object(py::none());
}

}  // namespace

const char* python_class_name(const Error& error) {
  // The error table's class for the error's kind; every kind of ours has one.
  const ErrorKind& kind = error_kind_of(error);
  return kind.python_class.empty() ? "AirlockError" : kind.python_class.data();
}

py::object to_python_error(const Error& error) {
  py::object cls = py::module_::import("airlock.errors").attr(python_class_name(error));
  py::object instance = cls(py::str(error.message()));
  instance.attr("type") = py::str(error.type());
  instance.attr("check") = py::str(error.check());

  if (const auto* system = as<SystemError>(error)) {
    if (system->error_number() != 0) instance.attr("errno") = system->error_number();
    instance.attr("path") = py::str(system->path());
  }
  if (const auto* timeout = as<Timeout>(error)) {
    instance.attr("partial_stdout") = py::bytes(timeout->partial_stdout());
    instance.attr("partial_stderr") = py::bytes(timeout->partial_stderr());
  }
  if (as<Timeout>(error) || as<ExecOutputLimitExceeded>(error)) {
    instance.attr("kill_confirmed") = optional_bool(kill_confirmed_of(error));
  }
  if (const auto* program = as<ProgramTimeout>(error)) {
    instance.attr("output") = py::str(program->output());
    instance.attr("signal") = to_python(program->signal());
    instance.attr("reach") = to_python(program->reach());
  }
  if (const auto* cap = as<TransferCapExceeded>(error)) {
    instance.attr("cap") = py::str(cap->cap());
    instance.attr("file") = py::str(cap->file());
    instance.attr("limit") = py::int_(cap->limit());
    instance.attr("size") = cap->size() ? py::object(py::int_(*cap->size())) : py::none();
  }
  if (const auto* overflow = as<ExecOutputLimitExceeded>(error)) {
    instance.attr("limit") = py::int_(overflow->limit());
  }
  if (const auto* refused = as<FileRefused>(error)) {
    instance.attr("refusal") = py::str(std::string(to_string(refused->refusal())));
    instance.attr("path") = py::str(refused->path());
    instance.attr("detail") = py::str(refused->detail());
  }
  if (const auto* unfinished = as<ShellTransferUnfinished>(error)) {
    instance.attr("over_cap") = py::bool_(unfinished->over_cap());
  }
  if (const auto* backend = as<BackendError>(error)) {
    instance.attr("detail") = py::str(backend->detail());
    // The provider's HTTP answer, for logs only (`airlock.error_detail` prints it).
    const auto& response = backend->response();
    instance.attr("status_code") = response ? py::object(py::int_(response->status)) : py::none();
    instance.attr("body") = response ? py::object(py::str(response->body)) : py::none();
  }
  if (const auto* conformance = as<ConformanceFailure>(error)) {
    py::list failures;
    for (const auto& failed : conformance->failures()) {
      py::dict item;
      item["probe"] = failed.probe;
      item["why"] = failed.why;
      item["failure"] = failed.failure;
      failures.append(item);
    }
    instance.attr("failures") = failures;
  }
  return instance;
}

void register_error_translator() {
  py::register_exception_translator([](std::exception_ptr pointer) {
    if (!pointer) return;
    try {
      std::rethrow_exception(pointer);
    } catch (const Error& error) {
      py::object instance = to_python_error(error);
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(instance.ptr())), instance.ptr());
    }
  });
}

void bind_errors(py::module_& module) {
  // For tests and tools: which class each C++ error type becomes, proven on real instances
  // (the error table's example of each kind; "Timeout" and "SystemError" by their wire names).
  module.def("_raise_error", [](const std::string& type, const std::string& message) {
    const ErrorKind* kind = find_error_kind(type);
    if (!kind || !kind->raise_example) {
      throw InvalidArgument("_raise_error: unknown type \"" + type + "\"", "type");
    }
    kind->raise_example(message);
  });
  // The table itself, so the Python suite can hold airlock/errors.py to it.
  module.def("_error_kinds", [] {
    py::list kinds;
    for (const auto& kind : error_kinds()) {
      py::dict item;
      item["type"] = std::string(kind.type);
      item["parent"] = std::string(kind.parent);
      item["python_class"] = std::string(kind.python_class);
      item["http_status"] = kind.http_status;
      item["exit_code"] = kind.exit_code;
      item["concrete"] = kind.concrete;
      item["raisable"] = kind.raise_example != nullptr;
      kinds.append(item);
    }
    return kinds;
  });
}

}  // namespace airlock::python
