// What the /v1 API promises a host: bad input named, refusals typed, handles opaque and stable,
// files classified per path, and the router's decisions passed through unchanged.
#include <sys/stat.h>

#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "airlock/encoding.hpp"
#include "daemon/handle_store.hpp"
#include "daemon/support.hpp"

namespace airlock::daemon::test {
namespace {

TEST(DaemonApi, HealthAnswersOverTheUnixSocketWithMode0660) {
  DaemonFixture fixture;
  const Reply reply = fixture.client->get("/v1/health");
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.json()["status"], "ok");
  EXPECT_EQ(reply.headers.at("content-type"), "application/json");
  struct stat info {};
  ASSERT_EQ(lstat(fixture.options.socket_path.c_str(), &info), 0);
  EXPECT_TRUE(S_ISSOCK(info.st_mode));
  EXPECT_EQ(info.st_mode & 07777, 0660u);
}

TEST(DaemonApi, BadJsonIsRefusedWith400NamingTheBody) {
  DaemonFixture fixture;
  const Reply reply = fixture.client->request("POST", "/v1/sandboxes",
                                              "{\"key\": ", {"Content-Type: application/json"});
  EXPECT_EQ(reply.status, 400);
  EXPECT_EQ(reply.error()["type"], "InvalidArgument");
  EXPECT_EQ(reply.error()["check"], "body");
}

TEST(DaemonApi, UnknownFieldIsRefusedNamingIt) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  const Reply reply = fixture.exec(handle, {{"argv", {"echo"}}, {"timeout", 5}});
  EXPECT_EQ(reply.status, 400);
  EXPECT_EQ(reply.error()["check"], "body.timeout");
  EXPECT_NE(reply.error()["message"].get<std::string>().find("timeout_ms"), std::string::npos)
      << "the refusal lists the known fields";
}

TEST(DaemonApi, WrongTypeAndOutOfRangeValuesAreRefusedNamingTheField) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  EXPECT_EQ(fixture.exec(handle, {{"argv", {"echo"}}, {"timeout_ms", "soon"}}).error()["check"],
            "body.timeout_ms");
  EXPECT_EQ(fixture.exec(handle, {{"argv", {"echo"}}, {"timeout_ms", 0}}).error()["check"],
            "body.timeout_ms");
  EXPECT_EQ(fixture.exec(handle, {{"argv", {"echo"}}, {"max_output_bytes", -1}}).error()["check"],
            "body.max_output_bytes");
  EXPECT_EQ(fixture.exec(handle, {{"argv", {"echo", 3}}}).error()["check"], "body.argv[1]");
  EXPECT_EQ(fixture.exec(handle, {{"argv", {"echo"}}, {"overflow", "wrap"}}).error()["check"],
            "body.overflow");
  EXPECT_EQ(fixture.exec(handle, {{"argv", {"stdin"}}, {"stdin_base64", "***"}}).error()["check"],
            "body.stdin_base64");
  const Reply bad_spec = fixture.client->post(
      "/v1/sandboxes",
      {{"key", DaemonFixture::key("s")}, {"spec", {{"kind", "k"}, {"egress", "sometimes"}}}});
  EXPECT_EQ(bad_spec.status, 400);
  EXPECT_EQ(bad_spec.error()["check"], "body.spec.egress");
}

TEST(DaemonApi, NulBytesInACommandOrItsEnvironmentAreRefusedNamingTheField) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  EXPECT_EQ(fixture.exec(handle, {{"shell", std::string("echo a\0b", 8)}}).error()["check"],
            "body.shell");
  EXPECT_EQ(fixture.exec(handle, {{"argv", {"echo", std::string("a\0b", 3)}}}).error()["check"],
            "body.argv");
  EXPECT_EQ(
      fixture.exec(handle, {{"argv", {"echo"}}, {"environment", {{"A", std::string("x\0", 2)}}}})
          .error()["check"],
      "body.environment.A");
  EXPECT_EQ(
      fixture.exec(handle, {{"argv", {"echo"}}, {"environment", {{"A=B", "x"}}}}).error()["check"],
      "body.environment.A=B");
  EXPECT_EQ(fixture.scripted->completed, 0);
}

TEST(DaemonApi, ExactlyOneOfArgvOrShellIsRequired) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  EXPECT_EQ(fixture.exec(handle, json::Json::object()).status, 400);
  EXPECT_EQ(fixture.exec(handle, {{"argv", {"echo"}}, {"shell", "echo"}}).status, 400);
  EXPECT_EQ(fixture.exec(handle, {{"argv", json::Json::array()}}).status, 400);
}

TEST(DaemonApi, UnknownRouteIs404AndWrongMethodIs405WithAllow) {
  DaemonFixture fixture;
  EXPECT_EQ(fixture.client->get("/v1/nothing-here").status, 404);
  EXPECT_EQ(fixture.client->get("/v2/health").status, 404);
  const Reply reply = fixture.client->request("PATCH", "/v1/sandboxes");
  EXPECT_EQ(reply.status, 405);
  EXPECT_EQ(reply.headers.at("allow"), "POST, GET");
}

TEST(DaemonApi, UnknownHandleIs404) {
  DaemonFixture fixture;
  const Reply reply = fixture.exec("sbx-00000000000000000000000000000000", {{"argv", {"echo"}}});
  EXPECT_EQ(reply.status, 404);
  EXPECT_EQ(reply.error()["type"], "SandboxHandleNotFound");
  EXPECT_EQ(fixture.client->get("/v1/sandboxes/not-a-handle/stat?path=a").status, 404);
}

TEST(DaemonApi, RouterRefusalIs403NamingTheCheck) {
  DaemonFixture fixture;
  const json::Json open_network{{"kind", "k"}, {"egress", "unrestricted"}};
  const Reply refused = fixture.client->post(
      "/v1/sandboxes", {{"key", DaemonFixture::key("s")}, {"spec", open_network}});
  EXPECT_EQ(refused.status, 403);
  EXPECT_EQ(refused.error()["type"], "SandboxEgressNotEnforced");
  EXPECT_EQ(refused.error()["check"], "egress");
  EXPECT_EQ(fixture.scripted->acquires(), 0) << "a refused spec reaches no backend";

  const json::Json raised_floor{{"kind", "k"}, {"min_isolation", "microvm"}};
  const Reply floor = fixture.client->post("/v1/check", {{"spec", raised_floor}});
  EXPECT_EQ(floor.status, 403);
  EXPECT_EQ(floor.error()["check"], "isolation-floor");

  const Reply accepted =
      fixture.client->post("/v1/check", {{"spec", DaemonFixture::default_spec()}});
  EXPECT_EQ(accepted.status, 200);
  EXPECT_EQ(accepted.json()["decision"]["backend"], "scripted");
}

TEST(DaemonApi, AcquireIsGetOrCreateAndTheHandleIsStable) {
  DaemonFixture fixture;
  const auto key = DaemonFixture::key("tenant-a", "thread-1");
  const Reply first = fixture.client->post("/v1/sandboxes",
                                           {{"key", key}, {"spec", DaemonFixture::default_spec()}});
  const Reply second = fixture.client->post(
      "/v1/sandboxes", {{"key", key}, {"spec", DaemonFixture::default_spec()}});
  EXPECT_EQ(first.status, 201);
  EXPECT_EQ(second.status, 200);
  EXPECT_EQ(first.json()["sandbox"], second.json()["sandbox"]);
  EXPECT_EQ(first.json()["instance_id"], second.json()["instance_id"]);
  const std::string other = fixture.acquire(DaemonFixture::key("tenant-a", "thread-2"));
  EXPECT_NE(other, first.json()["sandbox"].get<std::string>());
}

TEST(DaemonApi, HandleIsOpaqueAndCarriesNoPartOfTheKey) {
  DaemonFixture fixture;
  const std::string handle =
      fixture.acquire(DaemonFixture::key("tenant-acme-corp", "conversation-7", "coder"));
  EXPECT_EQ(handle.find("acme"), std::string::npos);
  EXPECT_EQ(handle.find("conversation"), std::string::npos);
  EXPECT_EQ(handle.size(), 36u);
}

TEST(DaemonApi, ReacquiringTheHandleWithADifferentSpecConflicts) {
  DaemonFixture fixture;
  const auto key = DaemonFixture::key("s");
  fixture.acquire(key);
  json::Json changed = DaemonFixture::default_spec();
  changed["work_dir"] = "/elsewhere";
  const Reply reply = fixture.client->post("/v1/sandboxes", {{"key", key}, {"spec", changed}});
  EXPECT_EQ(reply.status, 409);
  EXPECT_EQ(reply.error()["type"], "SandboxHandleConflict");
}

TEST(DaemonApi, ExecReturnsTheResultWithTheProgramsOwnExitCode) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  const Reply echo = fixture.exec(handle, {{"argv", {"echo", "hello", "world"}}});
  ASSERT_EQ(echo.status, 200) << echo.body;
  EXPECT_EQ(echo.json()["result"]["stdout"], "hello world\n");
  EXPECT_EQ(echo.json()["result"]["exit_code"], 0);
  const Reply failing = fixture.exec(handle, {{"argv", {"exit", "7"}}});
  ASSERT_EQ(failing.status, 200) << "a failing program is a result, not an HTTP error";
  EXPECT_EQ(failing.json()["result"]["exit_code"], 7);
}

TEST(DaemonApi, ExecRunsInTheSpecsWorkDirUnlessTheRequestNamesOne) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  EXPECT_EQ(fixture.exec(handle, {{"argv", {"pwd"}}}).json()["result"]["stdout"],
            "/maf-sandbox/work\n");
  EXPECT_EQ(fixture.exec(handle, {{"argv", {"pwd"}}, {"working_directory", "/tmp"}})
                .json()["result"]["stdout"],
            "/tmp\n");
}

TEST(DaemonApi, StdinIsFedAndNonUtf8OutputComesBackAsBase64) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  const Reply fed =
      fixture.exec(handle, {{"argv", {"stdin"}}, {"stdin_base64", base64_encode("abc")}});
  EXPECT_EQ(fed.json()["result"]["stdout"], "abc");
  const Reply binary = fixture.exec(handle, {{"argv", {"binary"}}});
  ASSERT_EQ(binary.status, 200);
  EXPECT_EQ(binary.json()["result"]["stdout_base64"],
            base64_encode(std::string("\xff\xfe\x00\x01", 4)));
  EXPECT_FALSE(binary.json()["result"].contains("stdout"));
}

TEST(DaemonApi, FilesRoundTripBytesExactly) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  const Reply put =
      fixture.client->put("/v1/sandboxes/" + handle + "/files?path=dir/all%20bytes.bin", bytes);
  ASSERT_EQ(put.status, 200) << put.body;
  EXPECT_EQ(put.json()["size_bytes"], 256);
  const Reply got =
      fixture.client->get("/v1/sandboxes/" + handle + "/files?path=dir/all%20bytes.bin");
  ASSERT_EQ(got.status, 200);
  EXPECT_EQ(got.body, bytes);
  EXPECT_EQ(got.headers.at("content-type"), "application/octet-stream");
  const Reply stat =
      fixture.client->get("/v1/sandboxes/" + handle + "/stat?path=dir/all%20bytes.bin");
  EXPECT_EQ(stat.json()["entry"]["kind"], "file");
  EXPECT_EQ(stat.json()["entry"]["size_bytes"], 256);
  const Reply list = fixture.client->get("/v1/sandboxes/" + handle + "/list?path=dir");
  ASSERT_EQ(list.status, 200) << list.body;
  ASSERT_EQ(list.json()["entries"].size(), 1u);
  EXPECT_EQ(list.json()["entries"][0]["path"], "dir/all bytes.bin");
  EXPECT_EQ(
      fixture.client->del("/v1/sandboxes/" + handle + "/files?path=dir&recursive=true").status,
      200);
  EXPECT_TRUE(
      fixture.client->get("/v1/sandboxes/" + handle + "/stat?path=dir").json()["entry"].is_null());
}

TEST(DaemonApi, FileErrorsCarryTheRefusalAClientMapsPerFile) {
  DaemonFixture fixture;
  const auto key = DaemonFixture::key("s");
  const std::string handle = fixture.acquire(key);
  auto sandbox = fixture.scripted->live({"s", "thread-1", "agent"}, "deepagents");
  ASSERT_TRUE(sandbox);
  sandbox->seed_directory("/maf-sandbox/work/a-directory");
  sandbox->seed_symlink("/maf-sandbox/work/link", "/etc");
  sandbox->seed_file("/maf-sandbox/work/plain", "x");
  const std::string base = "/v1/sandboxes/" + handle + "/files?path=";
  struct Case {
    std::string path;
    long status;
    std::string refusal;
  };
  const std::vector<Case> cases = {
      {"missing", 404, "file_not_found"},        {"a-directory", 409, "is_directory"},
      {"link/passwd", 400, "invalid_path"},       // through a linked parent
      {"../../etc/passwd", 400, "invalid_path"},  // out of the working directory
      {"plain/child", 409, "invalid_path"},       // a parent that is a file
      {"denied", 403, "permission_denied"},
  };
  for (const auto& c : cases) {
    const Reply reply = fixture.client->get(base + url_encode(c.path));
    EXPECT_EQ(reply.status, c.status) << c.path << ": " << reply.body;
    EXPECT_EQ(reply.error()["refusal"], c.refusal) << c.path << ": " << reply.body;
  }
  const Reply write_through_link = fixture.client->put(base + "link/x", "data");
  EXPECT_EQ(write_through_link.status, 400);
  EXPECT_EQ(write_through_link.error()["refusal"], "invalid_path");
}

TEST(DaemonApi, UploadOverTheSpecsFileCapIs413NamingTheCap) {
  DaemonFixture fixture;
  json::Json spec = DaemonFixture::default_spec();
  spec["files_in"] = {{"max_bytes_per_file", 16}, {"max_total_bytes", 64}, {"max_files", 4}};
  const std::string handle = fixture.acquire(DaemonFixture::key("s"), spec);
  const Reply reply =
      fixture.client->put("/v1/sandboxes/" + handle + "/files?path=big", std::string(17, 'x'));
  EXPECT_EQ(reply.status, 413);
  EXPECT_EQ(reply.error()["check"], "spec.files_in.max_bytes_per_file");
  EXPECT_EQ(fixture.client->put("/v1/sandboxes/" + handle + "/files?path=ok", std::string(16, 'x'))
                .status,
            200);
}

TEST(DaemonApi, ReadsAreRefusedPastTheirCapNeverTruncated) {
  DaemonFixture fixture;
  json::Json spec = DaemonFixture::default_spec();
  spec["files_out"] = {{"max_bytes_per_file", 10}, {"max_total_bytes", 64}, {"max_files", 4}};
  const std::string handle = fixture.acquire(DaemonFixture::key("s"), spec);
  ASSERT_EQ(
      fixture.client->put("/v1/sandboxes/" + handle + "/files?path=f", std::string(10, 'x')).status,
      200);
  EXPECT_EQ(fixture.client->get("/v1/sandboxes/" + handle + "/files?path=f").status, 200);
  const Reply smaller =
      fixture.client->get("/v1/sandboxes/" + handle + "/files?path=f&max_bytes=9");
  EXPECT_EQ(smaller.status, 413);
  EXPECT_EQ(smaller.error()["type"], "SandboxTransferCapExceeded") << smaller.body;
  const Reply larger =
      fixture.client->get("/v1/sandboxes/" + handle + "/files?path=f&max_bytes=11");
  EXPECT_EQ(larger.status, 400) << "a ceiling above the spec's is refused, never clamped";
  EXPECT_EQ(larger.error()["check"], "query.max_bytes");
}

TEST(DaemonApi, QueryParametersAreStrict) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  EXPECT_EQ(fixture.client->get("/v1/sandboxes/" + handle + "/stat?path=a&path=b").error()["check"],
            "query.path");
  EXPECT_EQ(
      fixture.client->get("/v1/sandboxes/" + handle + "/stat?path=a&follow=yes").error()["check"],
      "query.follow");
  EXPECT_EQ(fixture.client->get("/v1/sandboxes/" + handle + "/stat").error()["check"],
            "query.path");
  EXPECT_EQ(
      fixture.client->del("/v1/sandboxes/" + handle + "/files?path=a&recursive=1").error()["check"],
      "query.recursive");
}

TEST(DaemonApi, PercentEncodedNulIsRefusedRatherThanCuttingThePath) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  auto sandbox = fixture.scripted->live({"s", "thread-1", "agent"}, "deepagents");
  sandbox->seed_file("/maf-sandbox/work/a", "secret");
  const Reply reply = fixture.client->get("/v1/sandboxes/" + handle + "/files?path=a%00.txt");
  EXPECT_EQ(reply.status, 400);
  EXPECT_NE(reply.body.find("NUL"), std::string::npos);
  EXPECT_EQ(reply.body.find("secret"), std::string::npos);
}

TEST(DaemonApi, BackendErrorDetailNeverReachesTheClient) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  const Reply reply = fixture.exec(handle, {{"argv", {"fail"}}});
  EXPECT_EQ(reply.status, 502);
  EXPECT_EQ(reply.error()["type"], "BackendError");
  EXPECT_EQ(reply.body.find("secret-engine"), std::string::npos) << reply.body;
  EXPECT_EQ(reply.body.find("tenant-42"), std::string::npos) << reply.body;
  fixture.scripted->fail_acquire = true;
  const Reply cold = fixture.client->post(
      "/v1/sandboxes", {{"key", DaemonFixture::key("t")}, {"spec", DaemonFixture::default_spec()}});
  EXPECT_EQ(cold.status, 502);
  EXPECT_EQ(cold.body.find("detail"), std::string::npos);
}

TEST(DaemonApi, PurgeDisposesEveryThreadOfTheScopeAndForgetsItsHandles) {
  DaemonFixture fixture;
  const std::string a1 = fixture.acquire(DaemonFixture::key("tenant-a", "1"));
  const std::string a2 = fixture.acquire(DaemonFixture::key("tenant-a", "2"));
  const std::string b1 = fixture.acquire(DaemonFixture::key("tenant-b", "1"));
  const Reply one_thread =
      fixture.client->post("/v1/purge", {{"scope", "tenant-a"}, {"thread_id", "1"}});
  EXPECT_EQ(one_thread.json()["disposed"], 1);
  EXPECT_EQ(fixture.client->get("/v1/sandboxes/" + a1).status, 404);
  EXPECT_EQ(fixture.client->get("/v1/sandboxes/" + a2).status, 200);
  const Reply scope = fixture.client->post("/v1/purge", {{"scope", "tenant-a"}});
  EXPECT_EQ(scope.json()["disposed"], 1);
  EXPECT_EQ(fixture.client->get("/v1/sandboxes/" + a2).status, 404);
  EXPECT_EQ(fixture.client->get("/v1/sandboxes/" + b1).status, 200);
  EXPECT_EQ(fixture.scripted->live_count(), 1u);
  EXPECT_EQ(fixture.client->post("/v1/purge", {{"scope", ""}}).error()["check"], "body.scope");
}

TEST(DaemonApi, DisposeTakesTheInstanceAndForgetsTheHandle) {
  DaemonFixture fixture;
  const Reply acquired = fixture.client->post(
      "/v1/sandboxes", {{"key", DaemonFixture::key("s")}, {"spec", DaemonFixture::default_spec()}});
  const std::string handle = acquired.json()["sandbox"];
  const std::string instance = acquired.json()["instance_id"];
  const Reply disposed = fixture.client->del("/v1/sandboxes/" + handle);
  ASSERT_EQ(disposed.status, 200) << disposed.body;
  EXPECT_TRUE(disposed.json()["disposed"].get<bool>());
  EXPECT_TRUE(disposed.json()["forgotten"].get<bool>());
  EXPECT_TRUE(fixture.scripted->was_disposed(instance));
  EXPECT_EQ(fixture.client->get("/v1/sandboxes/" + handle).status, 404);
  EXPECT_TRUE(fixture.client->get("/v1/sandboxes").json()["sandboxes"].empty());
}

TEST(DaemonApi, DisposingAStaleInstanceLeavesTheLiveOneAndItsHandle) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  const Reply stale = fixture.client->del("/v1/sandboxes/" + handle + "?instance_id=scripted-999");
  ASSERT_EQ(stale.status, 200);
  EXPECT_FALSE(stale.json()["forgotten"].get<bool>());
  EXPECT_EQ(fixture.scripted->live_count(), 1u);
  EXPECT_EQ(fixture.client->get("/v1/sandboxes/" + handle).status, 200);
}

TEST(DaemonApi, BackendsListTheirDeclarationsAndDurableState) {
  DaemonFixture fixture;
  const Reply backends = fixture.client->get("/v1/backends");
  ASSERT_EQ(backends.status, 200);
  EXPECT_EQ(backends.json()["selected"], "scripted");
  EXPECT_EQ(backends.json()["min_isolation"], "container");
  EXPECT_EQ(backends.json()["backends"][0]["isolation"], "container");
  fixture.acquire(DaemonFixture::key("s"));
  const Reply records = fixture.client->get("/v1/backends/scripted/sandboxes");
  EXPECT_EQ(records.json()["sandboxes"].size(), 1u);
  EXPECT_EQ(fixture.client->get("/v1/backends/nope/sandboxes").status, 404);
}

// Every caller of a daemon is equally trusted (the socket's mode, or the one shared token), so
// nothing tells one conversation's host from another's: the listing is an operator's view that
// names no conversation. A key, a spec or a handle from it would let any caller reach — or
// purge — a sandbox that is not its own.
TEST(DaemonApi, TheListingNamesNoConversationItsKeyOrItsHandle) {
  static constexpr const char* kToken = "a-token-of-at-least-16-characters";
  DaemonFixture fixture(nullptr, [](DaemonOptions& options) {
    options.tcp = "127.0.0.1:0";
    options.token = kToken;
  });
  const Client& over_socket = *fixture.client;
  const Client over_tcp(fixture.options.socket_path, "http://" + fixture.daemon->tcp_address());
  const std::vector<std::string> bearer{"Content-Type: application/json",
                                        std::string("Authorization: Bearer ") + kToken};

  // Two hosts, two conversations. Short, label-safe values: a backend stores them raw.
  json::Json labelled = DaemonFixture::default_spec();
  labelled["labels"] = {{"customer", "acme-corp"}};
  labelled["egress"] = "allowlist";
  labelled["egress_allow"] = {"pypi.org"};
  const Reply first = over_socket.post(
      "/v1/sandboxes",
      {{"key", DaemonFixture::key("tenant-alpha", "thread-a1", "coder-a")}, {"spec", labelled}});
  ASSERT_EQ(first.status, 201) << first.body;
  const json::Json second_request{
      {"key", DaemonFixture::key("tenant-beta", "thread-b1", "coder-b")},
      {"spec", DaemonFixture::default_spec()}};
  const Reply second = over_tcp.request("POST", "/v1/sandboxes", second_request.dump(), bearer);
  ASSERT_EQ(second.status, 201) << second.body;

  const std::vector<std::string> secrets{"tenant-alpha",
                                         "thread-a1",
                                         "coder-a",
                                         "acme-corp",
                                         "tenant-beta",
                                         "thread-b1",
                                         "coder-b",
                                         first.json()["sandbox"].get<std::string>(),
                                         second.json()["sandbox"].get<std::string>()};
  for (const Reply& listed :
       {over_socket.get("/v1/sandboxes"), over_tcp.request("GET", "/v1/sandboxes", {}, bearer),
        over_socket.get("/v1/backends/scripted/sandboxes"),
        over_tcp.request("GET", "/v1/backends/scripted/sandboxes", {}, bearer)}) {
    ASSERT_EQ(listed.status, 200) << listed.body;
    ASSERT_EQ(listed.json()["sandboxes"].size(), 2u) << listed.body;
    for (const auto& secret : secrets) {
      EXPECT_EQ(listed.body.find(secret), std::string::npos)
          << "the listing names '" << secret << "': " << listed.body;
    }
    const json::Json listing = listed.json();  // held: the loop below walks into it
    for (const auto& entry : listing["sandboxes"]) {
      EXPECT_FALSE(entry.contains("key"));
      EXPECT_FALSE(entry.contains("spec"));
      EXPECT_FALSE(entry.contains("sandbox"));
      for (const auto& [name, value] : entry["labels"].items()) {
        EXPECT_EQ(value.get<std::string>().rfind("sha256-", 0), 0u) << name << ": " << value;
      }
    }
  }

  // The operator's fields, exactly; the labels digested so an operator who knows a scope can
  // still find its sandboxes.
  const json::Json listed = over_socket.get("/v1/sandboxes").json()["sandboxes"];
  std::set<std::string> fields;
  for (const auto& [name, value] : listed[0].items()) fields.insert(name);
  EXPECT_EQ(fields, (std::set<std::string>{"backend", "instance_id", "kind", "egress_posture",
                                           "state", "created_at", "labels"}));
  std::map<std::string, json::Json> by_instance;
  for (const auto& entry : listed) by_instance[entry["instance_id"].get<std::string>()] = entry;
  const json::Json& alpha = by_instance.at(first.json()["instance_id"].get<std::string>());
  EXPECT_EQ(alpha["backend"], "scripted");
  EXPECT_EQ(alpha["kind"], "deepagents");
  EXPECT_EQ(alpha["egress_posture"], "allowlist:pypi.org");
  EXPECT_EQ(alpha["state"], "running");
  EXPECT_GT(alpha["created_at"].get<std::int64_t>(), 0);
  EXPECT_EQ(alpha["labels"]["airlock.scope"], label_digest("tenant-alpha"));
  EXPECT_EQ(alpha["labels"]["airlock.thread"], label_digest("thread-a1"));
  EXPECT_EQ(alpha["labels"]["airlock.agent"], label_digest("coder-a"));
  EXPECT_EQ(alpha["labels"]["airlock.label.customer"], label_digest("acme-corp"));
  EXPECT_EQ(
      by_instance.at(second.json()["instance_id"].get<std::string>())["labels"]["airlock.scope"],
      label_digest("tenant-beta"));

  // A host that holds its handle reads its own sandbox's key and spec — and only its own.
  const Reply own = over_tcp.request(
      "GET", "/v1/sandboxes/" + second.json()["sandbox"].get<std::string>(), {}, bearer);
  ASSERT_EQ(own.status, 200) << own.body;
  EXPECT_EQ(own.json()["key"]["scope"], "tenant-beta");
  EXPECT_EQ(own.json()["spec"]["kind"], "deepagents");

  // An instance the backend no longer holds is listed as absent: the next call makes a new one.
  ASSERT_TRUE(fixture.scripted->dispose_kind({"tenant-beta", "thread-b1", "coder-b"}, "deepagents",
                                             std::nullopt));
  const json::Json after = over_socket.get("/v1/sandboxes").json()["sandboxes"];
  for (const auto& entry : after) {
    EXPECT_EQ(entry["state"],
              entry["instance_id"] == second.json()["instance_id"] ? "absent" : "running")
        << entry;
  }
}

TEST(DaemonApi, HandleRecordsAreOwnerOnlyFiles) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  struct stat directory {};
  ASSERT_EQ(stat(fixture.options.state_dir.c_str(), &directory), 0);
  EXPECT_EQ(directory.st_mode & 0777, 0700u);
  struct stat record {};
  ASSERT_EQ(stat((fixture.options.state_dir / (handle + ".json")).c_str(), &record), 0);
  EXPECT_EQ(record.st_mode & 0777, 0600u);
}

TEST(DaemonApi, MetricsCountRequestsByRouteAndStatus) {
  DaemonFixture fixture;
  const std::string handle = fixture.acquire(DaemonFixture::key("s"));
  fixture.exec(handle, {{"argv", {"echo"}}});
  fixture.exec(handle, {{"argv", {"echo"}}, {"bogus", 1}});
  // A request is counted when its exchange completes, after its last byte is sent, so the client
  // can hold its answer a moment before the count moves: read until both execs appear (bounded).
  const auto exec_counted = [](const std::string& text, int status) {
    return text.find(
               "airlock_http_requests_total{method=\"POST\",route=\"/v1/sandboxes/"
               "{handle}/exec\",status=\"" +
               std::to_string(status) + "\"} 1") != std::string::npos;
  };
  Reply metrics = fixture.client->get("/v1/metrics");
  for (int attempt = 0;
       attempt < 100 && !(exec_counted(metrics.body, 200) && exec_counted(metrics.body, 400));
       ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    metrics = fixture.client->get("/v1/metrics");
  }
  ASSERT_EQ(metrics.status, 200);
  EXPECT_EQ(metrics.headers.at("content-type").rfind("text/plain", 0), 0u);
  const std::string& text = metrics.body;
  EXPECT_NE(text.find("airlock_http_requests_total{method=\"POST\",route=\"/v1/sandboxes/{handle}/"
                      "exec\",status=\"200\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("airlock_http_requests_total{method=\"POST\",route=\"/v1/sandboxes/{handle}/"
                      "exec\",status=\"400\"} 1"),
            std::string::npos);
  EXPECT_NE(text.find("airlock_exec_duration_seconds_count 1"), std::string::npos);
  EXPECT_NE(text.find("airlock_errors_total{type=\"InvalidArgument\"} 1"), std::string::npos);
  // The acquire made the instance; the exec found it behind its handle. The malformed exec was
  // refused before admission.
  EXPECT_NE(text.find("airlock_sandboxes_acquired_total{start=\"cold\"} 1"), std::string::npos)
      << text;
  EXPECT_NE(text.find("airlock_sandboxes_acquired_total{start=\"warm\"} 1"), std::string::npos);
  EXPECT_NE(text.find("airlock_sandboxes_live 1"), std::string::npos);
  EXPECT_NE(text.find("airlock_build_info{version=\""), std::string::npos);
  // Latency per route: the exec route's own histogram counts its two requests.
  EXPECT_NE(text.find("airlock_http_request_duration_seconds_count{method=\"POST\",route=\"/v1/"
                      "sandboxes/{handle}/exec\"} 2"),
            std::string::npos);
  for (const char* family :
       {"process_cpu_seconds_total ", "process_resident_memory_bytes ", "process_open_fds ",
        "process_max_fds ", "process_start_time_seconds "}) {
    EXPECT_NE(text.find(std::string("\n") + family), std::string::npos) << family;
  }
}

// A dispose leaves the live gauge where it was before the acquire; a second acquire of the same
// key is warm, one after a dispose is cold again.
TEST(DaemonApi, MetricsTellColdFromWarmAndCountLiveSandboxes) {
  DaemonFixture fixture;
  const auto value = [&](const std::string& series) -> std::string {
    const std::string text = fixture.client->get("/v1/metrics").body;
    const auto at = text.find("\n" + series + " ");
    if (at == std::string::npos) return "absent";
    const auto start = at + series.size() + 2;
    return text.substr(start, text.find('\n', start) - start);
  };
  EXPECT_EQ(value("airlock_sandboxes_live"), "0");
  const std::string handle = fixture.acquire(DaemonFixture::key("m"));
  fixture.acquire(DaemonFixture::key("m"));
  EXPECT_EQ(value("airlock_sandboxes_live"), "1");
  EXPECT_EQ(value("airlock_sandboxes_acquired_total{start=\"cold\"}"), "1");
  EXPECT_EQ(value("airlock_sandboxes_acquired_total{start=\"warm\"}"), "1");
  ASSERT_EQ(fixture.client->del("/v1/sandboxes/" + handle).status, 200);
  EXPECT_EQ(value("airlock_sandboxes_live"), "0");
  fixture.acquire(DaemonFixture::key("m"));
  EXPECT_EQ(value("airlock_sandboxes_acquired_total{start=\"cold\"}"), "2");
}

}  // namespace
}  // namespace airlock::daemon::test
