// airlock._airlock_testing: the in-process `testing` backend in a Python process, for tests.
//
// The backend's objects are linked into this extension alone (never into airlock._airlock or
// libairlock), and register the "testing" type with libairlock's factory when the extension is
// loaded — which only `import airlock.testing` does. A process that never imports it cannot
// build a router over the fake, whatever its configuration says.
//
// It also gives Python what the fake records and the faults it can be told to script: the
// sandboxes it hands out are `InProcessSandbox` objects (a `Sandbox` with the fixture's methods
// beside the protocol's), and `backend_of(router)` reaches the backend's logs and switches.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>

#include "airlock/errors.hpp"
#include "airlock/router.hpp"
#include "airlock/testing.hpp"

namespace py = pybind11;

namespace airlock::testing {
namespace {

double seconds(Milliseconds duration) {
  return static_cast<double>(duration.count()) / 1000.0;
}

Milliseconds positive_seconds(double value, const char* what) {
  if (!std::isfinite(value) || value <= 0) {
    throw py::value_error(std::string(what) + ": must be a finite positive number of seconds");
  }
  return Milliseconds(static_cast<long>(std::ceil(value * 1000)));
}

std::string absolute(const std::string& path, const char* what) {
  if (path.empty() || path.front() != '/') {
    throw py::value_error(std::string(what) + ": '" + path + "' is not an absolute guest path");
  }
  return path;
}

// The wire name of the error a host wants raised: a name ("Timeout"), or a class of
// airlock.errors (its `type`).
std::string error_type_of(py::handle error) {
  if (py::isinstance<py::str>(error)) return error.cast<std::string>();
  if (py::hasattr(error, "type") && py::isinstance<py::str>(error.attr("type"))) {
    return error.attr("type").cast<std::string>();
  }
  throw py::type_error(
      "error: expected an airlock error type — its name (\"Timeout\") or a class of "
      "airlock.errors — or None");
}

// The error a fault throws: None stops the fault.
std::exception_ptr error_from_python(py::handle error, const std::string& message) {
  if (error.is_none()) return nullptr;
  try {
    return scripted_error(error_type_of(error), message);
  } catch (const InvalidArgument& refused) {
    throw py::value_error("error: " + refused.message());
  }
}

py::object entry_kind(EntryKind kind) {
  return py::module_::import("airlock").attr("EntryKind")(std::string(to_string(kind)));
}

// A seed as the reference fake takes one: bytes or str is a file (str as UTF-8); an EntryKind
// is an entry of that kind (a symlink may name its target).
SeedEntry seed_from_python(const std::string& path, py::handle content,
                           const std::optional<std::string>& target) {
  SeedEntry entry{absolute(path, "path"), EntryKind::file, {}};
  // An EntryKind is a str too: it is asked first.
  if (py::isinstance(content, py::module_::import("airlock").attr("EntryKind"))) {
    entry.kind = parse_entry_kind(content.attr("value").cast<std::string>(), "content");
  } else if (py::isinstance<py::bytes>(content) || py::isinstance<py::str>(content)) {
    entry.content = content.cast<std::string>();
  } else {
    throw py::type_error("content: expected bytes, str or an airlock.EntryKind");
  }
  if (target) {
    if (entry.kind != EntryKind::symlink) throw py::value_error("target: only a symlink has one");
    entry.content = *target;
  } else if (entry.kind != EntryKind::file) {
    entry.content.clear();
  }
  return entry;
}

std::shared_ptr<InProcessSandboxBackend> backend_of(const SandboxRouter& router,
                                                    const std::optional<std::string>& name) {
  std::string names;
  for (const auto& backend : router.backends()) {
    if (name ? backend->name() != *name : backend != router.backend()) {
      names += (names.empty() ? "" : ", ") + backend->name();
      continue;
    }
    auto testing = std::dynamic_pointer_cast<InProcessSandboxBackend>(backend);
    if (!testing) {
      throw py::value_error("backend '" + backend->name() + "' is not a testing backend");
    }
    return testing;
  }
  throw py::value_error(name ? "the router has no backend named '" + *name +
                                   "' (registered: " + (names.empty() ? "none" : names) + ")"
                             : std::string("the router has no selected backend"));
}

void bind_sandbox(py::module_& module) {
  py::class_<InProcessSandbox, Sandbox, std::shared_ptr<InProcessSandbox>>(
      module, "InProcessSandbox",
      "A sandbox of the testing backend: the Sandbox protocol over an in-memory filesystem, "
      "plus what it recorded and the faults a test can script on it.")
      .def_property_readonly(
          "commands",
          [](const InProcessSandbox& sandbox) {
            py::list out;
            for (const auto& c : sandbox.commands()) {
              out.append(py::make_tuple(c.command, c.working_directory, seconds(c.timeout)));
            }
            return out;
          },
          "Every exec, in order: (command line — an argv POSIX-quoted, working directory, "
          "timeout in seconds).")
      .def_property_readonly(
          "programs",
          [](const InProcessSandbox& sandbox) {
            py::list out;
            for (const auto& p : sandbox.programs()) {
              out.append(py::make_tuple(p.code, seconds(p.timeout)));
            }
            return out;
          },
          "Every run_code, in order: (code, timeout in seconds).")
      .def(
          "seed",
          [](InProcessSandbox& sandbox, const std::string& path, py::handle content,
             std::optional<std::string> target) {
            sandbox.seed(seed_from_python(path, content, target));
          },
          py::arg("path"), py::arg("content"), py::arg("target") = py::none(),
          "Plant an entry at an absolute path (parents become directories): bytes or str is a "
          "file; EntryKind.DIRECTORY, SYMLINK (with `target`) or OTHER an entry of that kind.")
      .def(
          "contents",
          [](const InProcessSandbox& sandbox, const std::string& path) -> py::object {
            auto bytes = sandbox.contents(absolute(path, "path"));
            if (!bytes) return py::none();
            return py::bytes(*bytes);
          },
          py::arg("path"), "A file's bytes, or None when no file is there.")
      .def(
          "kind_of",
          [](const InProcessSandbox& sandbox, const std::string& path) -> py::object {
            auto kind = sandbox.kind_of(absolute(path, "path"));
            if (!kind) return py::none();
            return entry_kind(*kind);
          },
          py::arg("path"), "What is at an absolute path (an EntryKind), or None.")
      .def(
          "script_output",
          [](InProcessSandbox& sandbox, std::string marker, std::string stdout_text,
             std::string stderr_text, int exit_code) {
            ExecResult answer;
            answer.stdout_bytes = std::move(stdout_text);
            answer.stderr_bytes = std::move(stderr_text);
            answer.exit_code = exit_code;
            sandbox.script_output(std::move(marker), std::move(answer));
          },
          py::arg("marker"), py::arg("stdout") = "", py::arg("stderr") = "",
          py::arg("exit_code") = 0,
          "Answer every exec whose command line (and every run_code whose program) contains "
          "`marker` with this result — before the emulator. Markers are tried in the order "
          "they were scripted.")
      .def(
          "set_default_stdout",
          [](InProcessSandbox& sandbox, std::string text) {
            sandbox.set_default_stdout(std::move(text));
          },
          py::arg("stdout"), "What a command nothing answers prints (run_code included).")
      .def(
          "raise_on_exec",
          [](InProcessSandbox& sandbox, py::handle error, const std::string& message) {
            sandbox.set_exec_error(error_from_python(error, message));
          },
          py::arg("error"), py::arg("message") = "a scripted fault",
          "Every exec and run_code raises this airlock error (a name such as \"Timeout\", or a "
          "class of airlock.errors) after it is recorded; None stops it.")
      .def(
          "misreport_size",
          [](InProcessSandbox& sandbox, const std::string& path,
             std::optional<std::uint64_t> size) {
            sandbox.misreport_size(absolute(path, "path"), size);
          },
          py::arg("path"), py::arg("size"),
          "stat_file and list_dir report `size` for the file at this absolute path instead of "
          "its real size; None reports no size at all.")
      .def("report_true_sizes", &InProcessSandbox::report_true_sizes,
           py::call_guard<py::gil_scoped_release>(), "Undo every misreport_size.")
      .def(
          "hang_reads",
          [](InProcessSandbox& sandbox, const std::string& path, double bound) {
            sandbox.hang_reads(absolute(path, "path"), positive_seconds(bound, "bound"));
          },
          py::arg("path"), py::arg("bound") = 5.0,
          "read_file of this absolute path hangs until release_reads() (then it reads) or "
          "until `bound` seconds pass (then it raises TimeoutError).")
      .def("release_reads", &InProcessSandbox::release_reads,
           py::call_guard<py::gil_scoped_release>(),
           "Every hanging read goes on, and no read hangs any more.")
      .def_property_readonly("hanging_reads", &InProcessSandbox::hanging_reads,
                             "How many reads are hanging right now.")
      .def_property_readonly("commands_running", &InProcessSandbox::commands_running,
                             "How many exec / run_code calls are running in it right now.");
}

void bind_backend(py::module_& module) {
  using Backend = InProcessSandboxBackend;
  py::class_<Backend, std::shared_ptr<Backend>>(
      module, "InProcessSandboxBackend",
      "A testing backend of a router (see backend_of): what it was asked, and its switches.")
      .def_property_readonly("name", &Backend::name)
      .def_property_readonly("keys", &Backend::keys, "Every acquired key, in order.")
      .def_property_readonly("specs", &Backend::specs, "Every acquired spec, in order.")
      .def_property_readonly("disposed", &Backend::disposed, "Every key dispose() was asked for.")
      .def_property_readonly("disposed_kinds", &Backend::disposed_kinds,
                             "Every (key, kind) dispose_kind() was asked for.")
      .def_property_readonly("disposed_instances", &Backend::disposed_instances,
                             "The instance ids that went, in order.")
      .def_property_readonly("purged", &Backend::purged,
                             "Every (scope, thread_id or None) dispose_scope() was asked for.")
      .def_property_readonly("sandboxes", &Backend::live_sandboxes,
                             "The sandboxes handed out and not disposed of.")
      .def(
          "set_acquire_error",
          [](Backend& backend, py::handle error, const std::string& message) {
            backend.set_acquire_error(error_from_python(error, message));
          },
          py::arg("error"), py::arg("message") = "a scripted fault",
          "acquire raises this airlock error (recording nothing); None stops it.")
      .def("set_dispose_fails", &Backend::set_dispose_fails, py::arg("fails") = true,
           "Disposals record the attempt and remove nothing: dispose_kind answers False, "
           "dispose_scope counts 0.")
      .def("set_purge_count", &Backend::set_purge_count, py::arg("count"),
           "What dispose_scope reports (None: how many went).")
      .def_property_readonly("resumed_snapshots", &Backend::resumed_snapshots,
                             "The snapshot ids resumed or forked, in order.")
      .def_property_readonly("deleted_snapshots", &Backend::deleted_snapshots,
                             "The snapshot ids delete_snapshot was asked for, in order.")
      .def(
          "set_snapshot_content",
          [](Backend& backend, std::optional<std::string> content) {
            if (!content) return backend.set_snapshot_content(std::nullopt);
            if (*content == "filesystem") {
              return backend.set_snapshot_content(SnapshotContent::filesystem);
            }
            if (*content == "filesystem+memory") {
              return backend.set_snapshot_content(SnapshotContent::filesystem_and_memory);
            }
            throw py::value_error("content: expected \"filesystem\", \"filesystem+memory\" or "
                                  "None, got \"" + *content + "\"");
          },
          py::arg("content"),
          "What its snapshots are declared to hold (None: none declared). It takes them either "
          "way; the router lets one through only where `snapshot` is among the capabilities.")
      .def(
          "set_snapshot_seconds",
          [](Backend& backend, double seconds) {
            backend.set_snapshot_duration(
                seconds == 0 ? Milliseconds(0) : positive_seconds(seconds, "seconds"));
          },
          py::arg("seconds"),
          "How long each snapshot takes from now on, the sandbox frozen meanwhile (its "
          "commands refused); 0 for none.");
}

}  // namespace
}  // namespace airlock::testing

PYBIND11_MODULE(_airlock_testing, module) {
  module.doc() =
      "The in-process `testing` backend (a policy fixture with no boundary), registered with "
      "the router's backend factory by loading this extension. Tests only: import airlock.testing.";
  // The protocol's types (Sandbox, SandboxKey, SandboxSpec, SandboxRouter) are airlock's own.
  py::module_::import("airlock._airlock");
  module.attr("BACKEND_TYPE") = "testing";
  airlock::testing::bind_sandbox(module);
  airlock::testing::bind_backend(module);
  module.def("backend_of", &airlock::testing::backend_of, py::arg("router"),
             py::arg("name") = py::none(),
             "The router's testing backend: the selected one, or the one named.");
}
