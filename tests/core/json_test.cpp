// The JSON wire format refuses what it does not know, and names the field that was wrong.
#include "airlock/json.hpp"

#include <gtest/gtest.h>

#include "airlock/backend_factory.hpp"
#include "airlock/testing.hpp"

namespace airlock::json {
namespace {

// The message of the InvalidArgument `parse_spec` raises for `text`, or "" when it parsed.
std::string spec_refusal(const std::string& text) {
  try {
    parse_spec(parse_text(text, "spec"));
  } catch (const InvalidArgument& error) {
    return error.message();
  }
  return "";
}

void expect_refusal(const std::string& text, const std::string& fragment) {
  const std::string message = spec_refusal(text);
  EXPECT_NE(message.find(fragment), std::string::npos)
      << "for " << text << "\n  got: \"" << message << "\"\n  wanted to contain: " << fragment;
}

TEST(JsonSpec, AMinimalSpecTakesTheSeedsDefaults) {
  const SandboxSpec spec = parse_spec(parse_text(R"({"kind": "codeact"})", "spec"));
  EXPECT_EQ(spec.kind(), "codeact");
  EXPECT_EQ(spec.work_dir(), "/maf-sandbox/work");
  EXPECT_EQ(spec.egress(), Egress::closed);
  EXPECT_EQ(spec.required_capabilities(), kDefaultCapabilities);
  EXPECT_EQ(spec.files_in(), kDefaultTransferLimits);
  EXPECT_EQ(spec.files_out(), kDefaultTransferLimits);
  EXPECT_FALSE(spec.min_isolation().has_value());
  EXPECT_FALSE(spec.image().has_value());
  EXPECT_TRUE(spec.egress_allow().empty());
  EXPECT_FALSE(spec.outputs_named_at_call_time());
}

TEST(JsonSpec, EveryFieldRoundTrips) {
  const std::string text = R"({
    "kind": "diagram", "image": "busybox", "image_id": "sha256:abc",
    "egress": "allowlist", "egress_allow": ["pypi.org", "*.pythonhosted.org"],
    "work_dir": "/workspace", "labels": {"team": "a b"},
    "requires": ["exec", "files_in", "files_out"], "min_isolation": "hardened_container",
    "declared_outputs": [{"path": "out/d.png", "media_type": "image/png", "required": false,
                          "name": "d.png"},
                         {"path": "result.json", "disposition": "consume"}],
    "files_in": {"max_bytes_per_file": 1, "max_total_bytes": 2, "max_files": 3},
    "files_out": {"max_bytes_per_file": 4, "max_total_bytes": 5, "max_files": 6},
    "outputs_named_at_call_time": true, "identities": ["app"],
    "requires_os_family": "posix",
    "resources": {"memory_bytes": 67108864, "pids": 64, "cpu_millis": 500,
                  "disk_bytes": 134217728}})";
  const SandboxSpec spec = parse_spec(parse_text(text, "spec"));
  const SandboxSpec again = parse_spec(to_json(spec));
  EXPECT_EQ(to_json(again), to_json(spec));
  EXPECT_EQ(spec.declared_outputs().size(), 2u);
  EXPECT_EQ(spec.declared_outputs()[0].delivered_name(), "d.png");
  EXPECT_EQ(spec.declared_outputs()[1].disposition, OutputDisposition::consume);
  EXPECT_EQ(spec.resources().pids, 64u);
  EXPECT_EQ(spec.resources().disk_bytes, std::uint64_t{128} << 20);
  EXPECT_EQ(spec.min_isolation(), Isolation::hardened_container);
  EXPECT_EQ(spec.labels().at("team"), "a b");
}

TEST(JsonSpec, AnUnknownFieldIsRefusedByItsPath) {
  expect_refusal(R"({"kind": "x", "egres": "closed"})", "spec.egres: unknown field");
  expect_refusal(R"({"kind": "x", "files_in": {"max_bytes_per_file": 1, "max_total_bytes": 1,
                     "max_files": 1, "max_dirs": 1}})",
                 "spec.files_in.max_dirs: unknown field");
  expect_refusal(R"({"kind": "x", "declared_outputs": [{"path": "a", "glob": "*"}]})",
                 "spec.declared_outputs[0].glob: unknown field");
  expect_refusal(R"({"kind": "x", "resources": {"swap": 1}})", "spec.resources.swap");
}

TEST(JsonSpec, AnUnknownValueIsRefusedNamingTheAllowedOnes) {
  expect_refusal(R"({"kind": "x", "egress": "open"})",
                 "spec.egress: unknown value \"open\"; allowed: unrestricted, allowlist, closed");
  expect_refusal(R"({"kind": "x", "requires": ["exec", "network"]})",
                 "spec.requires[1]: unknown value \"network\"");
  expect_refusal(R"({"kind": "x", "min_isolation": "process"})", "\"process\" is not a rung");
  expect_refusal(R"({"kind": "x", "requires_os_family": "macos"})", "allowed: posix, windows");
  expect_refusal(R"({"kind": "x", "identities": ["root"]})", "spec.identities[0]");
  expect_refusal(R"({"kind": "x", "declared_outputs": [{"path": "a", "disposition": "keep"}]})",
                 "allowed: land, consume");
}

TEST(JsonSpec, AWrongTypeIsRefusedNamingTheField) {
  expect_refusal(R"({"kind": 7})", "spec.kind: expected a string, got a number");
  expect_refusal(R"({"kind": "x", "egress_allow": "pypi.org", "egress": "allowlist"})",
                 "spec.egress_allow: expected an array");
  expect_refusal(R"({"kind": "x", "files_in": {"max_bytes_per_file": -1, "max_total_bytes": 1,
                     "max_files": 1}})",
                 "spec.files_in.max_bytes_per_file: expected a non-negative integer");
  expect_refusal(R"({"kind": "x", "files_out": {"max_bytes_per_file": 1.5, "max_total_bytes": 1,
                     "max_files": 1}})",
                 "spec.files_out.max_bytes_per_file: expected a non-negative integer, got 1.5");
  expect_refusal(R"({"kind": "x", "outputs_named_at_call_time": "yes"})",
                 "spec.outputs_named_at_call_time: expected true or false");
  expect_refusal(R"([])", "spec: expected an object");
}

TEST(JsonSpec, AMissingRequiredFieldIsNamed) {
  expect_refusal(R"({})", "spec.kind: is required");
  expect_refusal(R"({"kind": "x", "files_in": {"max_bytes_per_file": 1}})",
                 "spec.files_in.max_total_bytes: is required");
  expect_refusal(R"({"kind": "x", "declared_outputs": [{}]})",
                 "spec.declared_outputs[0].path: is required");
}

TEST(JsonSpec, TheConstructionRulesApplyToParsedSpecs) {
  expect_refusal(R"({"kind": "x", "egress_allow": ["pypi.org"]})",
                 "payload of an allowlist run");
  expect_refusal(R"({"kind": "x", "work_dir": "relative"})", "spec.work_dir");
  expect_refusal(R"({"kind": ""})", "spec.kind");
}

TEST(JsonText, SyntaxErrorsNameTheByteOffset) {
  try {
    parse_text(R"({"kind": )", "spec file");
    FAIL();
  } catch (const InvalidArgument& error) {
    EXPECT_NE(error.message().find("spec file: not valid JSON at byte"), std::string::npos)
        << error.message();
  }
}

// Found by fuzz/spec_json_fuzz: a number no double holds escaped as nlohmann's out_of_range.
TEST(JsonText, ANumberTooLargeToRepresentIsAnInvalidArgument) {
  for (const char* text : {R"({"path": 333333333333E3333})", "1e999", "-1e999",
                           R"({"kind": "x", "files_in": {"max_files": 9e99999}})"}) {
    try {
      parse_text(text, "spec");
      ADD_FAILURE() << text << " parsed";
    } catch (const InvalidArgument& error) {
      EXPECT_NE(error.message().find("spec: a number is too large"), std::string::npos)
          << error.message();
    }
  }
}

TEST(JsonText, DeepNestingIsRefusedBeforeParsing) {
  std::string deep(100000, '[');
  EXPECT_THROW(parse_text(deep, "body"), InvalidArgument);
}

TEST(JsonKey, EveryComponentIsRequired) {
  EXPECT_NO_THROW(parse_key(parse_text(R"({"scope":"s","thread_id":"t","agent_dir":"a"})", "k")));
  EXPECT_THROW(parse_key(parse_text(R"({"scope":"s","thread_id":"t"})", "k")), InvalidArgument);
  EXPECT_THROW(parse_key(parse_text(R"({"scope":"s","thread_id":"t","agent_dir":"a","x":1})", "k")),
               InvalidArgument);
}

TEST(JsonResults, NonUtf8OutputIsCarriedExactlyAsBase64) {
  ExecResult result;
  result.stdout_bytes = "plain";
  result.stderr_bytes = std::string("\xff\xfe", 2);
  const Json out = to_json(result);
  EXPECT_EQ(out["stdout"], "plain");
  EXPECT_FALSE(out.contains("stderr"));
  EXPECT_EQ(out["stderr_base64"], "//4=");
}

TEST(JsonResults, ErrorsCarryTheirTypeCheckAndFields) {
  const Json cap = error_to_json(TransferCapExceeded("files_out.max_bytes_per_file", "a.png", 10, 11));
  EXPECT_EQ(cap["type"], "SandboxTransferCapExceeded");
  EXPECT_EQ(cap["cap"], "files_out.max_bytes_per_file");
  EXPECT_EQ(cap["file"], "a.png");
  EXPECT_EQ(cap["limit"], 10);
  const Json backend = error_to_json(BackendError("the engine failed", "POST /containers 500 at "
                                                                       "tcp://10.0.0.1:2375"));
  EXPECT_EQ(backend.dump().find("10.0.0.1"), std::string::npos)
      << "provider detail leaked onto the wire";
}

// What a backend stores of a snapshot reads back as it was written, and a record whose fields
// are missing or mistyped (a truncated file, another version's) is refused naming the field.
TEST(JsonResults, ASnapshotRecordReadsBackAndABrokenOneIsRefusedByField) {
  SnapshotRecord record;
  record.id = "snap-0123456789abcdef01234567";
  record.backend = "microvm";
  record.content = SnapshotContent::filesystem_and_memory;
  record.kind = "codeact";
  record.egress_posture = "allowlist:pypi.org";
  record.image = "python:latest";
  record.work_dir = "/maf-sandbox/work";
  record.labels = {{"airlock.scope", "s"}, {"airlock.thread", "t"}};
  record.source_instance_id = "abc";
  record.bytes = 68'157'440;
  record.created_at = std::chrono::system_clock::time_point(std::chrono::seconds(1'796'523'028));
  json::Json stored = json::to_json(record);
  stored["microvm"] = {{"vcpus", 1}};  // a backend's own part rides along
  const SnapshotRecord back = json::parse_snapshot_record(stored, "record");
  EXPECT_EQ(back.id, record.id);
  EXPECT_EQ(back.content, record.content);
  EXPECT_EQ(back.egress_posture, record.egress_posture);
  EXPECT_EQ(back.labels, record.labels);
  EXPECT_EQ(back.bytes, record.bytes);
  EXPECT_EQ(back.created_at, record.created_at);
  for (const char* field : {"id", "content", "labels", "bytes", "created_at"}) {
    json::Json broken = stored;
    broken.erase(field);
    try {
      json::parse_snapshot_record(broken, "record");
      ADD_FAILURE() << "a record without " << field << " was read";
    } catch (const InvalidArgument& refused) {
      EXPECT_NE(std::string(refused.what()).find(field), std::string::npos) << refused.what();
    }
  }
  json::Json wrong = stored;
  wrong["content"] = "everything";
  EXPECT_THROW(json::parse_snapshot_record(wrong, "record"), InvalidArgument);
  wrong = stored;
  wrong["bytes"] = -1;
  EXPECT_THROW(json::parse_snapshot_record(wrong, "record"), InvalidArgument);
}

TEST(JsonConfig, ARouterIsBuiltFromDataAndUnknownKeysAreRefused) {
  auto router = make_router(parse_text(R"({"backends": [{"type": "testing", "isolation":
      "container", "capabilities": ["exec", "files_in", "files_out"]}],
      "min_isolation": "container", "denied_identities": ["user"]})", "config"));
  EXPECT_TRUE(router->enabled());
  EXPECT_EQ(router->backend()->isolation(), Isolation::container);
  EXPECT_TRUE(router->options().denied_identities.contains(Identity::user));
  EXPECT_THROW(make_router(parse_text(R"({"backend": []})", "config")), InvalidArgument);
  EXPECT_THROW(make_router(parse_text(R"({"backends": [{"type": "nope"}]})", "config")),
               InvalidArgument);
  EXPECT_THROW(make_router(parse_text(R"({"backends": [{"type": "testing", "colour": 1}]})",
                                      "config")),
               InvalidArgument);
  EXPECT_THROW(make_router(parse_text(R"({"min_isolation": "process"})", "config")),
               InvalidArgument);
}

TEST(JsonConfig, DescribingABackendSpellsItsSilence) {
  testing::InProcessBackendOptions options;
  options.egress_modes = std::nullopt;
  testing::InProcessSandboxBackend silent(options);
  const Json described = describe_backend(silent);
  EXPECT_EQ(described["egress_modes"], Json::array());
  EXPECT_EQ(described["egress_modes_declared"], false);
  EXPECT_EQ(described["capabilities"], Json({"exec", "files_in"}));
  EXPECT_EQ(described["capabilities_declared"], false);
}

}  // namespace
}  // namespace airlock::json
