// The file routes beyond the plane: the shell roads (road=shell) for paths outside the work
// directory, and declared outputs collected and returned.
#include "airlock/encoding.hpp"
#include "daemon/support.hpp"

namespace airlock::daemon::test {
namespace {

std::string files(const std::string& handle, const std::string& path,
                  const std::string& extra = {}) {
  return "/v1/sandboxes/" + handle + "/files?path=" + url_encode(path) + extra;
}

TEST(DaemonShellRoad, ReachesPathsOutsideTheWorkDirThatThePlaneRefuses) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  const std::string outside = "/tmp/large_tool_result.txt";
  EXPECT_EQ(fixture.client->put(files(handle, outside), "via the plane").error()["refusal"],
            "invalid_path")
      << "the plane is confined to the work directory";
  std::string bytes;
  for (int i = 0; i < 70000; ++i) bytes.push_back(static_cast<char>(i * 7));  // several chunks
  const Reply put = fixture.client->put(files(handle, outside, "&road=shell"), bytes);
  ASSERT_EQ(put.status, 200) << put.body;
  const Reply got = fixture.client->get(files(handle, outside, "&road=shell"));
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(got.body, bytes);
  auto sandbox = fixture.scripted->live({"s", "thread-1", "agent"}, "deepagents");
  EXPECT_EQ(sandbox->contents(outside), bytes) << "landed whole, at the path named";
}

TEST(DaemonShellRoad, RefusalsAreClassifiedPerFile) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  auto sandbox = fixture.scripted->live({"s", "thread-1", "agent"}, "deepagents");
  sandbox->seed_directory("/conversation_history/dir");
  sandbox->seed_symlink("/conversation_history/link", "/etc");
  struct Case {
    std::string path;
    long status;
    std::string refusal;
  };
  for (const Case& c :
       std::vector<Case>{{"/conversation_history/missing", 404, "file_not_found"},
                         {"/conversation_history/dir", 409, "is_directory"},
                         {"/conversation_history/link/passwd", 400, "invalid_path"}}) {
    const Reply reply = fixture.client->get(files(handle, c.path, "&road=shell"));
    EXPECT_EQ(reply.status, c.status) << c.path << ": " << reply.body;
    EXPECT_EQ(reply.error()["refusal"], c.refusal) << c.path << ": " << reply.body;
  }
  const Reply through_link =
      fixture.client->put(files(handle, "/conversation_history/link/x", "&road=shell"), "x");
  EXPECT_EQ(through_link.error()["refusal"], "invalid_path") << through_link.body;
  EXPECT_FALSE(sandbox->exists("/etc/x")) << "nothing was written through the link";
  EXPECT_EQ(fixture.client->get(files(handle, "/x", "&road=sideways")).error()["check"],
            "query.road");
}

TEST(DaemonShellRoad, ReadOverItsCapIsRefusedNotTruncated) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  auto sandbox = fixture.scripted->live({"s", "thread-1", "agent"}, "deepagents");
  sandbox->seed_file("/tmp/big", std::string(100, 'x'));
  const Reply reply = fixture.client->get(files(handle, "/tmp/big", "&road=shell&max_bytes=99"));
  EXPECT_EQ(reply.status, 413) << reply.body;
  EXPECT_EQ(reply.body.find("xxxx"), std::string::npos);
}

TEST(DaemonOutputs, DeclaredOutputsComeBackWhole) {
  DaemonFixture fixture;
  json::Json spec = DaemonFixture::default_spec();
  spec["declared_outputs"] = {{{"path", "report.md"}, {"media_type", "text/markdown"}},
                              {{"path", "data/result.bin"}, {"name", "result.bin"}},
                              {{"path", "optional.txt"}, {"required", false}}};
  const std::string handle = fixture.acquire(DaemonFixture::key("s"), spec);
  ASSERT_EQ(fixture.client->put(files(handle, "report.md"), "# findings").status, 200);
  ASSERT_EQ(
      fixture.client->put(files(handle, "data/result.bin"), std::string("\x00\xff", 2)).status,
      200);
  const Reply reply =
      fixture.client->post("/v1/sandboxes/" + handle + "/outputs", json::Json::object());
  ASSERT_EQ(reply.status, 200) << reply.body;
  const auto artifacts = reply.json()["artifacts"];
  ASSERT_EQ(artifacts.size(), 2u) << "an absent optional output is skipped";
  EXPECT_EQ(artifacts[0]["name"], "report.md");
  EXPECT_EQ(artifacts[0]["media_type"], "text/markdown");
  EXPECT_EQ(base64_decode(artifacts[0]["content_base64"].get<std::string>()), "# findings");
  EXPECT_EQ(artifacts[1]["name"], "result.bin");
  EXPECT_EQ(base64_decode(artifacts[1]["content_base64"].get<std::string>()),
            std::string("\x00\xff", 2));
}

TEST(DaemonOutputs, AMissingRequiredOutputReturnsNothingAtAll) {
  DaemonFixture fixture;
  json::Json spec = DaemonFixture::default_spec();
  spec["declared_outputs"] = {{{"path", "present.txt"}}, {{"path", "absent.txt"}}};
  const std::string handle = fixture.acquire(DaemonFixture::key("s"), spec);
  ASSERT_EQ(fixture.client->put(files(handle, "present.txt"), "here").status, 200);
  const Reply reply =
      fixture.client->post("/v1/sandboxes/" + handle + "/outputs", json::Json::object());
  EXPECT_EQ(reply.status, 422) << reply.body;
  EXPECT_EQ(reply.error()["type"], "SandboxOutputMissing");
  EXPECT_EQ(reply.body.find("aGVyZQ"), std::string::npos) << "no partial artifact set";
}

TEST(DaemonOutputs, OutputsPastTheSpecsCapsAreRefused) {
  DaemonFixture fixture;
  json::Json spec = DaemonFixture::default_spec();
  spec["files_out"] = {{"max_bytes_per_file", 4}, {"max_total_bytes", 8}, {"max_files", 2}};
  spec["declared_outputs"] = {{{"path", "big.txt"}}};
  const std::string handle = fixture.acquire(DaemonFixture::key("s"), spec);
  ASSERT_EQ(fixture.client->put(files(handle, "big.txt"), "12345").status, 200);
  const Reply reply =
      fixture.client->post("/v1/sandboxes/" + handle + "/outputs", json::Json::object());
  EXPECT_EQ(reply.status, 413) << reply.body;
  EXPECT_EQ(reply.error()["cap"], "files_out.max_bytes_per_file");
}

TEST(DaemonOutputs, CallTimeOutputsNeedTheSpecsConsent) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  ASSERT_EQ(fixture.client->put(files(handle, "late.txt"), "late").status, 200);
  const Reply refused = fixture.client->post("/v1/sandboxes/" + handle + "/outputs",
                                             {{"outputs", {{{"path", "late.txt"}}}}});
  EXPECT_EQ(refused.status, 400) << refused.body;

  json::Json spec = DaemonFixture::default_spec();
  spec["outputs_named_at_call_time"] = true;
  const std::string consenting = fixture.acquire(DaemonFixture::key("t"), spec);
  ASSERT_EQ(fixture.client->put(files(consenting, "late.txt"), "late").status, 200);
  const Reply named = fixture.client->post("/v1/sandboxes/" + consenting + "/outputs",
                                           {{"outputs", {{{"path", "late.txt"}}}}});
  ASSERT_EQ(named.status, 200) << named.body;
  EXPECT_EQ(named.json()["artifacts"][0]["name"], "late.txt");
  const Reply escape = fixture.client->post("/v1/sandboxes/" + consenting + "/outputs",
                                            {{"outputs", {{{"path", "../etc/passwd"}}}}});
  EXPECT_EQ(escape.status, 422) << escape.body;
  EXPECT_EQ(escape.error()["type"], "SandboxArtifactNameInvalid");
}

}  // namespace
}  // namespace airlock::daemon::test
