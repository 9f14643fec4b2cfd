// C++ errors → the Python classes of airlock/errors.py. The class is chosen by dynamic type,
// most-derived first, so a QueuedTimeout never surfaces as a plain timeout and a confinement
// refusal never as a plain ValueError; every typed field of the C++ error is copied over.
#include "errors.hpp"

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
  // Most-derived first: each test below must come before the test of any base it has.
  if (as<ConfinementError>(error)) return "ConfinementError";
  if (as<HostToolNotDeclared>(error)) return "HostToolNotDeclared";
  if (as<HostToolIdentityNotAllowed>(error)) return "HostToolIdentityNotAllowed";
  if (as<InvalidArgument>(error)) return "InvalidArgument";
  if (as<QueuedTimeout>(error)) return "SandboxQueuedTimeout";
  if (as<ProgramTimeout>(error)) return "SandboxProgramTimeout";
  if (as<Timeout>(error)) return "SandboxTimeout";
  if (as<NotFound>(error)) return "NotFound";
  if (as<NotADirectory>(error)) return "NotADirectory";
  if (as<IsADirectory>(error)) return "IsADirectory";
  if (as<SystemError>(error)) return "SandboxSystemError";
  if (as<BackendNotPermitted>(error)) return "SandboxBackendNotPermitted";
  if (as<CapabilityNotSupported>(error)) return "SandboxCapabilityNotSupported";
  if (as<OsFamilyNotSupported>(error)) return "SandboxOsFamilyNotSupported";
  if (as<CapabilityDenied>(error)) return "SandboxCapabilityDenied";
  if (as<IdentityDenied>(error)) return "SandboxIdentityDenied";
  if (as<EgressNotEnforced>(error)) return "SandboxEgressNotEnforced";
  if (as<TransferLimitsNotPermitted>(error)) return "SandboxTransferLimitsNotPermitted";
  if (as<RouterRefusal>(error)) return "RouterRefusal";
  if (as<NoSandboxBackend>(error)) return "NoSandboxBackend";
  if (as<OutputMissing>(error)) return "SandboxOutputMissing";
  if (as<OutputNotConfined>(error)) return "SandboxOutputNotConfined";
  if (as<OutputNotRegular>(error)) return "SandboxOutputNotRegular";
  if (as<OutputSizeUnknown>(error)) return "SandboxOutputSizeUnknown";
  if (as<OutputUnreachable>(error)) return "SandboxOutputUnreachable";
  if (as<LandingNotConfined>(error)) return "SandboxLandingNotConfined";
  if (as<OutputSinkRequired>(error)) return "SandboxOutputSinkRequired";
  if (as<ArtifactNameInvalid>(error)) return "SandboxArtifactNameInvalid";
  if (as<ArtifactNameCollision>(error)) return "SandboxArtifactNameCollision";
  if (as<TransferCapExceeded>(error)) return "SandboxTransferCapExceeded";
  if (as<OutputError>(error)) return "SandboxOutputError";
  if (as<ExecOutputLimitExceeded>(error)) return "SandboxExecOutputLimitExceeded";
  if (as<FileRefused>(error)) return "SandboxFileRefused";
  if (as<ShellTransferFailed>(error)) return "SandboxShellTransferFailed";
  if (as<ShellTransferUnfinished>(error)) return "SandboxShellTransferUnfinished";
  if (as<NotSupported>(error)) return "NotSupported";
  if (as<BackendError>(error)) return "BackendError";
  if (as<ConformanceFailure>(error)) return "ConformanceFailure";
  return "AirlockError";
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
  // For tests and tools: which class each C++ error type becomes, proven on real instances.
  module.def("_raise_error", [](const std::string& type, const std::string& message) {
    if (type == "InvalidArgument") throw InvalidArgument(message, "test");
    if (type == "ConfinementError") throw ConfinementError(message);
    if (type == "HostToolNotDeclared") throw HostToolNotDeclared(message);
    if (type == "HostToolIdentityNotAllowed") throw HostToolIdentityNotAllowed(message);
    if (type == "SystemError") throw SystemError(message, 5, "/guest/path");
    if (type == "NotFound") throw NotFound(message, "/guest/missing");
    if (type == "NotADirectory") throw NotADirectory(message, "/guest/file");
    if (type == "IsADirectory") throw IsADirectory(message, "/guest/dir");
    if (type == "Timeout") throw Timeout(message, true, "partial out", "partial err");
    if (type == "SandboxQueuedTimeout") throw QueuedTimeout(message);
    if (type == "SandboxProgramTimeout") {
      throw ProgramTimeout(message, "so far", SignalOutcome::sent, SignalReach::group);
    }
    if (type == "SandboxBackendNotPermitted") throw BackendNotPermitted(message, "isolation-floor");
    if (type == "SandboxCapabilityNotSupported") {
      throw CapabilityNotSupported(message, "capabilities");
    }
    if (type == "SandboxOsFamilyNotSupported") throw OsFamilyNotSupported(message, "os-family");
    if (type == "SandboxCapabilityDenied") throw CapabilityDenied(message, "denied-capabilities");
    if (type == "SandboxIdentityDenied") throw IdentityDenied(message, "denied-identities");
    if (type == "SandboxEgressNotEnforced") throw EgressNotEnforced(message, "egress");
    if (type == "SandboxTransferLimitsNotPermitted") {
      throw TransferLimitsNotPermitted(message, "transfer-limits");
    }
    if (type == "NoSandboxBackend") throw NoSandboxBackend(message);
    if (type == "SandboxOutputMissing") throw OutputMissing(message);
    if (type == "SandboxOutputNotConfined") throw OutputNotConfined(message);
    if (type == "SandboxOutputNotRegular") throw OutputNotRegular(message);
    if (type == "SandboxOutputSizeUnknown") throw OutputSizeUnknown(message);
    if (type == "SandboxOutputUnreachable") throw OutputUnreachable(message);
    if (type == "SandboxLandingNotConfined") throw LandingNotConfined(message);
    if (type == "SandboxOutputSinkRequired") throw OutputSinkRequired(message);
    if (type == "SandboxArtifactNameInvalid") throw ArtifactNameInvalid(message, "length");
    if (type == "SandboxArtifactNameCollision") throw ArtifactNameCollision(message);
    if (type == "SandboxTransferCapExceeded") {
      throw TransferCapExceeded("files_out.max_bytes_per_file", message, 10, 11);
    }
    if (type == "SandboxExecOutputLimitExceeded") throw ExecOutputLimitExceeded(64, true);
    if (type == "SandboxFileRefused") {
      throw FileRefused(FileRefusal::not_found, "/guest/x", message);
    }
    if (type == "SandboxShellTransferFailed") throw ShellTransferFailed(message);
    if (type == "SandboxShellTransferUnfinished") throw ShellTransferUnfinished(message, true);
    if (type == "NotSupported") throw NotSupported(message);
    if (type == "BackendError") throw BackendError(message, "provider detail");
    if (type == "ConformanceFailure") {
      throw ConformanceFailure({{"a-probe", "what it proves", message}});
    }
    if (type == "Error") throw Error("Error", message);
    throw InvalidArgument("_raise_error: unknown type \"" + type + "\"", "type");
  });
}

}  // namespace airlock::python
