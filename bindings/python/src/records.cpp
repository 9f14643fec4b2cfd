// The vocabulary tables and the protocol's records. Records are immutable from Python (read-only
// attributes, no setters) except ScopeDisposal, which the router fills in after a block — as in
// the seeds. A SandboxSpec is built from keywords through the same strict JSON parser the CLI and
// the daemon use, so every field is validated once, in one place, with the field's path named.
#include "airlock/records.hpp"

#include <pybind11/stl.h>

#include <array>

#include "airlock/errors.hpp"
#include "airlock/json.hpp"
#include "airlock/outputs.hpp"
#include "bindings.hpp"
#include "convert.hpp"
#include "records.hpp"

namespace airlock::python {
namespace {

template <typename E>
py::list member_values() {
  py::list values;
  for (unsigned index = 0; index < 32; ++index) {
    const auto text = to_string(static_cast<E>(index));
    if (text == "<unknown>") break;
    values.append(py::str(std::string(text)));
  }
  return values;
}

std::string quoted(const std::string& text) {
  return std::string(py::repr(py::str(text)));
}

template <typename T>
std::string optional_repr(const std::optional<T>& value) {
  if (!value) return "None";
  if constexpr (std::is_same_v<T, std::string>) {
    return quoted(*value);
  } else {
    return std::to_string(*value);
  }
}

std::string transfer_limits_repr(const TransferLimits& limits) {
  return "TransferLimits(max_bytes_per_file=" + std::to_string(limits.max_bytes_per_file) +
         ", max_total_bytes=" + std::to_string(limits.max_total_bytes) +
         ", max_files=" + std::to_string(limits.max_files) + ")";
}

// A count: an int (a bool is not one) is required — anything else is a TypeError, as in the
// reference; a negative or oversized int is a value out of range (InvalidArgument).
std::uint64_t count_from_python(py::handle value, const std::string& what) {
  if (py::isinstance<py::bool_>(value) || !py::isinstance<py::int_>(value)) {
    throw py::type_error(what + ": expected an int, got " + type_name_of(value));
  }
  const auto number = py::reinterpret_borrow<py::int_>(value);
  if (number < py::int_(0)) {
    throw InvalidArgument(
        what + ": expected a non-negative integer, got " + std::string(py::str(value)), what);
  }
  try {
    return number.cast<std::uint64_t>();
  } catch (const py::cast_error&) {
    throw InvalidArgument(what + ": " + std::string(py::str(value)) + " is larger than 2^64-1",
                          what);
  }
}

TransferLimits make_transfer_limits(py::handle per_file, py::handle total, py::handle files) {
  return TransferLimits{count_from_python(per_file, "TransferLimits.max_bytes_per_file"),
                        count_from_python(total, "TransferLimits.max_total_bytes"),
                        count_from_python(files, "TransferLimits.max_files")};
}

// An artifact name or guest path carried by a record. Its bytes must be text: a str holding a
// lone surrogate is refused here as the name rule it breaks, never as pybind's encoding error.
std::string record_name(py::handle value, const std::string& what) {
  std::string bytes = name_bytes(value, what);
  validate_artifact_name_encoding(bytes);
  return bytes;
}

// Program output as bytes: a str is taken as UTF-8, bytes verbatim.
std::string output_bytes(py::handle value, const std::string& what) {
  if (py::isinstance<py::bytes>(value))
    return std::string(py::reinterpret_borrow<py::bytes>(value));
  return utf8_text(value, what);
}

// The reference's SandboxSpec is a positional dataclass: this is its field order (our
// `resources` extension comes last), so SandboxSpec("codeact", "python:3.12") means what it
// means there.
constexpr std::array<const char*, 16> kSpecFieldOrder = {
    "kind",         "image",         "image_id",
    "egress_allow", "work_dir",      "labels",
    "requires",     "min_isolation", "declared_outputs",
    "files_in",     "files_out",     "outputs_named_at_call_time",
    "identities",   "egress",        "requires_os_family",
    "resources"};

// The wire form with its keys in the field order above (the JSON object itself is sorted).
py::dict spec_to_dict(const SandboxSpec& spec) {
  const json::Json fields = json::to_json(spec);
  py::dict out;
  for (const char* field : kSpecFieldOrder) out[field] = from_json_value(fields.at(field));
  return out;
}

py::dict spec_arguments(const py::args& args, const py::kwargs& keywords) {
  if (args.size() > kSpecFieldOrder.size()) {
    throw py::type_error("SandboxSpec takes at most " + std::to_string(kSpecFieldOrder.size()) +
                         " positional arguments (" + std::to_string(args.size()) + " given)");
  }
  py::dict fields;
  for (std::size_t i = 0; i < args.size(); ++i) fields[kSpecFieldOrder[i]] = args[i];
  for (auto [key, item] : keywords) {
    if (fields.contains(key)) {
      throw py::type_error("SandboxSpec got multiple values for argument '" +
                           std::string(py::str(key)) + "'");
    }
    fields[key] = item;
  }
  if (!fields.contains("kind")) {
    throw py::type_error("SandboxSpec missing 1 required argument: 'kind'");
  }
  return fields;
}

// Keywords → the JSON wire form. None means "the default", exactly as null does on the wire.
json::Json spec_json_from_keywords(const py::dict& keywords) {
  json::Json value = json::Json::object();
  for (auto [key, item] : keywords) {
    const std::string name = py::str(key);
    if (item.is_none()) continue;
    value[name] = to_json_value(item, "SandboxSpec." + name);
  }
  return value;
}

}  // namespace

SandboxSpec spec_from_python(py::handle value) {
  if (py::isinstance<SandboxSpec>(value)) return value.cast<SandboxSpec>();
  if (py::isinstance<py::dict>(value)) {
    return json::parse_spec(spec_json_from_keywords(py::reinterpret_borrow<py::dict>(value)),
                            "spec");
  }
  throw py::type_error("expected a SandboxSpec or a dict of its fields");
}

SandboxKey key_from_python(py::handle value) {
  if (py::isinstance<SandboxKey>(value)) return value.cast<SandboxKey>();
  if (py::isinstance<py::tuple>(value) && py::len(value) == 3) {
    auto items = py::reinterpret_borrow<py::tuple>(value);
    return SandboxKey{items[0].cast<std::string>(), items[1].cast<std::string>(),
                      items[2].cast<std::string>()};
  }
  throw py::type_error("expected a SandboxKey or a (scope, thread_id, agent_dir) tuple");
}

py::object exec_result_to_python(ExecResult result) {
  return py::cast(std::move(result));
}

void bind_vocabulary(py::module_& module) {
  module.def("_vocabulary", [] {
    py::dict tables;
    tables["Isolation"] = member_values<Isolation>();
    tables["Egress"] = member_values<Egress>();
    tables["Capability"] = member_values<Capability>();
    tables["OsFamily"] = member_values<OsFamily>();
    tables["SourceIntegrity"] = member_values<SourceIntegrity>();
    tables["Identity"] = member_values<Identity>();
    tables["EntryKind"] = member_values<EntryKind>();
    tables["OutputDisposition"] = member_values<OutputDisposition>();
    tables["NameNormalization"] = member_values<NameNormalization>();
    tables["SignalOutcome"] = member_values<SignalOutcome>();
    tables["SignalReach"] = member_values<SignalReach>();
    // Two members whose spellings are not identifiers' ("filesystem+memory"): listed, not probed
    // (to_string answers "filesystem" for anything that is not the other one).
    py::list snapshot_contents;
    for (const auto content : {SnapshotContent::filesystem, SnapshotContent::filesystem_and_memory}) {
      snapshot_contents.append(py::str(std::string(to_string(content))));
    }
    tables["SnapshotContent"] = snapshot_contents;
    return tables;
  });
  module.def(
      "isolation_rank",
      [](py::handle value) {
        return isolation_rank(parse_isolation(enum_text(value, "isolation"), "isolation"));
      },
      "0 (none) … 6 (vm): the ladder's order, the only way rungs compare.");
  module.def(
      "meets_floor",
      [](py::handle declared, py::handle floor) {
        return meets_floor(parse_isolation(enum_text(declared, "declared"), "declared"),
                           parse_isolation(enum_text(floor, "floor"), "floor"));
      },
      py::arg("declared"), py::arg("floor"));
  module.def("isolation_ladder", [] { return std::string(isolation_ladder()); });
}

void bind_records(py::module_& module) {
  py::class_<SandboxKey>(module, "SandboxKey",
                         "The one sandbox a caller may reach: (scope, thread_id, agent_dir), all "
                         "from the host's request context, never from a model.")
      .def(py::init([](std::string scope, std::string thread_id, std::string agent_dir) {
             return SandboxKey{std::move(scope), std::move(thread_id), std::move(agent_dir)};
           }),
           py::arg("scope"), py::arg("thread_id"), py::arg("agent_dir"))
      .def_property_readonly("scope", [](const SandboxKey& key) { return key.scope; })
      .def_property_readonly("thread_id", [](const SandboxKey& key) { return key.thread_id; })
      .def_property_readonly("agent_dir", [](const SandboxKey& key) { return key.agent_dir; })
      .def("__eq__", [](const SandboxKey& a, const SandboxKey& b) { return a == b; })
      .def("__hash__",
           [](const SandboxKey& key) {
             return py::hash(py::make_tuple(key.scope, key.thread_id, key.agent_dir));
           })
      .def("_airlock_json",
           [](const SandboxKey& key) { return from_json_value(json::to_json(key)); })
      .def("__repr__", [](const SandboxKey& key) {
        return "SandboxKey(scope=" + quoted(key.scope) + ", thread_id=" + quoted(key.thread_id) +
               ", agent_dir=" + quoted(key.agent_dir) + ")";
      });

  py::class_<TransferLimits>(module, "TransferLimits",
                             "Caps on one direction of transfer; all three legs are required.")
      .def(py::init(&make_transfer_limits), py::arg("max_bytes_per_file"),
           py::arg("max_total_bytes"), py::arg("max_files"))
      .def_property_readonly("max_bytes_per_file",
                             [](const TransferLimits& l) { return l.max_bytes_per_file; })
      .def_property_readonly("max_total_bytes",
                             [](const TransferLimits& l) { return l.max_total_bytes; })
      .def_property_readonly("max_files", [](const TransferLimits& l) { return l.max_files; })
      .def("within", &TransferLimits::within, py::arg("ceiling"))
      .def("__eq__", [](const TransferLimits& a, const TransferLimits& b) { return a == b; })
      .def("__hash__",
           [](const TransferLimits& l) {
             return py::hash(py::make_tuple(l.max_bytes_per_file, l.max_total_bytes, l.max_files));
           })
      .def("_airlock_json",
           [](const TransferLimits& l) { return from_json_value(json::to_json(l)); })
      .def("__repr__", &transfer_limits_repr);
  module.attr("DEFAULT_TRANSFER_LIMITS") = kDefaultTransferLimits;

  py::class_<SandboxLimits>(module, "SandboxLimits", "A backend's ceilings, one per direction.")
      .def(py::init([](TransferLimits files_in, TransferLimits files_out) {
             return SandboxLimits{files_in, files_out};
           }),
           py::arg("files_in") = kDefaultTransferLimits,
           py::arg("files_out") = kDefaultTransferLimits)
      .def_property_readonly("files_in", [](const SandboxLimits& l) { return l.files_in; })
      .def_property_readonly("files_out", [](const SandboxLimits& l) { return l.files_out; })
      .def("__eq__", [](const SandboxLimits& a, const SandboxLimits& b) { return a == b; })
      .def("__hash__",
           [](const SandboxLimits& l) {
             return py::hash(py::make_tuple(l.files_in.max_bytes_per_file,
                                            l.files_in.max_total_bytes, l.files_in.max_files,
                                            l.files_out.max_bytes_per_file,
                                            l.files_out.max_total_bytes, l.files_out.max_files));
           })
      .def("_airlock_json",
           [](const SandboxLimits& l) { return from_json_value(json::to_json(l)); })
      .def("__repr__", [](const SandboxLimits& l) {
        return "SandboxLimits(files_in=" + transfer_limits_repr(l.files_in) +
               ", files_out=" + transfer_limits_repr(l.files_out) + ")";
      });

  py::class_<DeclaredOutput>(module, "DeclaredOutput",
                             "One artifact a workload promises, at a literal path under work_dir.")
      .def(py::init([](py::handle path, py::handle disposition, py::handle media_type,
                       py::handle required, py::handle name) {
             py::dict fields;
             // The names cross as text or not at all; the other name rules are collect_outputs'
             // (phase 2), exactly as for an output read from a spec document.
             fields["path"] = py::str(record_name(path, "DeclaredOutput.path"));
             fields["disposition"] = disposition;
             fields["media_type"] = media_type;
             fields["required"] = required;
             fields["name"] = name.is_none()
                                  ? py::object(py::none())
                                  : py::object(py::str(record_name(name, "DeclaredOutput.name")));
             return json::parse_declared_output(spec_json_from_keywords(fields), "DeclaredOutput");
           }),
           py::arg("path"), py::arg("disposition") = py::str("land"),
           py::arg("media_type") = py::none(), py::arg("required") = true,
           py::arg("name") = py::none())
      .def_property_readonly("path", [](const DeclaredOutput& o) { return o.path; })
      .def_property_readonly("disposition",
                             [](const DeclaredOutput& o) { return to_python(o.disposition); })
      .def_property_readonly("media_type", [](const DeclaredOutput& o) { return o.media_type; })
      .def_property_readonly("required", [](const DeclaredOutput& o) { return o.required; })
      .def_property_readonly("name", [](const DeclaredOutput& o) { return o.name; })
      .def_property_readonly("delivered_name", &DeclaredOutput::delivered_name)
      .def("__eq__", [](const DeclaredOutput& a, const DeclaredOutput& b) { return a == b; })
      .def("__hash__",
           [](const DeclaredOutput& o) {
             return py::hash(py::make_tuple(o.path, std::string(to_string(o.disposition)),
                                            o.media_type, o.required, o.name));
           })
      .def("_airlock_json",
           [](const DeclaredOutput& o) { return from_json_value(json::to_json(o)); })
      .def("__repr__", [](const DeclaredOutput& o) {
        return "DeclaredOutput(path=" + quoted(o.path) + ", disposition='" +
               std::string(to_string(o.disposition)) +
               "', media_type=" + optional_repr(o.media_type) +
               ", required=" + (o.required ? "True" : "False") + ", name=" + optional_repr(o.name) +
               ")";
      });

  py::class_<SandboxSpec>(module, "SandboxSpec",
                          "What a sandbox of one kind needs. Keyword construction, validated "
                          "once: an unknown field, value or type raises InvalidArgument "
                          "(a ValueError) naming the field.")
      .def(py::init([](const py::args& args, const py::kwargs& keywords) {
        return json::parse_spec(spec_json_from_keywords(spec_arguments(args, keywords)),
                                "SandboxSpec");
      }))
      .def_static(
          "from_dict",
          [](py::dict fields) { return json::parse_spec(spec_json_from_keywords(fields), "spec"); },
          py::arg("fields"))
      .def("to_dict", &spec_to_dict)
      .def("_airlock_json", [](const SandboxSpec& s) { return from_json_value(json::to_json(s)); })
      .def(
          "replace",
          [](const SandboxSpec& s, py::kwargs changes) {
            json::Json value = json::to_json(s);
            for (auto [key, item] : changes) {
              const std::string name = py::str(key);
              value[name] = to_json_value(item, "SandboxSpec." + name);
            }
            return json::parse_spec(value, "SandboxSpec");
          },
          "A new spec with the given fields changed (validated as a whole).")
      .def_property_readonly("kind", &SandboxSpec::kind)
      .def_property_readonly("image", &SandboxSpec::image)
      .def_property_readonly("image_id", &SandboxSpec::image_id)
      .def_property_readonly(
          "egress_allow",
          [](const SandboxSpec& s) { return py::tuple(py::cast(s.egress_allow())); })
      .def_property_readonly("work_dir", &SandboxSpec::work_dir)
      .def_property_readonly("labels",
                             [](const SandboxSpec& s) { return py::dict(py::cast(s.labels())); })
      .def_property_readonly(
          "requires", [](const SandboxSpec& s) { return to_python(s.required_capabilities()); })
      .def_property_readonly("min_isolation",
                             [](const SandboxSpec& s) {
                               return s.min_isolation() ? to_python(*s.min_isolation())
                                                        : py::object(py::none());
                             })
      .def_property_readonly(
          "declared_outputs",
          [](const SandboxSpec& s) { return py::tuple(py::cast(s.declared_outputs())); })
      .def_property_readonly("files_in", &SandboxSpec::files_in)
      .def_property_readonly("files_out", &SandboxSpec::files_out)
      .def_property_readonly("outputs_named_at_call_time", &SandboxSpec::outputs_named_at_call_time)
      .def_property_readonly("identities",
                             [](const SandboxSpec& s) { return to_python(s.identities()); })
      .def_property_readonly("egress", [](const SandboxSpec& s) { return to_python(s.egress()); })
      .def_property_readonly("requires_os_family",
                             [](const SandboxSpec& s) {
                               return s.requires_os_family() ? to_python(*s.requires_os_family())
                                                             : py::object(py::none());
                             })
      .def_property_readonly(
          "resources",
          [](const SandboxSpec& s) { return from_json_value(json::to_json(s)["resources"]); })
      .def("egress_posture", &SandboxSpec::egress_posture)
      .def("__eq__", [](const SandboxSpec& a,
                        const SandboxSpec& b) { return json::to_json(a) == json::to_json(b); })
      .def("__repr__", [](const SandboxSpec& s) {
        std::string out = "SandboxSpec(";
        const json::Json fields = json::to_json(s);
        for (std::size_t i = 0; i < kSpecFieldOrder.size(); ++i) {
          out += std::string(i == 0 ? "" : ", ") + kSpecFieldOrder[i] + "=" +
                 fields.at(kSpecFieldOrder[i]).dump();
        }
        return out + ")";
      });

  py::class_<SandboxEntry>(module, "SandboxEntry",
                           "One guest entry as a stat describes it: (path, kind, size_bytes), "
                           "all required; size_bytes None fails closed.")
      .def(py::init([](py::handle path, py::handle kind, py::handle size_bytes) {
             SandboxEntry entry;
             entry.path = utf8_text(path, "SandboxEntry.path");
             entry.kind =
                 parse_entry_kind(enum_text(kind, "SandboxEntry.kind"), "SandboxEntry.kind");
             if (!size_bytes.is_none()) {
               entry.size_bytes = count_from_python(size_bytes, "SandboxEntry.size_bytes");
             }
             return entry;
           }),
           py::arg("path"), py::arg("kind"), py::arg("size_bytes"))
      .def_property_readonly("path", [](const SandboxEntry& e) { return e.path; })
      .def_property_readonly("kind", [](const SandboxEntry& e) { return to_python(e.kind); })
      .def_property_readonly("size_bytes", [](const SandboxEntry& e) { return e.size_bytes; })
      .def("__eq__", [](const SandboxEntry& a, const SandboxEntry& b) { return a == b; })
      .def("__hash__",
           [](const SandboxEntry& e) {
             return py::hash(py::make_tuple(e.path, std::string(to_string(e.kind)), e.size_bytes));
           })
      .def("__repr__", [](const SandboxEntry& e) {
        return "SandboxEntry(path=" + quoted(e.path) + ", kind='" + std::string(to_string(e.kind)) +
               "', size_bytes=" + optional_repr(e.size_bytes) + ")";
      });

  py::class_<ExecResult>(module, "ExecResult",
                         "What a command produced: exact bytes, and text views decoded with "
                         "U+FFFD replacement.")
      .def(py::init([](py::handle stdout_value, py::handle stderr_value, int exit_code) {
             ExecResult result;
             result.stdout_bytes = output_bytes(stdout_value, "ExecResult.stdout");
             result.stderr_bytes = output_bytes(stderr_value, "ExecResult.stderr");
             result.exit_code = exit_code;
             return result;
           }),
           py::arg("stdout"), py::arg("stderr") = py::str(""), py::arg("exit_code") = 0)
      .def_property_readonly("stdout", &ExecResult::stdout_text)
      .def_property_readonly("stderr", &ExecResult::stderr_text)
      .def_property_readonly("stdout_bytes",
                             [](const ExecResult& r) { return py::bytes(r.stdout_bytes); })
      .def_property_readonly("stderr_bytes",
                             [](const ExecResult& r) { return py::bytes(r.stderr_bytes); })
      .def_property_readonly("exit_code", [](const ExecResult& r) { return r.exit_code; })
      .def_property_readonly("term_signal", [](const ExecResult& r) { return r.term_signal; })
      .def_property_readonly("truncated", [](const ExecResult& r) { return r.truncated; })
      .def("__repr__", [](const ExecResult& r) {
        return "ExecResult(exit_code=" + std::to_string(r.exit_code) +
               ", stdout=" + quoted(r.stdout_text()) + ", stderr=" + quoted(r.stderr_text()) +
               (r.truncated ? ", truncated=True" : "") + ")";
      });

  py::class_<Artifact>(module, "Artifact", "One pulled file on its way to a sink.")
      .def(py::init([](py::handle name, py::bytes content, std::string kind,
                       std::optional<std::string> media_type) {
             // Only the encoding is judged here: the other name rules, and where the name lands,
             // are the sink's own checks.
             return Artifact{record_name(name, "Artifact.name"), std::string(content),
                             std::move(kind), std::move(media_type)};
           }),
           py::arg("name"), py::arg("content"), py::arg("kind"), py::arg("media_type") = py::none())
      .def_property_readonly("name", [](const Artifact& a) { return a.name; })
      .def_property_readonly("content", [](const Artifact& a) { return py::bytes(a.content); })
      .def_property_readonly("kind", [](const Artifact& a) { return a.kind; })
      .def_property_readonly("media_type", [](const Artifact& a) { return a.media_type; })
      .def("__eq__",
           [](const Artifact& a, const Artifact& b) {
             return a.name == b.name && a.content == b.content && a.kind == b.kind &&
                    a.media_type == b.media_type;
           })
      .def("__hash__",
           [](const Artifact& a) {
             return py::hash(py::make_tuple(a.name, py::bytes(a.content), a.kind, a.media_type));
           })
      .def("__repr__", [](const Artifact& a) {
        return "Artifact(name=" + quoted(a.name) + ", " + std::to_string(a.content.size()) +
               " bytes, kind=" + quoted(a.kind) + ")";
      });

  py::class_<LandedArtifact>(module, "LandedArtifact",
                             "Where an artifact landed. Only `display` may reach a model.")
      .def(py::init([](std::string name, std::string display, std::optional<std::string> handle) {
             return LandedArtifact{std::move(name), std::move(display), std::move(handle)};
           }),
           py::arg("name"), py::arg("display"), py::arg("handle") = py::none())
      .def_property_readonly("name", [](const LandedArtifact& a) { return a.name; })
      .def_property_readonly("display", [](const LandedArtifact& a) { return a.display; })
      .def_property_readonly("handle", [](const LandedArtifact& a) { return a.handle; })
      .def("__eq__",
           [](const LandedArtifact& a, const LandedArtifact& b) {
             return a.name == b.name && a.display == b.display && a.handle == b.handle;
           })
      .def("__hash__",
           [](const LandedArtifact& a) {
             return py::hash(py::make_tuple(a.name, a.display, a.handle));
           })
      .def("__repr__", [](const LandedArtifact& a) {
        // The handle may carry a credential: never in a repr.
        return "LandedArtifact(name=" + quoted(a.name) + ", display=" + quoted(a.display) + ")";
      });

  py::class_<ScopeDisposal>(module, "ScopeDisposal",
                            "Filled in after a router.scope() block: how many sandboxes went.")
      .def(py::init<>())
      .def_readwrite("disposed", &ScopeDisposal::disposed)
      .def("__repr__", [](const ScopeDisposal& d) {
        return "ScopeDisposal(disposed=" + std::to_string(d.disposed) + ")";
      });

  py::class_<SnapshotRecord>(
      module, "SnapshotRecord",
      "A sandbox's saved state (SandboxRouter.snapshot, Sandbox.snapshot): it belongs to the "
      "conversation — the key's scope and thread — of the sandbox it was taken from, and only "
      "a key of that conversation resumes, forks or deletes it. Read-only.")
      .def_property_readonly("id", [](const SnapshotRecord& r) { return r.id; })
      .def_property_readonly("backend", [](const SnapshotRecord& r) { return r.backend; })
      .def_property_readonly("content",
                             [](const SnapshotRecord& r) { return to_python(r.content); })
      .def_property_readonly("kind", [](const SnapshotRecord& r) { return r.kind; })
      .def_property_readonly("egress_posture",
                             [](const SnapshotRecord& r) { return r.egress_posture; })
      .def_property_readonly("image", [](const SnapshotRecord& r) { return r.image; })
      .def_property_readonly("work_dir", [](const SnapshotRecord& r) { return r.work_dir; })
      .def_property_readonly("labels", [](const SnapshotRecord& r) { return r.labels; })
      .def_property_readonly("source_instance_id",
                             [](const SnapshotRecord& r) { return r.source_instance_id; })
      .def_property_readonly("bytes", [](const SnapshotRecord& r) { return r.bytes; })
      .def_property_readonly(
          "created_at",
          [](const SnapshotRecord& r) {
            // An aware datetime in UTC (pybind's chrono conversion would give a naive local one).
            const auto seconds =
                std::chrono::duration<double>(r.created_at.time_since_epoch()).count();
            const py::module_ datetime = py::module_::import("datetime");
            return datetime.attr("datetime").attr("fromtimestamp")(
                seconds, datetime.attr("timezone").attr("utc"));
          },
          "When it was taken: a timezone-aware datetime in UTC.")
      .def("_airlock_json",
           [](const SnapshotRecord& r) { return from_json_value(json::to_json(r)); })
      .def("__eq__", [](const SnapshotRecord& a, const SnapshotRecord& b) {
        return json::to_json(a) == json::to_json(b);
      })
      .def("__hash__", [](const SnapshotRecord& r) { return py::hash(py::str(r.id)); })
      .def("__repr__", [](const SnapshotRecord& r) {
        return "SnapshotRecord(id=" + quoted(r.id) + ", backend=" + quoted(r.backend) +
               ", content='" + std::string(to_string(r.content)) + "', kind=" + quoted(r.kind) +
               ", bytes=" + std::to_string(r.bytes) + ")";
      });

  py::class_<ReclaimFailure>(module, "ReclaimFailure",
                             "A call-owned guest path that was not removed (data retention).")
      .def(py::init([](std::string tool, py::handle key, std::string path, std::string reason) {
             return ReclaimFailure{std::move(tool), key_from_python(key), std::move(path),
                                   std::move(reason)};
           }),
           py::arg("tool"), py::arg("key"), py::arg("path"), py::arg("reason"))
      .def_property_readonly("tool", [](const ReclaimFailure& f) { return f.tool; })
      .def_property_readonly("key", [](const ReclaimFailure& f) { return f.key; })
      .def_property_readonly("path", [](const ReclaimFailure& f) { return f.path; })
      .def_property_readonly("reason", [](const ReclaimFailure& f) { return f.reason; })
      .def("__repr__", [](const ReclaimFailure& f) {
        return "ReclaimFailure(tool=" + quoted(f.tool) + ", path=" + quoted(f.path) +
               ", reason=" + quoted(f.reason) + ")";
      });
}

}  // namespace airlock::python
