// The guest run layout and the two generated guest files: the shim and the launcher.
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

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

// ---- which names get a wrapper -----------------------------------------------------------

std::vector<utf8proc_int32_t> code_points_of(std::string_view text) {
  std::vector<utf8proc_int32_t> out;
  for (std::size_t offset = 0; offset < text.size();) {
    utf8proc_int32_t code_point = -1;
    const auto length =
        utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data()) + offset,
                         static_cast<utf8proc_ssize_t>(text.size() - offset), &code_point);
    if (length <= 0) return {};  // not UTF-8: no identifier
    out.push_back(code_point);
    offset += static_cast<std::size_t>(length);
  }
  return out;
}

// Python's identifier rule (PEP 3131), read through the Unicode categories behind XID_Start and
// XID_Continue. Where this and the guest's interpreter disagree on a rare code point, the cost is
// a wrapper the guest cannot spell, or one it lacks (it still has `call`): never a broken shim,
// because wrappers are bound by assignment, not by parsing the name.
bool identifier_start(utf8proc_int32_t c) {
  if (c == '_') return true;
  switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_NL:
      return true;
    default:
      return false;
  }
}

bool identifier_continue(utf8proc_int32_t c) {
  if (identifier_start(c)) return true;
  switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

bool python_identifier(std::string_view name) {
  const auto code_points = code_points_of(name);
  if (code_points.empty() || !identifier_start(code_points.front())) return false;
  return std::all_of(code_points.begin() + 1, code_points.end(), identifier_continue);
}

// How the guest's parser spells an identifier: NFKC (so `ｏｐｅｎ` is `open`).
std::optional<std::string> nfkc(std::string_view name) {
  if (name.find('\0') != std::string_view::npos) return std::nullopt;
  const std::string terminated(name);
  utf8proc_uint8_t* folded =
      utf8proc_NFKC(reinterpret_cast<const utf8proc_uint8_t*>(terminated.c_str()));
  if (folded == nullptr) return std::nullopt;
  std::string out(reinterpret_cast<const char*>(folded));
  std::free(folded);
  return out;
}

// Python's hard keywords: `def` cannot bind them and the guest cannot spell them as attributes.
const std::set<std::string, std::less<>> kPythonKeywords = {
    "False", "None",     "True",  "and",    "as",   "assert", "async",  "await",    "break",
    "class", "continue", "def",   "del",    "elif", "else",   "except", "finally",  "for",
    "from",  "global",   "if",    "import", "in",   "is",     "lambda", "nonlocal", "not",
    "or",    "pass",     "raise", "return", "try",  "while",  "with",   "yield"};

// Names a wrapper never takes. The module's own API (`call`, `HostToolError`) and its installer;
// and, so that the same tools get wrappers as under the reference's shim, every global that shim
// reads (our machinery reads none of them from the module — they are its closure's locals — but a
// guest written against the reference finds the same attributes here). Dunder names are refused
// separately: they mean something to the module itself (`__getattr__`, `__all__`, …).
const std::set<std::string, std::less<>> kShimReserved = {
    "call",          "HostToolError", "_airlock_install",
    "BaseException", "Exception",     "FileExistsError",
    "OSError",       "RuntimeError",  "ValueError",
    "_CALLS",        "_HERE",         "_POLL",
    "_TIMEOUT",      "_claim",        "_publish",
    "json",          "open",          "os",
    "time"};

bool dunder(std::string_view name) {
  return name.size() > 4 && name.starts_with("__") && name.ends_with("__");
}

// The wrappers the shim binds: (spelling, tool name), one per spelling, the first tool in
// sorted order winning a spelling two names share after NFKC.
std::vector<std::pair<std::string, std::string>> shim_wrappers(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  std::vector<std::pair<std::string, std::string>> out;
  std::set<std::string> spellings;
  for (const auto& name : names) {
    if (!python_identifier(name)) continue;
    const std::optional<std::string> spelled = nfkc(name);
    if (!spelled || !python_identifier(*spelled) || kPythonKeywords.contains(*spelled) ||
        kShimReserved.contains(*spelled) || dunder(*spelled) ||
        !spellings.insert(*spelled).second) {
      continue;
    }
    out.emplace_back(*spelled, name);
  }
  return out;
}

// A Python string literal of UTF-8 text, in ASCII alone (the shim's source stays 7-bit).
std::string python_string_literal(std::string_view text) {
  std::string out = "\"";
  char escape[16];
  for (utf8proc_int32_t c : code_points_of(text)) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
    } else if (c < 0x80) {
      std::snprintf(escape, sizeof escape, "\\x%02x", static_cast<unsigned>(c));
      out += escape;
    } else {
      std::snprintf(escape, sizeof escape, "\\U%08x", static_cast<unsigned>(c));
      out += escape;
    }
  }
  return out + "\"";
}

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
  // The machinery lives in one function's closure, and every name it uses — builtins, modules,
  // its own helpers — is a local bound before the first wrapper exists. Wrappers are module
  // globals, so a tool named `open`, `json`, `print` or `Exception` can shadow nothing the
  // machinery reads; the names the module's API needs (`call`, `HostToolError`) never get one.
  std::string out = R"PY("""Call the tools the host registered for this run.

    import airlock_host_tools as tools
    tools.call("lookup", key="x")      # or tools.lookup(key="x")

A refusal or a host that does not answer raises HostToolError. Every tool is reachable through
call(); a tool whose name Python can spell, and which names nothing of this module, also has a
function of its own. This module is a convenience, not a control: every check happens on the host.
"""


def _airlock_install(namespace, wrappers, call_timeout):
    import builtins
    import json
    import os
    import time

    BaseException = builtins.BaseException
    Exception = builtins.Exception
    FileExistsError = builtins.FileExistsError
    OSError = builtins.OSError
    RuntimeError = builtins.RuntimeError
    TypeError = builtins.TypeError
    ValueError = builtins.ValueError
    dict = builtins.dict
    isinstance = builtins.isinstance
    list = builtins.list
    open = builtins.open
    str = builtins.str
    dump, dumps, load, loads = json.dump, json.dumps, json.load, json.loads
    dirname, abspath, join = os.path.dirname, os.path.abspath, os.path.join
    makedirs, os_open, close, rename = os.makedirs, os.open, os.close, os.rename
    create_exclusively = os.O_CREAT | os.O_EXCL | os.O_WRONLY
    monotonic, sleep = time.monotonic, time.sleep

    calls = join(dirname(abspath(namespace["__file__"])), "host_tool_calls")
    poll = 0.05
    socket_path = os.environ.get("AIRLOCK_HOST_TOOLS_SOCKET")
    socket = __import__("socket") if socket_path else None

    class HostToolError(RuntimeError):
        """The host refused this call, or did not answer it in time."""

    HostToolError.__qualname__ = "HostToolError"

    def not_answered():
        return HostToolError(
            "Error: the host did not answer this call within %g seconds" % call_timeout)

    def claim():
        makedirs(calls, exist_ok=True)
        number = 1
        while True:
            ident = "%04d" % number
            try:
                fd = os_open(join(calls, ident + ".claim"), create_exclusively, 0o600)
            except FileExistsError:
                number += 1
                continue
            close(fd)
            return ident

    def publish(ident, body):
        final = join(calls, ident + ".request.json")
        part = final + ".part"
        with open(part, "w", encoding="utf-8") as stream:
            dump(body, stream)
        rename(part, final)

    def over_files(name, arguments):
        ident = claim()
        try:
            publish(ident, {"id": ident, "name": name, "arguments": arguments})
        except BaseException:
            try:
                publish(ident, {"id": ident, "abandoned": True})
            except Exception:
                pass
            raise
        answer_path = join(calls, ident + ".response.json")
        deadline = monotonic() + call_timeout
        while True:
            try:
                with open(answer_path, encoding="utf-8") as stream:
                    return load(stream)
            except (OSError, ValueError):
                pass
            if monotonic() >= deadline:
                raise not_answered()
            sleep(poll)

    def over_socket(name, arguments):
        request = dumps({"name": name, "arguments": arguments}).encode("utf-8") + b"\n"
        chunks = []
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(call_timeout)
            try:
                connection.connect(socket_path)
                connection.sendall(request)
                while True:
                    chunk = connection.recv(65536)
                    if not chunk:
                        break
                    chunks.append(chunk)
            except socket.timeout:
                raise not_answered()
        try:
            return loads(b"".join(chunks).decode("utf-8"))
        except ValueError:
            raise HostToolError("Error: the host's answer could not be read")

    def call(name, /, **arguments):
        """Call the host tool `name` with keyword arguments; return its JSON value."""
        answer = over_socket(name, arguments) if socket_path else over_files(name, arguments)
        if isinstance(answer, dict) and "value" in answer:
            return answer["value"]
        refusal = "Error: the host refused this call"
        if isinstance(answer, dict):
            refusal = answer.get("refusal", refusal)
        raise HostToolError(refusal)

    def wrapper_for(spelled, name):
        def wrapper(**arguments):
            return call(name, **arguments)

        wrapper.__name__ = wrapper.__qualname__ = spelled
        wrapper.__doc__ = "Call the host tool %s." % name
        return wrapper

    exported = ["call", "HostToolError"]
    namespace["call"] = call
    namespace["HostToolError"] = HostToolError
    for spelled, name in wrappers:
        namespace[spelled] = wrapper_for(spelled, name)
        exported.append(spelled)
    namespace["__all__"] = exported


_airlock_install(globals(), [
)PY";
  for (const auto& [spelled, name] : shim_wrappers(tool_names)) {
    out += "    (" + python_string_literal(spelled) + ", " + python_string_literal(name) + "),\n";
  }
  out += "], ";
  out += timeout_text;
  out += ")\ndel _airlock_install\n";
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
