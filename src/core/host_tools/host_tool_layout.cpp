// The guest run layout and the two generated guest files: the shim and the launcher.
#include <algorithm>
#include <array>
#include <cstdio>
#include <set>

#include "airlock/errors.hpp"
#include "airlock/host_tool_transport.hpp"
#include "airlock/paths.hpp"

namespace airlock {
namespace {

constexpr const char* kTransportDirectory = "host_tools";

// Names the launcher and the transport write beside the program.
const std::set<std::string, std::less<>> kTransportFiles = {
    kShimModule,         "run_program.sh",    "program_output.txt", "program_exit_code",
    "program_exit_code.part", "program_pid",  "program_pid.part",   "program_session",
    "program_session.part",   kCallsDirectory};

// Modules a program's stem must not answer to: it shares a directory with the shim, and that
// directory is first on sys.path from start-up, so such a file would be imported instead of the
// module it stands for (or would run before the program does).
const std::set<std::string, std::less<>> kReservedStems = {
    "airlock_host_tools",
    // what the shim imports
    "json", "os", "time", "socket",
    // what CPython imports at start-up (frozen from 3.11, but the guest's interpreter is not
    // ours to pin)
    "encodings", "site", "sitecustomize", "usercustomize", "abc", "codecs", "genericpath", "io",
    "posixpath", "stat", "_collections_abc", "_sitebuiltins", "_bootlocale"};

// The module a file would be imported as: its stem, but only when its suffix is one a Python
// loader answers to (`json.py`, `json.cpython-311-x86_64-linux-gnu.so`), not `json.txt`.
std::optional<std::string> module_stem(std::string_view name) {
  const auto dot = name.find('.');
  if (dot == std::string_view::npos) return std::nullopt;
  const std::string_view stem = name.substr(0, dot);
  const std::string_view suffix = name.substr(dot + 1);
  static constexpr std::array<std::string_view, 5> kLoaderSuffixes = {"py", "pyc", "pyw", "so",
                                                                      "pyd"};
  const bool loader = std::find(kLoaderSuffixes.begin(), kLoaderSuffixes.end(), suffix) !=
                          kLoaderSuffixes.end() ||
                      (suffix.find('.') != std::string_view::npos &&
                       (suffix.ends_with(".so") || suffix.ends_with(".pyd")));
  if (!loader) return std::nullopt;
  return std::string(stem);
}

bool ascii_identifier(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

const std::set<std::string, std::less<>> kPythonKeywords = {
    "False", "None",   "True",    "and",      "as",    "assert", "async",  "await",
    "break", "class",  "continue", "def",     "del",   "elif",   "else",   "except",
    "finally", "for",  "from",    "global",   "if",    "import", "in",     "is",
    "lambda", "nonlocal", "not",  "or",       "pass",  "raise",  "return", "try",
    "while", "with",   "yield",   "match",    "case",  "type",   "_"};

// Globals of the generated module a wrapper must not replace.
const std::set<std::string, std::less<>> kShimGlobals = {
    "HostToolError", "call",  "_CALLS", "_HERE", "_POLL", "_TIMEOUT", "_SOCKET", "_claim",
    "_publish",      "_over_files", "_over_socket", "_answer", "json", "os", "time"};

}  // namespace

GuestRunLayout guest_run_layout(std::string_view run_directory, std::string_view program) {
  if (run_directory.empty() || run_directory.front() != '/') {
    throw InvalidArgument("run_directory \"" + std::string(run_directory) +
                              "\" is not an absolute guest path",
                          "run_directory");
  }
  if (run_directory.find(':') != std::string_view::npos) {
    throw InvalidArgument("run_directory \"" + std::string(run_directory) +
                              "\" contains ':', which PYTHONPATH cannot carry",
                          "run_directory");
  }
  if (run_directory.find('\\') != std::string_view::npos ||
      run_directory.find('\0') != std::string_view::npos) {
    throw InvalidArgument("run_directory contains a backslash or a NUL", "run_directory");
  }
  if (program.empty() || program == "." || program == ".." ||
      program.find('/') != std::string_view::npos || program.find('\0') != std::string_view::npos) {
    throw InvalidArgument("program \"" + std::string(program) + "\" is not a plain file name",
                          "program");
  }
  if (kTransportFiles.contains(program)) {
    throw InvalidArgument("program \"" + std::string(program) +
                              "\" is one of the transport's own file names",
                          "program");
  }
  if (auto stem = module_stem(program); stem && kReservedStems.contains(*stem)) {
    throw InvalidArgument("program \"" + std::string(program) + "\" would be imported as module '" +
                              *stem +
                              "', which the shim or the interpreter needs; choose another name",
                          "program");
  }
  const std::string root = normalize_guest_path(run_directory);
  if (root == "/") throw InvalidArgument("run_directory cannot be the guest root", "run_directory");
  const std::string tools = root + "/" + kTransportDirectory;
  GuestRunLayout layout;
  layout.directory = root;
  layout.work = root + "/" + kWorkDirectory;
  layout.program = tools + "/" + std::string(program);
  layout.shim = tools + "/" + kShimModule;
  layout.launcher = tools + "/run_program.sh";
  layout.calls = tools + "/" + kCallsDirectory;
  layout.output = tools + "/program_output.txt";
  layout.exit_code = tools + "/program_exit_code";
  layout.pid = tools + "/program_pid";
  layout.session = tools + "/program_session";
  return layout;
}

std::string_view to_string(HostToolChannel channel) noexcept {
  return channel == HostToolChannel::socket ? "socket" : "files";
}

std::string host_tool_shim(const std::vector<std::string>& tool_names,
                           Milliseconds call_timeout) {
  if (call_timeout.count() <= 0) {
    throw InvalidArgument("call_timeout must be positive", "call_timeout");
  }
  char timeout_text[32];
  std::snprintf(timeout_text, sizeof timeout_text, "%.3f",
                static_cast<double>(call_timeout.count()) / 1000.0);
  std::string out = R"PY("""Call the tools the host registered for this run.

    import airlock_host_tools as tools
    tools.call("lookup", key="x")      # or tools.lookup(key="x")

A refusal or a host that does not answer raises HostToolError. This module is a convenience,
not a control: every check happens on the host.
"""
import json
import os
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_CALLS = os.path.join(_HERE, "host_tool_calls")
_POLL = 0.05
_TIMEOUT = )PY";
  out += timeout_text;
  out += R"PY(
_SOCKET = os.environ.get("AIRLOCK_HOST_TOOLS_SOCKET")


class HostToolError(RuntimeError):
    """The host refused this call, or did not answer it in time."""


def _claim():
    os.makedirs(_CALLS, exist_ok=True)
    number = 1
    while True:
        ident = "%04d" % number
        try:
            fd = os.open(os.path.join(_CALLS, ident + ".claim"),
                         os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            number += 1
            continue
        os.close(fd)
        return ident


def _publish(ident, body):
    final = os.path.join(_CALLS, ident + ".request.json")
    part = final + ".part"
    with open(part, "w", encoding="utf-8") as stream:
        json.dump(body, stream)
    os.rename(part, final)


def _over_files(name, arguments):
    ident = _claim()
    try:
        _publish(ident, {"id": ident, "name": name, "arguments": arguments})
    except BaseException:
        try:
            _publish(ident, {"id": ident, "abandoned": True})
        except Exception:
            pass
        raise
    answer_path = os.path.join(_CALLS, ident + ".response.json")
    deadline = time.monotonic() + _TIMEOUT
    while True:
        try:
            with open(answer_path, encoding="utf-8") as stream:
                return json.load(stream)
        except (OSError, ValueError):
            pass
        if time.monotonic() >= deadline:
            raise HostToolError(
                "Error: the host did not answer this call within %g seconds" % _TIMEOUT)
        time.sleep(_POLL)


def _over_socket(name, arguments):
    import socket
    request = json.dumps({"name": name, "arguments": arguments}).encode("utf-8") + b"\n"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(_TIMEOUT)
        try:
            connection.connect(_SOCKET)
            connection.sendall(request)
            chunks = []
            while True:
                chunk = connection.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        except socket.timeout:
            raise HostToolError(
                "Error: the host did not answer this call within %g seconds" % _TIMEOUT)
    try:
        return json.loads(b"".join(chunks).decode("utf-8"))
    except ValueError:
        raise HostToolError("Error: the host's answer could not be read")


def call(name, **arguments):
    """Call the host tool `name` with keyword arguments; return its JSON value."""
    answer = _over_socket(name, arguments) if _SOCKET else _over_files(name, arguments)
    if isinstance(answer, dict) and "value" in answer:
        return answer["value"]
    refusal = answer.get("refusal") if isinstance(answer, dict) else None
    raise HostToolError(refusal or "Error: the host refused this call")
)PY";
  std::set<std::string> written;
  for (const auto& name : tool_names) {
    if (!ascii_identifier(name) || kPythonKeywords.contains(name) || kShimGlobals.contains(name) ||
        name.starts_with("__") || !written.insert(name).second) {
      continue;
    }
    out += "\n\ndef " + name + "(**arguments):\n    \"\"\"Call the host tool '" + name +
           "'.\"\"\"\n    return call(\"" + name + "\", **arguments)\n";
  }
  return out;
}

std::string launcher_script(const GuestRunLayout& layout, std::string_view interpreter) {
  const std::string tools = layout.shim.substr(0, layout.shim.rfind('/'));
  // The program's environment: the shim's directory first on PYTHONPATH, then only inherited
  // entries that are absolute, canonical and outside this run (an entry naming the run could only
  // be an attempt to make guest files importable at start-up). User site-packages are off.
  std::string inner;
  inner += "airlock_path=" + posix_quote(tools) + "\n";
  inner += "airlock_run=" + posix_quote(layout.directory) + "\n";
  inner += "set -f\nairlock_ifs=$IFS\nIFS=:\n";
  inner += "for airlock_entry in ${PYTHONPATH-}; do\n";
  inner += "  case $airlock_entry in /*) ;; *) continue ;; esac\n";
  inner += "  case $airlock_entry in */./*|*/../*|*//*|*/.|*/..) continue ;; esac\n";
  inner += "  case $airlock_entry in \"$airlock_run\"|\"$airlock_run\"/*) continue ;; esac\n";
  inner += "  airlock_path=\"$airlock_path:$airlock_entry\"\n";
  inner += "done\nIFS=$airlock_ifs\nset +f\n";
  inner += "PYTHONPATH=$airlock_path\nexport PYTHONPATH\n";
  inner += "unset airlock_path airlock_run airlock_ifs airlock_entry\n";
  inner += "PYTHONUNBUFFERED=1 PYTHONNOUSERSITE=1 " + posix_quote(interpreter) + " " +
           posix_quote(layout.program) + " </dev/null >" + posix_quote(layout.output) +
           " 2>&1 &\n";
  inner += "airlock_child=$!\n";
  inner += "printf '%s' \"$airlock_child\" >" + posix_quote(layout.pid + ".part") + " && mv -f " +
           posix_quote(layout.pid + ".part") + " " + posix_quote(layout.pid) + "\n";
  inner += "wait \"$airlock_child\"\n";
  inner += "printf '%s' \"$?\" >" + posix_quote(layout.exit_code + ".part") + " && mv -f " +
           posix_quote(layout.exit_code + ".part") + " " + posix_quote(layout.exit_code) + "\n";

  const std::string with_session = "printf '%s' \"$$\" >" + posix_quote(layout.session + ".part") +
                                   " && mv -f " + posix_quote(layout.session + ".part") + " " +
                                   posix_quote(layout.session) + "\n" + inner;
  std::string script = "#!/bin/sh\n# Starts the program detached and records its pid and exit code.\n";
  script += "mkdir -p " + posix_quote(layout.work) + " && cd " + posix_quote(layout.work) +
            " || exit 1\n";
  script += "if command -v setsid >/dev/null 2>&1; then\n";
  script += "  setsid nohup sh -c " + posix_quote(with_session) + " >/dev/null 2>&1 </dev/null &\n";
  script += "  printf 'airlock-host-tools: session\\n'\n";
  script += "else\n";
  script += "  nohup sh -c " + posix_quote(inner) + " >/dev/null 2>&1 </dev/null &\n";
  script += "fi\n";
  return script;
}

}  // namespace airlock
