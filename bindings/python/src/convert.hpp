// Conversions between Python values and airlock's C++ values, shared by every binding file.
//
// Enums cross as the Python `enum.StrEnum` classes the package builds from the C++ tables
// (`airlock.Isolation`, …); going in, a member or its plain string value is accepted and
// parsed strictly (an unknown string is an InvalidArgument naming the allowed values). JSON-shaped
// data (configs, tool arguments, declarations) crosses as plain dicts/lists.
//
// Python objects kept by C++ (callables of host tools, caller contexts, sinks) are held in a
// `HeldObject`, which takes the GIL to drop its reference: those holders are destroyed on
// whatever thread released the last C++ reference, often one that does not hold the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "airlock/json.hpp"
#include "airlock/sandbox.hpp"
#include "airlock/vocabulary.hpp"

namespace airlock::python {

namespace py = pybind11;

// ---- enums -----------------------------------------------------------------------------------

// The Python class an enum crosses as, by name: "Isolation", "Egress", …
py::object enum_class(const char* name);

py::object to_python(Isolation value);
py::object to_python(Egress value);
py::object to_python(Capability value);
py::object to_python(OsFamily value);
py::object to_python(SourceIntegrity value);
py::object to_python(Identity value);
py::object to_python(EntryKind value);
py::object to_python(OutputDisposition value);
py::object to_python(NameNormalization value);
py::object to_python(SignalOutcome value);
py::object to_python(SignalReach value);
py::object to_python(SnapshotContent value);

// The string a member or plain string stands for; TypeError for anything else.
std::string enum_text(py::handle value, std::string_view what);

template <typename E>
py::frozenset to_python(EnumSet<E> set) {
  py::set out;
  set.for_each([&out](E member) { out.add(to_python(member)); });
  return py::frozenset(out);
}

// Members of an iterable of enum values (or strings), parsed with `parse`.
template <typename E, typename Parse>
EnumSet<E> enum_set(py::handle values, std::string_view what, Parse parse) {
  if (py::isinstance<py::str>(values)) {
    throw py::type_error(std::string(what) + ": expected a collection of values, not a string");
  }
  EnumSet<E> set;
  for (py::handle value : values) set.insert(parse(enum_text(value, what), what));
  return set;
}

// The name of `value`'s type, for a TypeError.
std::string type_name_of(py::handle value);

// ---- text ------------------------------------------------------------------------------------

// A str as UTF-8. TypeError naming `what` for a non-str; InvalidArgument naming `what` for a str
// that UTF-8 cannot encode (a lone surrogate), rather than pybind's bare UnicodeEncodeError.
std::string utf8_text(py::handle value, std::string_view what);

// An artifact name or guest path as bytes for the C++ rules: a str encoded as UTF-8 with its
// lone surrogates passed through, so the name rules see the malformed sequence and refuse it by
// name (ArtifactNameInvalid, rule "utf8") in their own order. TypeError for a non-str.
std::string name_bytes(py::handle value, std::string_view what);

// ---- JSON ------------------------------------------------------------------------------------

// Python → JSON: None, bool, int, float, str (enum members are str), list/tuple/set/frozenset,
// dict with str keys, and airlock's own records (their JSON form). TypeError naming `where`
// for anything else (bytes included: JSON carries no bytes).
json::Json to_json_value(py::handle value, const std::string& where);
py::object from_json_value(const json::Json& value);

// ---- time ------------------------------------------------------------------------------------

// Seconds (int or float, finite, > 0) → milliseconds; ValueError naming `what` otherwise.
Milliseconds seconds_to_milliseconds(py::handle seconds, std::string_view what);

// ---- held Python objects ---------------------------------------------------------------------

class HeldObject {
 public:
  explicit HeldObject(py::object object) : object_(std::move(object)) {}
  ~HeldObject();
  HeldObject(const HeldObject&) = delete;
  HeldObject& operator=(const HeldObject&) = delete;

  // Only with the GIL held.
  const py::object& get() const noexcept { return object_; }

 private:
  py::object object_;
};

inline std::shared_ptr<HeldObject> hold(py::object object) {
  return std::make_shared<HeldObject>(std::move(object));
}

// The text of the Python exception being handled (for logs), with the GIL held.
std::string describe_python_error(const py::error_already_set& error);

}  // namespace airlock::python
