#include "convert.hpp"

#include <cmath>
#include <limits>

#include "airlock/errors.hpp"

namespace airlock::python {

py::object enum_class(const char* name) {
  return py::module_::import("airlock").attr(name);
}

namespace {
template <typename E>
py::object member(const char* class_name, E value) {
  return enum_class(class_name)(py::str(std::string(to_string(value))));
}
}  // namespace

py::object to_python(Isolation value) {
  return member("Isolation", value);
}
py::object to_python(Egress value) {
  return member("Egress", value);
}
py::object to_python(Capability value) {
  return member("Capability", value);
}
py::object to_python(OsFamily value) {
  return member("OsFamily", value);
}
py::object to_python(SourceIntegrity value) {
  return member("SourceIntegrity", value);
}
py::object to_python(Identity value) {
  return member("Identity", value);
}
py::object to_python(SnapshotContent value) {
  return member("SnapshotContent", value);
}
py::object to_python(EntryKind value) {
  return member("EntryKind", value);
}
py::object to_python(OutputDisposition value) {
  return member("OutputDisposition", value);
}
py::object to_python(NameNormalization value) {
  return member("NameNormalization", value);
}
py::object to_python(SignalOutcome value) {
  return member("SignalOutcome", value);
}
py::object to_python(SignalReach value) {
  return member("SignalReach", value);
}

std::string enum_text(py::handle value, std::string_view what) {
  // StrEnum members are str instances whose str() is their value.
  if (!py::isinstance<py::str>(value)) {
    throw py::type_error(std::string(what) + ": expected a string value, got " +
                         std::string(py::str(py::type::handle_of(value).attr("__name__"))));
  }
  return std::string(py::str(value));
}

std::string type_name_of(py::handle value) {
  return std::string(py::str(py::type::handle_of(value).attr("__name__")));
}

std::string utf8_text(py::handle value, std::string_view what) {
  if (!py::isinstance<py::str>(value)) {
    throw py::type_error(std::string(what) + ": expected a str, got " + type_name_of(value));
  }
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(value.ptr(), &size);
  if (data == nullptr) {
    PyErr_Clear();
    throw InvalidArgument(
        std::string(what) + ": the text is not encodable as UTF-8 (it holds a lone surrogate)",
        std::string(what));
  }
  return std::string(data, static_cast<std::size_t>(size));
}

std::string name_bytes(py::handle value, std::string_view what) {
  if (!py::isinstance<py::str>(value)) {
    throw py::type_error(std::string(what) + ": expected a str, got " + type_name_of(value));
  }
  PyObject* encoded = PyUnicode_AsEncodedString(value.ptr(), "utf-8", "surrogatepass");
  if (encoded == nullptr) throw py::error_already_set();
  const py::bytes bytes = py::reinterpret_steal<py::bytes>(encoded);
  return std::string(bytes);
}

json::Json to_json_value(py::handle value, const std::string& where) {
  if (value.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>();
  if (py::isinstance<py::int_>(value)) {
    // Negative values as signed, the rest unsigned: counts up to 2^64-1 survive.
    try {
      if (py::reinterpret_borrow<py::int_>(value) < py::int_(0)) {
        return value.cast<std::int64_t>();
      }
      return value.cast<std::uint64_t>();
    } catch (const py::cast_error&) {
      throw InvalidArgument(where + ": " + std::string(py::str(value)) +
                                " is outside the 64-bit range JSON carries here",
                            where);
    }
  }
  if (py::isinstance<py::float_>(value)) return value.cast<double>();
  if (py::isinstance<py::str>(value)) return utf8_text(value, where);
  if (py::isinstance<py::dict>(value)) {
    json::Json out = json::Json::object();
    for (auto [key, item] : py::reinterpret_borrow<py::dict>(value)) {
      if (!py::isinstance<py::str>(key)) {
        throw py::type_error(where + ": a key must be a string, got " + type_name_of(key));
      }
      const std::string name = utf8_text(key, where);
      out[name] = to_json_value(item, where + "." + name);
    }
    return out;
  }
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value) ||
      py::isinstance<py::set>(value) || py::isinstance<py::frozenset>(value)) {
    json::Json out = json::Json::array();
    std::size_t index = 0;
    for (py::handle item : value) {
      out.push_back(to_json_value(item, where + "[" + std::to_string(index++) + "]"));
    }
    return out;
  }
  if (py::hasattr(value, "_airlock_json")) {
    // Our records spell their own JSON form.
    return to_json_value(value.attr("_airlock_json")(), where);
  }
  throw py::type_error(where + ": " +
                       std::string(py::str(py::type::handle_of(value).attr("__name__"))) +
                       " cannot be carried as JSON");
}

py::object from_json_value(const json::Json& value) {
  switch (value.type()) {
    case json::Json::value_t::null:
      return py::none();
    case json::Json::value_t::boolean:
      return py::bool_(value.get<bool>());
    case json::Json::value_t::number_integer:
      return py::int_(value.get<std::int64_t>());
    case json::Json::value_t::number_unsigned:
      return py::int_(value.get<std::uint64_t>());
    case json::Json::value_t::number_float:
      return py::float_(value.get<double>());
    case json::Json::value_t::string:
      return py::str(value.get<std::string>());
    case json::Json::value_t::array: {
      py::list out;
      for (const auto& item : value) out.append(from_json_value(item));
      return out;
    }
    case json::Json::value_t::object: {
      py::dict out;
      for (const auto& [key, item] : value.items()) out[py::str(key)] = from_json_value(item);
      return out;
    }
    default:
      return py::none();
  }
}

Milliseconds seconds_to_milliseconds(py::handle seconds, std::string_view what) {
  if (py::isinstance<py::bool_>(seconds) ||
      !(py::isinstance<py::int_>(seconds) || py::isinstance<py::float_>(seconds))) {
    throw py::type_error(std::string(what) + ": expected a number of seconds");
  }
  const double value = seconds.cast<double>();
  if (!std::isfinite(value) || value <= 0) {
    throw InvalidArgument(std::string(what) +
                              ": must be a finite positive number of seconds, got " +
                              std::string(py::str(seconds)),
                          std::string(what));
  }
  // Round up: a positive timeout never becomes zero.
  const double millis = std::ceil(value * 1000.0);
  if (millis > static_cast<double>(std::numeric_limits<std::int32_t>::max())) {
    throw InvalidArgument(std::string(what) + ": too large", std::string(what));
  }
  return Milliseconds(static_cast<std::int64_t>(millis));
}

HeldObject::~HeldObject() {
  // During interpreter shutdown a thread that takes the GIL may never get it back (or be
  // stopped inside it); leaking the reference is then the only safe move.
  if (!Py_IsInitialized() || _Py_IsFinalizing()) {
    object_.release();
    return;
  }
  py::gil_scoped_acquire gil;
  object_ = py::object();
}

std::string describe_python_error(const py::error_already_set& error) {
  return std::string("Python ") + error.what();
}

}  // namespace airlock::python
