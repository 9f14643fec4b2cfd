// The double's own faithfulness claims, proven with raw libcurl requests against the running
// program (tests/backends/acas/double/README.md lists what it emulates). Each sandbox behind it
// is a real linux-backend sandbox, so these need root.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <random>
#include <thread>

#include "airlock/backends/linux.hpp"
#include "backends/linux/tree_removal.hpp"
#include "double_process.hpp"

namespace airlock::acas_double::testing {
namespace {

using json::Json;
using namespace std::chrono_literals;

constexpr const char* kGuestHostname = "acas-double-guest\n";

// A directory under /tmp, removed (links never followed) when it goes.
class ScratchDirectory {
 public:
  explicit ScratchDirectory(const std::string& prefix) {
    std::string pattern = "/tmp/" + prefix + "-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~ScratchDirectory() {
    const int parent = ::open(path_.parent_path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (parent >= 0) {
      (void)linux_backend::remove_tree(parent, path_.filename().string());
      ::close(parent);
    }
  }
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

// The busybox root filesystem the linux backend's own tests use (busybox-static, every applet a
// link, owned by the backend's default guest root), plus a guest /etc/hostname the host cannot
// have, so that a read through a link proves which root it resolved in.
std::optional<std::filesystem::path> make_busybox_rootfs(const std::filesystem::path& where) {
  const std::filesystem::path busybox = "/bin/busybox";
  if (!std::filesystem::exists(busybox)) return std::nullopt;
  const std::filesystem::path root = where / "busybox-rootfs";
  for (const char* directory : {"bin", "etc", "proc", "sys", "dev", "tmp", "root", "usr", "run"}) {
    std::filesystem::create_directories(root / directory);
  }
  std::filesystem::copy_file(busybox, root / "bin" / "busybox");
  std::filesystem::create_symlink("../bin", root / "usr" / "bin");
  for (const char* applet : {"sh", "echo", "cat", "printf", "ln", "mkfifo", "stat", "rm", "sleep",
                             "mkdir", "head", "wc", "dd", "base64", "rmdir", "ls", "id", "true"}) {
    std::filesystem::create_symlink("busybox", root / "bin" / applet);
  }
  std::ofstream(root / "etc" / "passwd") << "root:x:0:0:root:/root:/bin/sh\n";
  std::ofstream(root / "etc" / "group") << "root:x:0:\n";
  std::ofstream(root / "etc" / "hostname") << kGuestHostname;
  std::filesystem::permissions(root / "tmp", std::filesystem::perms(01777));
  const std::uint32_t owner = LinuxBackendConfig{}.uid_base;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    ::lchown(entry.path().c_str(), owner, owner);
  }
  ::lchown(root.c_str(), owner, owner);
  return root;
}

std::string deny_all() {
  return R"({"defaultAction":"Deny","trafficInspection":"Full","hostRules":[]})";
}

std::string create_body(const std::string& disk, const Json& labels,
                        const std::string& egress = deny_all()) {
  return R"({"sourcesRef":{"diskImage":)" + disk +
         R"(},"resources":{"cpu":"1000m","memory":"2048Mi"},)"
         R"("lifecycle":{"autoSuspendPolicy":{"enabled":true,"interval":300,"mode":"Memory"}},)"
         R"("labels":)" + labels.dump() + R"(,"egressPolicy":)" + egress + "}";
}

std::string url_escape(const std::string& text) {
  std::string out;
  for (const unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

class AcasDoubleTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() != 0) return;
    images_ = std::make_unique<ScratchDirectory>("acas-double-images");
    rootfs_ = make_busybox_rootfs(images_->path());
  }
  static void TearDownTestSuite() { images_.reset(); }

  void SetUp() override {
    if (::geteuid() != 0) {
      GTEST_SKIP() << "SKIPPED: the double's sandboxes are linux-backend sandboxes, which need "
                      "root (user namespaces with a full uid range, cgroups, mounts)";
    }
    if (!rootfs_) GTEST_SKIP() << "SKIPPED: busybox-static is not installed (/bin/busybox)";
  }

  // A double with the busybox image public, imported (id img-busybox) and, as
  // "busybox-unmapped", with the file API's entries left to host root.
  std::unique_ptr<DoubleProcess> start(std::vector<std::string> flags = {},
                                       DoubleOptions options = {}) {
    const std::string rootfs = rootfs_->string();
    options.extra_flags = {"--image", "airlock-busybox=" + rootfs + ",public",
                           "--image", "bicep-sandbox=" + rootfs + ",id=img-busybox,base=bicep-sandbox:0.46.1",
                           "--image", "busybox-unmapped=" + rootfs + ",public,file_owner=unmapped"};
    options.extra_flags.insert(options.extra_flags.end(), flags.begin(), flags.end());
    return std::make_unique<DoubleProcess>(options);
  }

  static std::string create(const DoubleProcess& double_, const Json& labels = Json::object(),
                            const std::string& disk = R"({"name":"airlock-busybox","isPublic":true})") {
    const HttpAnswer answer = double_.data_plane("PUT", "/sandboxes", create_body(disk, labels));
    EXPECT_EQ(answer.status, 201) << answer.body << answer.error;
    const Json body = answer.json();
    EXPECT_EQ(body.value("state", ""), "Creating") << answer.body;
    return body.value("id", "");
  }

  static void wait_running(const DoubleProcess& double_, const std::string& id) {
    for (int poll = 0; poll < 20; ++poll) {
      const HttpAnswer answer = double_.data_plane("GET", "/sandboxes/" + id);
      if (answer.status == 200 && answer.json().value("state", "") == "Running") return;
    }
    FAIL() << "sandbox " << id << " never reached Running";
  }

  static std::string running(const DoubleProcess& double_, const Json& labels = Json::object(),
                             const std::string& disk = R"({"name":"airlock-busybox","isPublic":true})") {
    const std::string id = create(double_, labels, disk);
    wait_running(double_, id);
    return id;
  }

  static Json exec(const DoubleProcess& double_, const std::string& id, const std::string& command,
                   const std::string& working_directory = "/") {
    const HttpAnswer answer =
        double_.data_plane("POST", "/sandboxes/" + id + "/executeShellCommand",
                           Json({{"command", command}, {"workingDirectory", working_directory}}).dump());
    EXPECT_EQ(answer.status, 200) << answer.body << answer.error;
    return answer.json();
  }

  static HttpAnswer file_get(const DoubleProcess& double_, const std::string& id,
                             const std::string& route, const std::string& path,
                             std::chrono::milliseconds timeout = 30s) {
    return double_.data_plane("GET", "/sandboxes/" + id + "/" + route + "?path=" + url_escape(path),
                              std::nullopt, timeout);
  }

  static inline std::unique_ptr<ScratchDirectory> images_;
  static inline std::optional<std::filesystem::path> rootfs_;
};

TEST_F(AcasDoubleTest, RefusesAnyOtherApiVersionAndAMissingOne) {
  auto double_ = start();
  HttpCall call;
  call.ca_file = double_->ca_file();
  call.headers = {"Authorization: Bearer test-token"};
  call.url = double_->group_url() + "/sandboxes?api-version=2025-01-01";
  HttpAnswer answer = http_call(call);
  EXPECT_EQ(answer.status, 400) << answer.body;
  EXPECT_EQ(answer.json()["error"].value("code", ""), "UnsupportedApiVersion");
  call.url = double_->group_url() + "/sandboxes";
  EXPECT_EQ(http_call(call).status, 400);
  call.url = double_->group_url() + "/sandboxes?api-version=2026-02-01-preview";
  EXPECT_EQ(http_call(call).status, 200);
}

TEST_F(AcasDoubleTest, RefusesARequestWithoutAValidBearer) {
  auto double_ = start();
  HttpCall call;
  call.ca_file = double_->ca_file();
  call.url = double_->group_url() + "/sandboxes?api-version=2026-02-01-preview";
  HttpAnswer answer = http_call(call);
  EXPECT_EQ(answer.status, 401) << answer.body;
  EXPECT_NE(answer.headers["www-authenticate"].find("Bearer"), std::string::npos);
  call.headers = {"Authorization: Bearer not-a-token"};
  EXPECT_EQ(http_call(call).status, 401);
  const Json log = double_->requests();
  ASSERT_EQ(log.size(), 2u) << log.dump();
  EXPECT_EQ(log[0]["authorization"], "none");
  EXPECT_EQ(log[1]["authorization"], "invalid");
  EXPECT_EQ(log[1]["route"], "list");
  EXPECT_EQ(log[1]["status"], 401);
}

TEST_F(AcasDoubleTest, AnotherGroupIsNotFound) {
  auto double_ = start();
  HttpCall call;
  call.ca_file = double_->ca_file();
  call.headers = {"Authorization: Bearer test-token"};
  call.url = double_->endpoint() +
             "/subscriptions/sub-0001/resourceGroups/rg-double/sandboxGroups/other/sandboxes"
             "?api-version=2026-02-01-preview";
  EXPECT_EQ(http_call(call).status, 404);
}

TEST_F(AcasDoubleTest, CreateIsCreatingThenRunningAfterATransient404) {
  auto double_ = start();
  const std::string id = create(*double_, {{"scope", "s1"}});
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(double_->data_plane("GET", "/sandboxes/" + id).status, 404);  // just created
  for (int poll = 0; poll < 2; ++poll) {
    const HttpAnswer answer = double_->data_plane("GET", "/sandboxes/" + id);
    ASSERT_EQ(answer.status, 200);
    EXPECT_EQ(answer.json()["state"], "Creating");
  }
  const HttpAnswer answer = double_->data_plane("GET", "/sandboxes/" + id);
  ASSERT_EQ(answer.status, 200);
  const Json sandbox = answer.json();
  EXPECT_EQ(sandbox["state"], "Running");
  EXPECT_EQ(sandbox["labels"]["scope"], "s1");
  EXPECT_EQ(sandbox["sourcesRef"]["diskImage"]["name"], "airlock-busybox");
  for (const char* field : {"resources", "lifecycle", "egressPolicy", "stateDetails", "createdAt", "region"}) {
    EXPECT_TRUE(sandbox.contains(field)) << field;
  }
  const Json state = double_->state();
  ASSERT_EQ(state["sandboxes"].size(), 1u);
  EXPECT_TRUE(state["sandboxes"][0]["linux_instance_id"].is_string());
  EXPECT_EQ(state["linux_sandboxes"], 1);
}

TEST_F(AcasDoubleTest, RefusesALabelValueOver63Characters) {
  auto double_ = start();
  const HttpAnswer answer = double_->data_plane(
      "PUT", "/sandboxes",
      create_body(R"({"name":"airlock-busybox","isPublic":true})", {{"scope", std::string(64, 'x')}}));
  EXPECT_EQ(answer.status, 400);
  EXPECT_NE(answer.body.find("Label value for key 'scope' exceeds 63 characters"), std::string::npos)
      << answer.body;
  EXPECT_EQ(double_->state()["linux_sandboxes"], 0);
}

TEST_F(AcasDoubleTest, RefusesUnknownImagesAndEgressItCannotEnforce) {
  auto double_ = start();
  EXPECT_EQ(double_->data_plane("PUT", "/sandboxes",
                                create_body(R"({"name":"python-3.13","isPublic":true})", Json::object()))
                .status,
            400);
  EXPECT_EQ(double_->data_plane("PUT", "/sandboxes", create_body(R"({"id":"img-nope"})", Json::object()))
                .status,
            400);
  EXPECT_EQ(double_->data_plane("PUT", "/sandboxes",
                                create_body(R"({"name":"airlock-busybox","isPublic":true})",
                                            Json::object(), R"({"defaultAction":"Allow"})"))
                .status,
            400);
  EXPECT_EQ(double_->state()["linux_sandboxes"], 0);
}

TEST_F(AcasDoubleTest, ListsByLabelsAndedAndByImportedImageId) {
  auto double_ = start();
  const std::string both = create(*double_, {{"scope", "a"}, {"thread", "1"}});
  (void)create(*double_, {{"scope", "a"}, {"thread", "2"}});
  (void)create(*double_, {{"scope", "b"}, {"thread", "1"}}, R"({"id":"img-busybox"})");
  HttpAnswer answer = double_->data_plane("GET", "/sandboxes?labels=scope%3Da%2Cthread%3D1");
  ASSERT_EQ(answer.status, 200);
  Json items = answer.json();
  ASSERT_TRUE(items.is_array()) << answer.body;
  ASSERT_EQ(items.size(), 1u) << answer.body;
  EXPECT_EQ(items[0]["id"], both);
  answer = double_->data_plane("GET", "/sandboxes?labels=scope%3Da");
  EXPECT_EQ(answer.json().size(), 2u);
  answer = double_->data_plane("GET", "/sandboxes");
  EXPECT_EQ(answer.json().size(), 3u);
}

TEST_F(AcasDoubleTest, PagesWithANextLinkOnTheSameHost) {
  auto double_ = start({"--page-size", "2"});
  for (int i = 0; i < 3; ++i) (void)create(*double_, {{"scope", "paged"}});
  HttpAnswer answer = double_->data_plane("GET", "/sandboxes?labels=scope%3Dpaged");
  ASSERT_EQ(answer.status, 200);
  Json page = answer.json();
  ASSERT_EQ(page["value"].size(), 2u) << answer.body;
  const std::string next = page["nextLink"];
  ASSERT_EQ(next.rfind(double_->endpoint() + "/", 0), 0u) << next;
  HttpCall call;
  call.url = next;
  call.ca_file = double_->ca_file();
  call.headers = {"Authorization: Bearer test-token"};
  answer = http_call(call);
  ASSERT_EQ(answer.status, 200) << answer.body;
  page = answer.json();
  EXPECT_EQ(page["value"].size(), 1u);
  EXPECT_TRUE(page["nextLink"].is_null());
}

TEST_F(AcasDoubleTest, DeleteShowsDeletingThen404AndDisposesTheLinuxSandbox) {
  auto double_ = start();
  const std::string id = running(*double_);
  EXPECT_EQ(double_->state()["linux_sandboxes"], 1);
  EXPECT_EQ(double_->data_plane("DELETE", "/sandboxes/" + id).status, 202);
  HttpAnswer answer = double_->data_plane("GET", "/sandboxes/" + id);
  ASSERT_EQ(answer.status, 200);
  EXPECT_EQ(answer.json()["state"], "Deleting");
  EXPECT_EQ(double_->data_plane("GET", "/sandboxes/" + id).status, 404);
  EXPECT_EQ(double_->state()["linux_sandboxes"], 0);
  EXPECT_EQ(double_->data_plane("DELETE", "/sandboxes/" + id).status, 404);
  EXPECT_EQ(double_->data_plane("DELETE", "/sandboxes/sbx-unknown").status, 404);
}

TEST_F(AcasDoubleTest, ExecRunsInTheLinuxSandboxAndTheFileApiSeesItsFiles) {
  auto double_ = start();
  const std::string id = running(*double_);
  Json result = exec(*double_, id, "echo written > /tmp/by-exec; echo out; echo err >&2; pwd; exit 3",
                     "/tmp");
  EXPECT_EQ(result["exitCode"], 3);
  EXPECT_EQ(result["stdout"], "out\n/tmp\n");
  EXPECT_EQ(result["stderr"], "err\n");
  EXPECT_TRUE(result["executionTimeMs"].is_number());
  HttpAnswer read = file_get(*double_, id, "files", "/tmp/by-exec");
  EXPECT_EQ(read.status, 200);
  EXPECT_EQ(read.body, "written\n");
  // And the other way: a file the API writes is the guest root's, readable by exec.
  HttpAnswer wrote = double_->data_plane(
      "PUT", "/sandboxes/" + id + "/files?path=/work/sub/in.txt&createDirs=true", "from the api",
      30s, {"Content-Type: application/octet-stream"});
  EXPECT_EQ(wrote.status, 200) << wrote.body;
  result = exec(*double_, id, "cat /work/sub/in.txt; echo; stat -c '%u %a' /work/sub/in.txt /work/sub");
  EXPECT_EQ(result["stdout"], "from the api\n0 644\n0 755\n");
  EXPECT_EQ(exec(*double_, id, "rm /work/sub/in.txt")["exitCode"], 0);
  // Without createDirs, a missing parent is a 404.
  EXPECT_EQ(double_->data_plane("PUT", "/sandboxes/" + id + "/files?path=/nope/x&createDirs=false",
                                "x")
                .status,
            404);
}

TEST_F(AcasDoubleTest, AnUnmappedImageLeavesFileApiEntriesToHostRoot) {
  auto double_ = start();
  const std::string id = running(*double_, Json::object(), R"({"name":"busybox-unmapped","isPublic":true})");
  ASSERT_EQ(double_->data_plane("PUT", "/sandboxes/" + id + "/files?path=/probe/f&createDirs=true", "p")
                .status,
            200);
  Json result = exec(*double_, id, "stat -c %u /probe/f; rm -f /probe/f");
  EXPECT_NE(result["stdout"], "0\n");
  EXPECT_NE(result["exitCode"], 0) << "the guest removed what host root wrote";
}

TEST_F(AcasDoubleTest, ReplacesInvalidUtf8InExecOutput) {
  auto double_ = start();
  const std::string id = running(*double_);
  const Json result = exec(*double_, id, R"(printf 'a\377b'; printf '\376' >&2)");
  EXPECT_EQ(result["stdout"], "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(result["stderr"], "\xEF\xBF\xBD");
}

TEST_F(AcasDoubleTest, StatIsLstatAndReadFollowsLinksInsideTheGuestRoot) {
  auto double_ = start();
  const std::string id = running(*double_);
  ASSERT_EQ(exec(*double_, id,
                 "mkdir -p /work && ln -s /etc/hostname /work/link-out.txt && "
                 "ln -s ../../../../../etc/hostname /work/climb && echo hi > /work/real.txt")["exitCode"],
            0);
  HttpAnswer answer = file_get(*double_, id, "files/stat", "/work/link-out.txt");
  ASSERT_EQ(answer.status, 200) << answer.body;
  Json info = answer.json();
  EXPECT_EQ(info["name"], "link-out.txt");
  EXPECT_EQ(info["path"], "/work/link-out.txt");
  EXPECT_EQ(info["isSymlink"], true);
  EXPECT_EQ(info["isDir"], false);
  EXPECT_EQ(info["symlinkTarget"], "/etc/hostname");
  EXPECT_EQ(info["size"], 13);
  EXPECT_EQ(info["mode"], 511);
  info = file_get(*double_, id, "files/stat", "/work/real.txt").json();
  EXPECT_EQ(info["isSymlink"], false);
  EXPECT_EQ(info["size"], 3);
  EXPECT_EQ(info["mode"], 420);
  EXPECT_FALSE(info.contains("symlinkTarget"));
  info = file_get(*double_, id, "files/stat", "/work").json();
  EXPECT_EQ(info["isDir"], true);
  EXPECT_EQ(file_get(*double_, id, "files/stat", "/work/missing").status, 404);
  // Reads follow links, and an absolute or climbing target stays in the guest's root.
  EXPECT_EQ(file_get(*double_, id, "files", "/work/link-out.txt").body, kGuestHostname);
  EXPECT_EQ(file_get(*double_, id, "files", "/work/climb").body, kGuestHostname);
  EXPECT_EQ(file_get(*double_, id, "files", "/work").status, 400);
  // The listing: direct children, links as links.
  answer = file_get(*double_, id, "files/list", "/work");
  ASSERT_EQ(answer.status, 200);
  const Json listing = answer.json();
  EXPECT_EQ(listing["path"], "/work");
  ASSERT_EQ(listing["entries"].size(), 3u) << answer.body;
  EXPECT_EQ(listing["entries"][1]["name"], "link-out.txt");
  EXPECT_EQ(listing["entries"][1]["isSymlink"], true);
  EXPECT_EQ(listing["entries"][1]["path"], "/work/link-out.txt");
}

TEST_F(AcasDoubleTest, AFifoStatsAsAnEmptyFileAndItsReadHangsUntilTheClientGivesUp) {
  auto double_ = start();
  const std::string id = running(*double_);
  ASSERT_EQ(exec(*double_, id, "mkfifo /tmp/pipe")["exitCode"], 0);
  const Json info = file_get(*double_, id, "files/stat", "/tmp/pipe").json();
  EXPECT_EQ(info["isDir"], false);
  EXPECT_EQ(info["isSymlink"], false);
  EXPECT_EQ(info["size"], 0);
  const auto started = std::chrono::steady_clock::now();
  const HttpAnswer read = file_get(*double_, id, "files", "/tmp/pipe", 2s);
  EXPECT_TRUE(read.timed_out) << read.status << " " << read.error;
  EXPECT_GE(std::chrono::steady_clock::now() - started, 1900ms);
  // The double is unharmed and other routes answer.
  EXPECT_EQ(double_->data_plane("GET", "/sandboxes/" + id).status, 200);
}

TEST_F(AcasDoubleTest, MkdirAndDeleteFiles) {
  auto double_ = start();
  const std::string id = running(*double_);
  HttpAnswer answer = double_->data_plane("POST", "/sandboxes/" + id + "/files/mkdir",
                                          R"({"path":"/data/a/b"})");
  EXPECT_EQ(answer.status, 200) << answer.body;
  EXPECT_EQ(answer.json()["success"], true);
  ASSERT_EQ(double_->data_plane("PUT", "/sandboxes/" + id + "/files?path=/data/a/b/f", "x").status, 200);
  EXPECT_EQ(double_->data_plane("DELETE", "/sandboxes/" + id + "/files?path=/data/a&recursive=false")
                .status,
            409);
  EXPECT_EQ(double_->data_plane("DELETE", "/sandboxes/" + id + "/files?path=/data/a&recursive=true")
                .status,
            200);
  EXPECT_EQ(file_get(*double_, id, "files/stat", "/data/a").status, 404);
  EXPECT_EQ(double_->data_plane("DELETE", "/sandboxes/" + id + "/files?path=/data/a&recursive=true")
                .status,
            404);
}

TEST_F(AcasDoubleTest, ALongExecDoesNotHoldUpOtherRoutes) {
  auto double_ = start();
  const std::string id = running(*double_);
  auto slow = std::async(std::launch::async, [&] { return exec(*double_, id, "sleep 8; echo done"); });
  std::this_thread::sleep_for(300ms);
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(double_->data_plane("GET", "/diskimages/public").status, 200);
  EXPECT_EQ(exec(*double_, id, "echo quick")["stdout"], "quick\n");
  EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);  // not after the 8 s exec
  EXPECT_EQ(slow.get()["stdout"], "done\n");
}

TEST_F(AcasDoubleTest, AServerSideExecTimeoutIsExit124) {
  auto double_ = start({"--exec-timeout-seconds", "1"});
  const std::string id = running(*double_);
  const Json result = exec(*double_, id, "echo begun; sleep 10");
  EXPECT_EQ(result["exitCode"], 124);
  EXPECT_NE(result["stderr"].get<std::string>().find("timed out"), std::string::npos);
}

TEST_F(AcasDoubleTest, ListsImages) {
  auto double_ = start();
  HttpAnswer answer = double_->data_plane("GET", "/diskimages/public");
  ASSERT_EQ(answer.status, 200);
  Json items = answer.json();
  ASSERT_EQ(items.size(), 2u) << answer.body;
  EXPECT_EQ(items[0]["name"], "airlock-busybox");
  answer = double_->data_plane("GET", "/diskimages");
  items = answer.json();
  ASSERT_EQ(items.size(), 1u) << answer.body;
  EXPECT_EQ(items[0]["id"], "img-busybox");
  EXPECT_EQ(items[0]["image"]["base"], "bicep-sandbox:0.46.1");
  EXPECT_EQ(items[0]["status"]["state"], "Ready");
}

TEST_F(AcasDoubleTest, LifecycleIsStoredAndResumeHonoursDisabled) {
  auto double_ = start();
  const std::string id = running(*double_);
  const std::string policy =
      R"({"autoSuspendPolicy":{"enabled":true,"interval":60,"mode":"Memory"},)"
      R"("autoDeletePolicy":{"enabled":true,"deleteIntervalInSeconds":600}})";
  HttpAnswer answer = double_->data_plane("POST", "/sandboxes/" + id + "/lifecycle", policy);
  ASSERT_EQ(answer.status, 200);
  EXPECT_EQ(answer.json()["lifecycle"], Json::parse(policy));
  EXPECT_EQ(double_->state()["sandboxes"][0]["lifecycle"], Json::parse(policy));
  double_->set_state(id, "Suspended", "Disabled");
  answer = double_->data_plane("GET", "/sandboxes/" + id);
  EXPECT_EQ(answer.json()["stateDetails"]["stoppedReason"], "Disabled");
  EXPECT_EQ(double_->data_plane("POST", "/sandboxes/" + id + "/resume", "{}").status, 409);
  double_->set_state(id, "Suspended");
  EXPECT_EQ(double_->data_plane("POST", "/sandboxes/" + id + "/resume", "{}").status, 200);
  EXPECT_EQ(double_->data_plane("GET", "/sandboxes/" + id).json()["state"], "Running");
}

TEST_F(AcasDoubleTest, InjectsFaults) {
  auto double_ = start();
  // 429 with Retry-After, once.
  double_->add_fault({{"method", "GET"}, {"route", "images_public"}, {"status", 429}, {"retry_after", "2"}});
  HttpAnswer answer = double_->data_plane("GET", "/diskimages/public");
  EXPECT_EQ(answer.status, 429);
  EXPECT_EQ(answer.headers["retry-after"], "2");
  EXPECT_EQ(double_->data_plane("GET", "/diskimages/public").status, 200);
  // 403 (RBAC propagation) then 200; and skip lets the first match through.
  double_->add_fault({{"route", "images"}, {"status", 403}, {"times", 1}, {"skip", 1}});
  EXPECT_EQ(double_->data_plane("GET", "/diskimages").status, 200);
  EXPECT_EQ(double_->data_plane("GET", "/diskimages").status, 403);
  EXPECT_EQ(double_->data_plane("GET", "/diskimages").status, 200);
  // A dropped connection.
  double_->add_fault({{"route", "list"}, {"drop", true}});
  answer = double_->data_plane("GET", "/sandboxes");
  EXPECT_EQ(answer.status, 0);
  EXPECT_FALSE(answer.error.empty());
  // A slow but real answer.
  double_->add_fault({{"route", "list"}, {"status", 0}, {"delay_ms", 1500}});
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(double_->data_plane("GET", "/sandboxes").status, 200);
  EXPECT_GE(std::chrono::steady_clock::now() - started, 1400ms);
  // A custom body, and the log records what was answered.
  double_->add_fault({{"route", "create"}, {"status", 503}, {"body", "busy"}, {"retry_after_ms", 250}});
  answer = double_->data_plane("PUT", "/sandboxes", "{}");
  EXPECT_EQ(answer.status, 503);
  EXPECT_EQ(answer.body, "busy");
  EXPECT_EQ(answer.headers["retry-after-ms"], "250");
  const Json log = double_->requests();
  EXPECT_EQ(log.back()["route"], "create");
  EXPECT_EQ(log.back()["status"], 503);
  EXPECT_EQ(log.back()["body"], "{}");
  double_->clear_requests();
  EXPECT_TRUE(double_->requests().empty());
}

TEST_F(AcasDoubleTest, TheTokenEndpointTakesTheSecretOrTheFederatedAssertion) {
  ScratchDirectory scratch("acas-double-token");
  const auto assertion_file = scratch.path() / "token";
  std::ofstream(assertion_file) << "header.payload.signature\n";
  DoubleOptions options;
  options.accept_token = "";
  auto double_ = start({"--federated-token-file", assertion_file.string()}, options);
  HttpCall call;
  call.method = "POST";
  call.ca_file = double_->ca_file();
  call.url = double_->endpoint() + "/tenant-0001/oauth2/v2.0/token";
  call.body = "grant_type=client_credentials&client_id=app-1&scope=https%3A%2F%2Fdynamicsessions.io%2F.default"
              "&client_secret=double-secret";
  HttpAnswer answer = http_call(call);
  ASSERT_EQ(answer.status, 200) << answer.body;
  const Json token = answer.json();
  EXPECT_EQ(token["token_type"], "Bearer");
  EXPECT_EQ(token["expires_in"], 3600);
  // The minted token opens the data plane.
  HttpCall list;
  list.ca_file = double_->ca_file();
  list.url = double_->group_url() + "/sandboxes?api-version=2026-02-01-preview";
  list.headers = {"Authorization: Bearer " + token["access_token"].get<std::string>()};
  EXPECT_EQ(http_call(list).status, 200);
  call.body = "grant_type=client_credentials&client_id=app-1&scope=x&client_secret=wrong";
  answer = http_call(call);
  EXPECT_EQ(answer.status, 401);
  EXPECT_EQ(answer.json()["error"], "invalid_client");
  call.body = "grant_type=client_credentials&client_id=app-1&scope=x"
              "&client_assertion_type=urn%3Aietf%3Aparams%3Aoauth%3Aclient-assertion-type%3Ajwt-bearer"
              "&client_assertion=header.payload.signature";
  EXPECT_EQ(http_call(call).status, 200);
  call.body = "grant_type=client_credentials&client_id=app-1&scope=x"
              "&client_assertion_type=urn%3Aietf%3Aparams%3Aoauth%3Aclient-assertion-type%3Ajwt-bearer"
              "&client_assertion=forged";
  EXPECT_EQ(http_call(call).status, 401);
  call.url = double_->endpoint() + "/other-tenant/oauth2/v2.0/token";
  EXPECT_EQ(http_call(call).status, 400);
}

TEST_F(AcasDoubleTest, ServesImdsAndTheAppServiceForm) {
  DoubleOptions options;
  options.accept_token = "";
  auto double_ = start({"--identity-header", "hdr-1"}, options);
  HttpCall call;
  call.url = double_->identity_http() +
             "/metadata/identity/oauth2/token?api-version=2018-02-01&resource=https%3A%2F%2Fdynamicsessions.io";
  EXPECT_EQ(http_call(call).status, 400);  // no Metadata header
  call.headers = {"Metadata: true"};
  HttpAnswer answer = http_call(call);
  ASSERT_EQ(answer.status, 200) << answer.body;
  Json token = answer.json();
  EXPECT_TRUE(token["expires_on"].is_string());
  EXPECT_EQ(token["resource"], "https://dynamicsessions.io");
  HttpCall list;
  list.ca_file = double_->ca_file();
  list.url = double_->group_url() + "/sandboxes?api-version=2026-02-01-preview";
  list.headers = {"Authorization: Bearer " + token["access_token"].get<std::string>()};
  EXPECT_EQ(http_call(list).status, 200);
  call.url = double_->identity_http() + "/msi/token?api-version=2019-08-01&resource=https%3A%2F%2Fx";
  call.headers = {"X-IDENTITY-HEADER: wrong"};
  EXPECT_EQ(http_call(call).status, 401);
  call.headers = {"X-IDENTITY-HEADER: hdr-1"};
  answer = http_call(call);
  ASSERT_EQ(answer.status, 200) << answer.body;
  EXPECT_TRUE(answer.json()["expires_on"].is_string());
  double_->add_fault({{"route", "imds"}, {"status", 500}});
  call.url = double_->identity_http() + "/metadata/identity/oauth2/token?api-version=2018-02-01&resource=r";
  call.headers = {"Metadata: true"};
  EXPECT_EQ(http_call(call).status, 500);
}

TEST_F(AcasDoubleTest, AllowHostRulesMakeAnAllowlistedSandbox) {
  auto double_ = start();
  const std::string id = create(
      *double_, Json::object(), R"({"name":"airlock-busybox","isPublic":true})");
  (void)id;
  const HttpAnswer answer = double_->data_plane(
      "PUT", "/sandboxes",
      create_body(R"({"name":"airlock-busybox","isPublic":true})", Json::object(),
                  R"({"defaultAction":"Deny","hostRules":[{"pattern":"pypi.org","action":"Allow"}]})"));
  ASSERT_EQ(answer.status, 201) << answer.body;
  const std::string allowlisted = answer.json()["id"];
  wait_running(*double_, allowlisted);
  // The guest is given the egress bridge (and only with an Allow rule).
  EXPECT_NE(exec(*double_, allowlisted, "echo $HTTPS_PROXY")["stdout"], "\n");
  wait_running(*double_, id);
  EXPECT_EQ(exec(*double_, id, "echo $HTTPS_PROXY")["stdout"], "\n");
}

TEST_F(AcasDoubleTest, AFailedLinuxAcquireShowsStateFailed) {
  auto double_ = start({"--image", "broken=/nonexistent-rootfs,public"});
  const std::string id = create(*double_, Json::object(), R"({"name":"broken","isPublic":true})");
  std::string state;
  for (int poll = 0; poll < 5 && state.empty(); ++poll) {
    const HttpAnswer answer = double_->data_plane("GET", "/sandboxes/" + id);
    if (answer.status == 200 && answer.json()["state"] != "Creating") state = answer.json()["state"];
  }
  EXPECT_EQ(state, "Failed");
}

TEST_F(AcasDoubleTest, MintedTokensExpire) {
  DoubleOptions options;
  options.accept_token = "";
  auto double_ = start({"--token-lifetime-seconds", "1"}, options);
  HttpCall call;
  call.url = double_->identity_http() + "/metadata/identity/oauth2/token?api-version=2018-02-01&resource=r";
  call.headers = {"Metadata: true"};
  const std::string token = http_call(call).json()["access_token"];
  HttpCall list;
  list.ca_file = double_->ca_file();
  list.url = double_->group_url() + "/sandboxes?api-version=2026-02-01-preview";
  list.headers = {"Authorization: Bearer " + token};
  EXPECT_EQ(http_call(list).status, 200);
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(http_call(list).status, 401);
}

TEST_F(AcasDoubleTest, StdinEofStopsItAndLeavesNothing) {
  ScratchDirectory state("acas-double-state");
  DoubleOptions options;
  options.state_dir = state.path().string();
  auto double_ = start({}, options);
  (void)running(*double_);
  double_->close_stdin();
  const auto status = double_->wait_exit();
  ASSERT_TRUE(status.has_value()) << "the double ignored stdin EOF";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status;
  LinuxBackendConfig config;
  config.state_dir = state.path();
  EXPECT_TRUE(make_linux_backend(config)->list_sandboxes().empty());
}

TEST_F(AcasDoubleTest, SigtermLeavesNothingInTheLinuxBackend) {
  ScratchDirectory state("acas-double-state");
  DoubleOptions options;
  options.state_dir = state.path().string();
  auto double_ = start({}, options);
  (void)running(*double_);
  (void)running(*double_);
  LinuxBackendConfig config;
  config.state_dir = state.path();
  EXPECT_EQ(make_linux_backend(config)->list_sandboxes().size(), 2u);
  const int status = double_->stop();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_TRUE(make_linux_backend(config)->list_sandboxes().empty());
}

}  // namespace
}  // namespace airlock::acas_double::testing
