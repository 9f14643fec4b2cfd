// Declared outputs, collected through the core's collect_outputs and returned to the caller.
//
// Decision: artifacts come back in the response (base64), not landed on the daemon's host. The
// caller is the host; it owns where artifacts go (its own file-system sink, a blob store), and a
// daemon writing into host directories on a client's word would be one more thing to confine.
// The phase order is the core's: nothing comes back until every output was validated, stat-ed,
// capped and read — a refused collection returns no artifact at all.
#include <spdlog/spdlog.h>

#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "airlock/outputs.hpp"
#include "daemon/api.hpp"
#include "daemon/http_errors.hpp"
#include "daemon/request_fields.hpp"

namespace airlock::daemon {

HttpResponse Api::outputs(const HttpRequest& request) {
  refuse_unknown_query(request, {});
  std::vector<DeclaredOutput> call_time;
  NameNormalization normalization = NameNormalization::nfc;
  if (!request.body.empty()) {
    const json::Json body = parse_json_body(request);
    Fields fields(body, "body");
    if (const json::Json* value = fields.optional("outputs")) {
      if (!value->is_array()) {
        throw InvalidArgument("body.outputs: expected an array of declared outputs",
                              "body.outputs");
      }
      for (std::size_t i = 0; i < value->size(); ++i) {
        call_time.push_back(
            json::parse_declared_output((*value)[i], "body.outputs[" + std::to_string(i) + "]"));
      }
    }
    if (const json::Json* value = fields.optional("normalization")) {
      normalization =
          parse_name_normalization(fields.string("normalization", *value), "body.normalization");
    }
    fields.refuse_unknown();
  }

  Admitted call = admit(request, limits_.admission_timeout);
  std::vector<Artifact> collected;
  OutputSink sink;
  sink.normalization = normalization;
  sink.deliver = [&collected](const Artifact& artifact) {
    collected.push_back(artifact);
    return LandedArtifact{
        artifact.name, artifact.name + " (" + std::to_string(artifact.content.size()) + " bytes)",
        std::nullopt};
  };
  // A read changes nothing in the sandbox: a refused or failed collection never condemns it.
  collect_outputs(*call.sandbox, *call.record.spec, &sink, std::move(call_time));

  json::Json artifacts = json::Json::array();
  for (const auto& artifact : collected) {
    json::Json entry{{"name", artifact.name},
                     {"kind", artifact.kind},
                     {"size_bytes", artifact.content.size()},
                     {"content_base64", base64_encode(artifact.content)}};
    entry["media_type"] =
        artifact.media_type ? json::Json(*artifact.media_type) : json::Json(nullptr);
    artifacts.push_back(std::move(entry));
  }
  return HttpResponse::json(200,
                            {{"artifacts", artifacts}, {"instance_id", call.record.instance_id}});
}

}  // namespace airlock::daemon
