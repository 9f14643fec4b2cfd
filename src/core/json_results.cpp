// JSON for what comes back: results, entries, decisions, errors, backend declarations.
#include <utf8proc.h>

#include <chrono>

#include "airlock/encoding.hpp"
#include "airlock/json.hpp"

namespace airlock::json {
namespace {

bool valid_utf8(std::string_view bytes) {
  const auto* data = reinterpret_cast<const utf8proc_uint8_t*>(bytes.data());
  std::size_t offset = 0;
  while (offset < bytes.size()) {
    if (data[offset] < 0x80) {
      ++offset;
      continue;
    }
    utf8proc_int32_t codepoint = 0;
    auto length = utf8proc_iterate(data + offset,
                                   static_cast<utf8proc_ssize_t>(bytes.size() - offset),
                                   &codepoint);
    if (length <= 0) return false;
    offset += static_cast<std::size_t>(length);
  }
  return true;
}

void put_stream(Json& out, const char* name, const std::string& bytes) {
  if (valid_utf8(bytes)) {
    out[name] = bytes;
  } else {
    out[std::string(name) + "_base64"] = base64_encode(bytes);
  }
}

template <typename E>
Json members(EnumSet<E> set) {
  Json out = Json::array();
  set.for_each([&](E member) { out.push_back(std::string(to_string(member))); });
  return out;
}

}  // namespace

Json to_json(const ExecResult& result) {
  Json out = Json::object();
  put_stream(out, "stdout", result.stdout_bytes);
  put_stream(out, "stderr", result.stderr_bytes);
  out["exit_code"] = result.exit_code;
  out["truncated"] = result.truncated;
  if (result.term_signal) out["signal"] = *result.term_signal;
  return out;
}

Json to_json(const SandboxEntry& entry) {
  Json out{{"path", entry.path}, {"kind", std::string(to_string(entry.kind))}};
  out["size_bytes"] = entry.size_bytes ? Json(*entry.size_bytes) : Json(nullptr);
  return out;
}

Json to_json(const LandedArtifact& artifact) {
  // `handle` is the host's own reference and may carry a credential: it is not part of what
  // any wire renders by default.
  return Json{{"name", artifact.name}, {"display", artifact.display}};
}

Json to_json(const RoutingDecision& decision) {
  Json passed = Json::array();
  for (const auto& outcome : decision.passed) {
    passed.push_back(Json{{"check", outcome.check}, {"detail", outcome.detail}});
  }
  Json out{{"backend", decision.backend},
           {"effective_floor", std::string(to_string(decision.effective_floor))},
           {"passed", passed}};
  if (!decision.backend.empty()) {
    out["backend_isolation"] = std::string(to_string(decision.backend_isolation));
  }
  return out;
}

Json to_json(const SandboxRecord& record) {
  const auto created = std::chrono::duration_cast<std::chrono::seconds>(
                           record.created_at.time_since_epoch())
                           .count();
  return Json{{"backend", record.backend},         {"instance_id", record.instance_id},
              {"kind", record.kind},               {"labels", record.labels},
              {"egress_posture", record.egress_posture}, {"state", record.state},
              {"created_at", created}};
}

Json to_json(const SnapshotRecord& record) {
  const auto created = std::chrono::duration_cast<std::chrono::seconds>(
                           record.created_at.time_since_epoch())
                           .count();
  return Json{{"id", record.id},
              {"backend", record.backend},
              {"content", std::string(to_string(record.content))},
              {"kind", record.kind},
              {"egress_posture", record.egress_posture},
              {"image", record.image},
              {"work_dir", record.work_dir},
              {"labels", record.labels},
              {"source_instance_id", record.source_instance_id},
              {"bytes", record.bytes},
              {"created_at", created}};
}

SnapshotRecord parse_snapshot_record(const Json& value, std::string_view where) {
  const auto field = [&](const char* name) -> const Json& {
    if (!value.is_object() || !value.contains(name)) {
      throw InvalidArgument(std::string(where) + "." + name + ": missing", name);
    }
    return value.at(name);
  };
  const auto text = [&](const char* name) {
    const Json& found = field(name);
    if (!found.is_string()) {
      throw InvalidArgument(std::string(where) + "." + name + ": expected a string", name);
    }
    return found.get<std::string>();
  };
  const auto count = [&](const char* name) {
    const Json& found = field(name);
    if (!found.is_number_unsigned() && !(found.is_number_integer() && found.get<long long>() >= 0)) {
      throw InvalidArgument(std::string(where) + "." + name + ": expected a count", name);
    }
    return found.get<std::uint64_t>();
  };
  SnapshotRecord record;
  record.id = text("id");
  record.backend = text("backend");
  const std::string content = text("content");
  if (content == "filesystem") {
    record.content = SnapshotContent::filesystem;
  } else if (content == "filesystem+memory") {
    record.content = SnapshotContent::filesystem_and_memory;
  } else {
    throw InvalidArgument(std::string(where) + ".content: \"" + content +
                              "\" is not filesystem or filesystem+memory",
                          "content");
  }
  record.kind = text("kind");
  record.egress_posture = text("egress_posture");
  record.image = text("image");
  record.work_dir = text("work_dir");
  const Json& labels = field("labels");
  if (!labels.is_object()) {
    throw InvalidArgument(std::string(where) + ".labels: expected an object", "labels");
  }
  for (const auto& [name, label] : labels.items()) {
    if (!label.is_string()) {
      throw InvalidArgument(std::string(where) + ".labels." + name + ": expected a string",
                            "labels");
    }
    record.labels.emplace(name, label.get<std::string>());
  }
  record.source_instance_id = text("source_instance_id");
  record.bytes = count("bytes");
  record.created_at = std::chrono::system_clock::time_point(
      std::chrono::seconds(static_cast<std::int64_t>(count("created_at"))));
  return record;
}

Json error_to_json(const std::exception& error) {
  const auto* ours = dynamic_cast<const Error*>(&error);
  if (!ours) return Json{{"type", "InternalError"}, {"message", "internal error"}};
  Json out{{"type", ours->type()}, {"message", ours->message()}};
  if (!ours->check().empty()) out["check"] = ours->check();
  if (const auto* cap = dynamic_cast<const TransferCapExceeded*>(&error)) {
    out["cap"] = cap->cap();
    out["file"] = cap->file();
    out["limit"] = cap->limit();
    if (cap->size()) out["size"] = *cap->size();
  }
  if (const auto* program = dynamic_cast<const ProgramTimeout*>(&error)) {
    out["signal"] = std::string(to_string(program->signal()));
    out["reach"] = std::string(to_string(program->reach()));
    out["output"] = program->output();
  } else if (const auto* timeout = dynamic_cast<const Timeout*>(&error)) {
    if (timeout->kill_confirmed()) out["kill_confirmed"] = *timeout->kill_confirmed();
  }
  if (const auto* overflow = dynamic_cast<const ExecOutputLimitExceeded*>(&error)) {
    out["limit"] = overflow->limit();
    if (overflow->kill_confirmed()) out["kill_confirmed"] = *overflow->kill_confirmed();
  }
  if (const auto* refused = dynamic_cast<const FileRefused*>(&error)) {
    out["refusal"] = std::string(to_string(refused->refusal()));
    out["path"] = refused->path();
  }
  if (const auto* failure = dynamic_cast<const ConformanceFailure*>(&error)) {
    Json failed = Json::array();
    for (const auto& probe : failure->failures()) {
      failed.push_back(Json{{"probe", probe.probe}, {"why", probe.why}, {"failure", probe.failure}});
    }
    out["failures"] = failed;
  }
  return out;
}

Json describe_backend(const SandboxBackend& backend) {
  Json out{{"name", backend.name()}};
  out["isolation"] = is_known_rung(backend.isolation())
                         ? Json(std::string(to_string(backend.isolation())))
                         : Json("<not a rung>");
  const auto capabilities = backend.capabilities();
  out["capabilities"] = members(capabilities.value_or(kDefaultCapabilities));
  out["capabilities_declared"] = capabilities.has_value();
  const auto egress = backend.egress_modes();
  out["egress_modes"] = members(egress.value_or(EgressSet{}));
  out["egress_modes_declared"] = egress.has_value();
  out["limits"] = to_json(backend.limits().value_or(kDefaultSandboxLimits));
  out["os_families"] = members(backend.os_families().value_or(OsFamilySet{}));
  const auto snapshots = backend.snapshot_content();
  out["snapshot_content"] = snapshots ? Json(std::string(to_string(*snapshots))) : Json(nullptr);
  return out;
}

}  // namespace airlock::json
