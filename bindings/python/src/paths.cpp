// The guest-path rules (airlock/paths.hpp) for Python hosts that write a file plane of their own
// or test one: guest paths only — never apply them to host paths.
//
// `stat` is a Python callable, absolute guest path → SandboxEntry (or None when nothing is
// there). It must be the file plane's own unconfined, no-follow stat: one that follows links
// describes the target and hides the escape. It is called with the GIL held (these walks are
// short and make no guest call of their own), and whatever it raises propagates unchanged.
#include "airlock/paths.hpp"

#include <pybind11/stl.h>

#include "airlock/records.hpp"
#include "bindings.hpp"
#include "convert.hpp"

namespace airlock::python {
namespace {

// The kind `stat` reported for `path`: a SandboxEntry (or any record with a `kind`) or None.
std::optional<EntryKind> entry_kind_of(py::handle entry, const std::string& path) {
  if (entry.is_none()) return std::nullopt;
  if (py::isinstance<SandboxEntry>(entry)) return entry.cast<SandboxEntry>().kind;
  if (py::hasattr(entry, "kind")) {
    return parse_entry_kind(enum_text(entry.attr("kind"), "stat(...).kind"), "stat(...).kind");
  }
  throw py::type_error("stat(" + path + ") must return a SandboxEntry or None, got " +
                       type_name_of(entry));
}

GuestStat guest_stat(py::object stat) {
  if (!PyCallable_Check(stat.ptr())) {
    throw py::type_error("stat: expected a callable (absolute guest path -> SandboxEntry or None)");
  }
  return [stat = std::move(stat)](const std::string& path) {
    return entry_kind_of(stat(py::str(path)), path);
  };
}

}  // namespace

void bind_paths(py::module_& module) {
  module.def(
      "normalize_guest_path",
      [](py::handle path) { return normalize_guest_path(utf8_text(path, "path")); },
      py::arg("path"), "POSIX normpath, lexically: '/a/b/../c' -> '/a/c', '' -> '.'.");
  module.def(
      "confine_guest_path",
      [](py::handle path, py::handle working_directory) {
        return confine_guest_path(utf8_text(path, "path"),
                                  utf8_text(working_directory, "working_directory"));
      },
      py::arg("path"), py::arg("working_directory"),
      "The absolute guest path `path` names under `working_directory`; ConfinementError (a "
      "ValueError) when it resolves outside or holds a backslash or NUL. Does not walk.");
  module.def(
      "confine_guest_write_path",
      [](py::object stat, py::handle path, py::handle working_directory) {
        return confine_guest_write_path(guest_stat(std::move(stat)), utf8_text(path, "path"),
                                        utf8_text(working_directory, "working_directory"));
      },
      py::arg("stat"), py::arg("path"), py::arg("working_directory"),
      "The write rule: confine, refuse the working directory itself, walk the parents, refuse "
      "a link as the final component. Returns the absolute guest path to write.");
  module.def(
      "guest_path_relative_to",
      [](py::handle path, py::handle base) {
        return guest_path_relative_to(utf8_text(path, "path"), utf8_text(base, "base"));
      },
      py::arg("path"), py::arg("base"),
      "`path` relative to `base` after normalising both: '' when equal, the remainder when "
      "under base + '/', None otherwise ('/work-outside' is not under '/work').");
  module.def(
      "guest_directory_chain",
      [](py::handle guest_path, py::handle working_directory) {
        const auto chain = guest_directory_chain(utf8_text(guest_path, "guest_path"),
                                                 utf8_text(working_directory, "working_directory"));
        py::tuple out(chain.size());
        for (std::size_t i = 0; i < chain.size(); ++i) out[i] = py::str(chain[i]);
        return out;
      },
      py::arg("guest_path"), py::arg("working_directory"),
      "Every directory a walk stats: each prefix of the normalised working directory from its "
      "first component ('/' excluded), then each further component of guest_path.");
  module.def(
      "refuse_symlinked_parents",
      [](py::object stat, py::handle guest_path, py::handle working_directory, bool include_self) {
        refuse_symlinked_parents(guest_stat(std::move(stat)), utf8_text(guest_path, "guest_path"),
                                 utf8_text(working_directory, "working_directory"), include_self);
      },
      py::arg("stat"), py::arg("guest_path"), py::arg("working_directory"), py::kw_only(),
      py::arg("include_self") = false,
      "Walk the chain of guest_path's parent (or of guest_path itself with include_self), "
      "stopping at the first None: a symlink raises ConfinementError (a ValueError), any other "
      "non-directory NotADirectory (a NotADirectoryError).");
}

}  // namespace airlock::python
