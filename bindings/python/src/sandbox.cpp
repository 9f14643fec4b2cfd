// The sandbox handle. Every method converts its arguments while holding the GIL, then releases
// it for the operation itself, and converts the result back with the GIL held again — so Python
// threads and event loops keep running while a guest command does.
#include "airlock/sandbox.hpp"

#include <pybind11/stl.h>

#include <functional>
#include <mutex>
#include <optional>
#include <stop_token>
#include <unordered_map>

#include "bindings.hpp"
#include "convert.hpp"
#include "sandbox.hpp"

namespace airlock::python {

Command command_from_python(py::handle command) {
  if (py::isinstance<py::str>(command)) return Command::shell(command.cast<std::string>());
  if (py::isinstance<py::list>(command) || py::isinstance<py::tuple>(command)) {
    std::vector<std::string> arguments;
    for (py::handle argument : command) {
      if (!py::isinstance<py::str>(argument)) {
        throw py::type_error("command: every argv item must be a str");
      }
      arguments.push_back(argument.cast<std::string>());
    }
    return Command::argv(std::move(arguments));
  }
  throw py::type_error("command: expected a shell line (str) or an argv (list of str)");
}

namespace {

struct SandboxOrigin {
  std::weak_ptr<Sandbox> sandbox;  // expired: the address was reused by another instance
  std::string work_dir;
  std::weak_ptr<SandboxRouter> router;
  bool has_router = false;
};

std::mutex& origins_mutex() {
  static std::mutex mutex;
  return mutex;
}

// Never destroyed: a handle may outlive the module's teardown at interpreter exit.
std::unordered_map<const Sandbox*, SandboxOrigin>& origins() {
  static auto* table = new std::unordered_map<const Sandbox*, SandboxOrigin>();
  return *table;
}

std::optional<SandboxOrigin> origin_of(const Sandbox& sandbox) {
  std::lock_guard lock(origins_mutex());
  const auto found = origins().find(&sandbox);
  if (found == origins().end() || found->second.sandbox.expired()) return std::nullopt;
  return found->second;
}

// The router that disposes this handle; TypeError when it has none, RuntimeError when it is gone.
std::shared_ptr<SandboxRouter> disposing_router(const Sandbox& sandbox, const char* what) {
  const auto origin = origin_of(sandbox);
  if (!origin || !origin->has_router) {
    throw py::type_error(std::string(what) +
                         ": this sandbox was not acquired from a SandboxRouter (a tool call's "
                         "sandbox is disposed by the call: use call.condemn())");
  }
  auto router = origin->router.lock();
  if (!router) {
    throw std::runtime_error(std::string(what) +
                             ": the SandboxRouter that acquired this sandbox no longer exists");
  }
  return router;
}

bool dispose_through_router(Sandbox& sandbox, const char* what) {
  const auto router = disposing_router(sandbox, what);
  const SandboxKey key = sandbox.key();
  const std::string kind = sandbox.kind();
  py::gil_scoped_release release;
  const std::string instance = sandbox.instance_id();
  return router->dispose_kind(key, kind, instance);
}

std::string bytes_or_text(py::handle content, const char* what) {
  if (py::isinstance<py::bytes>(content) || py::isinstance<py::str>(content)) {
    return content.cast<std::string>();  // str → UTF-8; bytes verbatim
  }
  if (py::isinstance<py::bytearray>(content) || py::isinstance<py::memoryview>(content)) {
    return py::bytes(content.attr("tobytes")()).cast<std::string>();
  }
  throw py::type_error(std::string(what) + ": expected bytes or str");
}

std::uint64_t positive_count(py::handle value, const char* what) {
  if (py::isinstance<py::bool_>(value) || !py::isinstance<py::int_>(value)) {
    throw py::type_error(std::string(what) + ": expected an int");
  }
  if (py::reinterpret_borrow<py::int_>(value) < py::int_(1)) {
    throw InvalidArgument(
        std::string(what) + ": must be at least 1, got " + std::string(py::str(value)), what);
  }
  return value.cast<std::uint64_t>();
}

}  // namespace

void remember_origin(const std::shared_ptr<Sandbox>& sandbox, const SandboxSpec& spec,
                     const std::shared_ptr<SandboxRouter>& router) {
  if (!sandbox) return;
  std::lock_guard lock(origins_mutex());
  auto& table = origins();
  std::erase_if(table, [](const auto& entry) { return entry.second.sandbox.expired(); });
  auto [entry, added] = table.try_emplace(sandbox.get());
  if (!added) {
    if (router && !entry->second.has_router) {
      entry->second.router = router;
      entry->second.has_router = true;
    }
    return;
  }
  entry->second = SandboxOrigin{sandbox, spec.work_dir(), router, router != nullptr};
}

std::string working_directory_or_default(const Sandbox& sandbox, py::handle working_directory) {
  if (!working_directory.is_none()) {
    if (!py::isinstance<py::str>(working_directory)) {
      throw py::type_error("working_directory: expected a str (or None for the spec's work dir)");
    }
    return working_directory.cast<std::string>();
  }
  if (const auto origin = origin_of(sandbox)) return origin->work_dir;
  throw py::type_error(
      "working_directory: required for this sandbox, which was not acquired from a "
      "SandboxRouter or a tool call, so there is no spec whose work dir it defaults to");
}

void bind_sandbox(py::module_& module) {
  py::class_<std::stop_source>(module, "StopSource",
                               "Cancels the exec it is passed to: request_stop() kills the "
                               "command's process group (from any thread).")
      .def(py::init<>())
      .def("request_stop", [](std::stop_source& source) { return source.request_stop(); })
      .def_property_readonly("stop_requested", &std::stop_source::stop_requested);

  using SandboxPtr = std::shared_ptr<Sandbox>;
  py::class_<Sandbox, SandboxPtr>(
      module, "Sandbox",
      "A sandbox handle. Path methods confine to `working_directory` (default: the work dir of "
      "the spec it was acquired with) and refuse escapes and links in any parent with "
      "ConfinementError (a ValueError), never NotFound. A context manager: leaving `with` "
      "disposes it. Safe to use from many threads at once; the GIL is released during every "
      "operation.")
      .def_property_readonly("instance_id", &Sandbox::instance_id)
      .def_property_readonly("key", &Sandbox::key)
      .def_property_readonly("kind", &Sandbox::kind)
      .def(
          "write_file",
          [](Sandbox& sandbox, const std::string& path, py::handle content,
             py::handle working_directory) {
            const std::string bytes = bytes_or_text(content, "content");
            const std::string directory = working_directory_or_default(sandbox, working_directory);
            py::gil_scoped_release release;
            sandbox.write_file(path, bytes, directory);
          },
          py::arg("path"), py::arg("content"), py::kw_only(), py::arg("working_directory") = py::none(),
          "Write bytes (or str, as UTF-8) at path, creating parents and replacing what was there.")
      .def(
          "exec",
          [](Sandbox& sandbox, py::handle command, py::handle working_directory,
             py::handle timeout, py::handle max_output_bytes, bool truncate, py::handle stdin_data,
             std::optional<std::map<std::string, std::string>> environment,
             const std::stop_source* stop, py::object on_output) {
            const Command parsed = command_from_python(command);
            ExecOptions options;
            options.working_directory = working_directory_or_default(sandbox, working_directory);
            options.timeout = seconds_to_milliseconds(timeout, "timeout");
            if (!max_output_bytes.is_none()) {
              options.max_output_bytes = positive_count(max_output_bytes, "max_output_bytes");
            }
            options.overflow = truncate ? OutputOverflow::truncate : OutputOverflow::refuse;
            if (!stdin_data.is_none()) options.stdin_bytes = bytes_or_text(stdin_data, "stdin");
            if (environment) {
              for (auto& [name, value] : *environment)
                options.environment.emplace_back(name, value);
            }
            if (!on_output.is_none() && !PyCallable_Check(on_output.ptr())) {
              throw py::type_error("on_output: expected a callable (stream, data)");
            }
            // The command's own stop: the caller's StopSource, and a callback that raised.
            std::stop_source stopping;
            std::optional<std::stop_callback<std::function<void()>>> forward;
            if (stop != nullptr) {
              forward.emplace(stop->get_token(),
                              std::function<void()>([&stopping] { stopping.request_stop(); }));
            }
            options.stop = stopping.get_token();
            // A callback that raises stops the command; its exception is raised once exec has
            // returned, never thrown through the backend's loop.
            std::optional<py::error_already_set> raised;
            if (!on_output.is_none()) {
              options.on_output = [&](OutputStream stream, std::string_view bytes) {
                py::gil_scoped_acquire acquire;
                if (raised) return;
                try {
                  on_output(stream == OutputStream::stdout_stream ? "stdout" : "stderr",
                            py::bytes(bytes.data(), bytes.size()));
                } catch (py::error_already_set& error) {
                  raised.emplace(std::move(error));
                  stopping.request_stop();
                }
              };
            }
            ExecResult result;
            try {
              py::gil_scoped_release release;
              result = sandbox.exec(parsed, options);
            } catch (const Timeout&) {
              if (raised) throw std::move(*raised);
              throw;
            }
            if (raised) throw std::move(*raised);
            // A backend that collected instead of streaming: its output is handed over now, as
            // the contract has it (a no-op for one that streamed).
            if (options.on_output) deliver_collected_output(result, options);
            if (raised) throw std::move(*raised);
            return result;
          },
          py::arg("command"), py::kw_only(), py::arg("working_directory") = py::none(), py::arg("timeout") = 60,
          py::arg("max_output_bytes") = py::none(), py::arg("truncate") = false,
          py::arg("stdin") = py::none(), py::arg("environment") = py::none(),
          py::arg("stop") = nullptr, py::arg("on_output") = py::none(),
          "Run an argv (list of str, never through a shell) or a shell line (str). "
          "SandboxTimeout (a TimeoutError) means exactly that `timeout` seconds passed, or that "
          "`stop` (a StopSource) was requested: the command's process group is then killed; "
          "its `sandbox_reset` says whether the sandbox must be condemned (the kill was not "
          "confirmed). `on_output(stream, data)`, when given, is called with each chunk of output "
          "as it arrives (stream is \"stdout\" or \"stderr\", data is bytes), on the thread "
          "that called exec, and the result's stdout/stderr are then empty; a backend that cannot "
          "stream calls it once per stream when the command ends. An exception it raises stops "
          "the command and is raised from exec.")
      .def(
          "exec_bounded",
          [](Sandbox& sandbox, py::handle command, py::handle working_directory,
             py::handle timeout, py::handle max_output_bytes) {
            const Command parsed = command_from_python(command);
            const auto millis = seconds_to_milliseconds(timeout, "timeout");
            const auto ceiling = positive_count(max_output_bytes, "max_output_bytes");
            const std::string directory = working_directory_or_default(sandbox, working_directory);
            py::gil_scoped_release release;
            return sandbox.exec_bounded(parsed, directory, millis, ceiling);
          },
          py::arg("command"), py::kw_only(), py::arg("working_directory") = py::none(), py::arg("timeout"),
          py::arg("max_output_bytes"),
          "exec with an output ceiling that refuses (SandboxExecOutputLimitExceeded).")
      .def(
          "run_code",
          [](Sandbox& sandbox, const std::string& code, py::handle timeout) {
            const auto millis = seconds_to_milliseconds(timeout, "timeout");
            py::gil_scoped_release release;
            return sandbox.run_code(code, millis);
          },
          py::arg("code"), py::kw_only(), py::arg("timeout") = 60,
          "Run Python code with the guest's python3 in the spec's work dir.")
      .def(
          "stat_file",
          [](Sandbox& sandbox, const std::string& path, py::handle working_directory) {
            const std::string directory = working_directory_or_default(sandbox, working_directory);
            py::gil_scoped_release release;
            return sandbox.stat_file(path, directory);
          },
          py::arg("path"), py::kw_only(), py::arg("working_directory") = py::none(),
          "Describe path like lstat (a link is a symlink, never followed); None when absent.")
      .def(
          "read_file",
          [](Sandbox& sandbox, const std::string& path, py::handle working_directory,
             py::handle max_bytes) {
            const auto cap = positive_count(max_bytes, "max_bytes");
            const std::string directory = working_directory_or_default(sandbox, working_directory);
            std::string content;
            {
              py::gil_scoped_release release;
              content = sandbox.read_file(path, directory, cap);
            }
            return py::bytes(content);
          },
          py::arg("path"), py::kw_only(), py::arg("working_directory") = py::none(),
          py::arg("max_bytes") = kDefaultTransferLimits.max_bytes_per_file,
          "Read a regular file as bytes. A larger file than max_bytes is refused "
          "(SandboxTransferCapExceeded), never truncated.")
      .def(
          "list_dir",
          [](Sandbox& sandbox, const std::string& path, py::handle working_directory) {
            const std::string directory = working_directory_or_default(sandbox, working_directory);
            py::gil_scoped_release release;
            return sandbox.list_dir(path, directory);
          },
          py::arg("path"), py::kw_only(), py::arg("working_directory") = py::none())
      .def(
          "remove",
          [](Sandbox& sandbox, const std::string& path, py::handle working_directory,
             bool recursive) {
            const std::string directory = working_directory_or_default(sandbox, working_directory);
            py::gil_scoped_release release;
            sandbox.remove(path, directory, recursive);
          },
          py::arg("path"), py::kw_only(), py::arg("working_directory") = py::none(),
          py::arg("recursive") = false,
          "Remove path; a missing path is success; a link is removed, never followed.")
      .def(
          "socket_channel",
          [](Sandbox& sandbox) -> py::object {
            std::optional<Sandbox::SocketChannel> channel;
            {
              py::gil_scoped_release release;
              channel = sandbox.socket_channel();
            }
            if (!channel) return py::none();
            py::dict out;
            out["host_directory"] = channel->host_directory;
            out["guest_directory"] = channel->guest_directory;
            return out;
          },
          "The host/guest directory pair for unix sockets, or None when the backend has none.")
      .def(
          "snapshot",
          [](Sandbox& sandbox) {
            py::gil_scoped_release release;
            return sandbox.snapshot();
          },
          "Save this sandbox's state now (what it holds is its backend's snapshot_content) and "
          "return the SnapshotRecord. It is taken between commands: while one of this sandbox's "
          "commands runs it raises BackendError rather than capture it half-run — "
          "SandboxRouter.snapshot(key, spec) waits for them instead. NotSupported from a "
          "backend that takes no snapshots.")
      .def(
          "dispose",
          [](Sandbox& sandbox) { return dispose_through_router(sandbox, "dispose"); },
          "Dispose this instance through the router that acquired it (the key's other kinds, "
          "and a newer instance of this kind, are left alone). True when nothing of it remains "
          "(an instance already gone included), False when the backend could not remove it; "
          "never raises for what the backend did.")
      .def(
          "__enter__",
          [](py::object self) {
            disposing_router(self.cast<Sandbox&>(), "with sandbox");
            return self;
          },
          "`with router.acquire(key, spec) as sandbox:` disposes the sandbox however the block "
          "ends; the block's own exception propagates.")
      .def(
          "__exit__",
          [](Sandbox& sandbox, py::handle, py::handle, py::handle) {
            dispose_through_router(sandbox, "with sandbox");
            return false;
          },
          py::arg("exc_type"), py::arg("exc_value"), py::arg("traceback"))
      .def_property_readonly(
          "work_dir",
          [](const Sandbox& sandbox) -> std::optional<std::string> {
            if (const auto origin = origin_of(sandbox)) return origin->work_dir;
            return std::nullopt;
          },
          "The work dir of the spec this instance was acquired with (what `working_directory` "
          "defaults to), or None for a handle that came from neither a router nor a tool call.")
      .def("__repr__", [](Sandbox& sandbox) {
        return "<airlock.Sandbox kind=" + std::string(py::repr(py::str(sandbox.kind()))) +
               " instance_id=" + std::string(py::repr(py::str(sandbox.instance_id()))) + ">";
      });
}

}  // namespace airlock::python
