// The sandbox handle. Every method converts its arguments while holding the GIL, then releases
// it for the operation itself, and converts the result back with the GIL held again — so Python
// threads and event loops keep running while a guest command does.
#include "airlock/sandbox.hpp"

#include <pybind11/stl.h>

#include <functional>
#include <optional>
#include <stop_token>

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
      "A sandbox handle. Path methods confine to `working_directory` and refuse escapes and "
      "links in any parent with ConfinementError (a ValueError), never NotFound. Safe to use "
      "from many threads at once; the GIL is released during every operation.")
      .def_property_readonly("instance_id", &Sandbox::instance_id)
      .def_property_readonly("key", &Sandbox::key)
      .def_property_readonly("kind", &Sandbox::kind)
      .def(
          "write_file",
          [](Sandbox& sandbox, const std::string& path, py::handle content,
             const std::string& working_directory) {
            const std::string bytes = bytes_or_text(content, "content");
            py::gil_scoped_release release;
            sandbox.write_file(path, bytes, working_directory);
          },
          py::arg("path"), py::arg("content"), py::kw_only(), py::arg("working_directory"),
          "Write bytes (or str, as UTF-8) at path, creating parents and replacing what was there.")
      .def(
          "exec",
          [](Sandbox& sandbox, py::handle command, const std::string& working_directory,
             py::handle timeout, py::handle max_output_bytes, bool truncate, py::handle stdin_data,
             std::optional<std::map<std::string, std::string>> environment,
             const std::stop_source* stop, py::object on_output) {
            const Command parsed = command_from_python(command);
            ExecOptions options;
            options.working_directory = working_directory;
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
          py::arg("command"), py::kw_only(), py::arg("working_directory"), py::arg("timeout") = 60,
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
          [](Sandbox& sandbox, py::handle command, const std::string& working_directory,
             py::handle timeout, py::handle max_output_bytes) {
            const Command parsed = command_from_python(command);
            const auto millis = seconds_to_milliseconds(timeout, "timeout");
            const auto ceiling = positive_count(max_output_bytes, "max_output_bytes");
            py::gil_scoped_release release;
            return sandbox.exec_bounded(parsed, working_directory, millis, ceiling);
          },
          py::arg("command"), py::kw_only(), py::arg("working_directory"), py::arg("timeout"),
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
          [](Sandbox& sandbox, const std::string& path, const std::string& working_directory) {
            py::gil_scoped_release release;
            return sandbox.stat_file(path, working_directory);
          },
          py::arg("path"), py::kw_only(), py::arg("working_directory"),
          "Describe path like lstat (a link is a symlink, never followed); None when absent.")
      .def(
          "read_file",
          [](Sandbox& sandbox, const std::string& path, const std::string& working_directory,
             py::handle max_bytes) {
            const auto cap = positive_count(max_bytes, "max_bytes");
            std::string content;
            {
              py::gil_scoped_release release;
              content = sandbox.read_file(path, working_directory, cap);
            }
            return py::bytes(content);
          },
          py::arg("path"), py::kw_only(), py::arg("working_directory"),
          py::arg("max_bytes") = kDefaultTransferLimits.max_bytes_per_file,
          "Read a regular file as bytes. A larger file than max_bytes is refused "
          "(SandboxTransferCapExceeded), never truncated.")
      .def(
          "list_dir",
          [](Sandbox& sandbox, const std::string& path, const std::string& working_directory) {
            py::gil_scoped_release release;
            return sandbox.list_dir(path, working_directory);
          },
          py::arg("path"), py::kw_only(), py::arg("working_directory"))
      .def(
          "remove",
          [](Sandbox& sandbox, const std::string& path, const std::string& working_directory,
             bool recursive) {
            py::gil_scoped_release release;
            sandbox.remove(path, working_directory, recursive);
          },
          py::arg("path"), py::kw_only(), py::arg("working_directory"),
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
      .def("__repr__", [](Sandbox& sandbox) {
        return "<airlock.Sandbox kind=" + std::string(py::repr(py::str(sandbox.kind()))) +
               " instance_id=" + std::string(py::repr(py::str(sandbox.instance_id()))) + ">";
      });
}

}  // namespace airlock::python
