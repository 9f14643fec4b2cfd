#include "gvisor/fixture.hpp"

#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>

#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "airlock/images.hpp"

namespace airlock::gvisor_backend::testing {
namespace {

bool executable(const std::filesystem::path& path) {
  return ::access(path.c_str(), X_OK) == 0;
}

std::optional<std::filesystem::path> runsc_binary() {
  if (const char* path = std::getenv("PATH")) {
    std::istringstream directories(path);
    std::string directory;
    while (std::getline(directories, directory, ':')) {
      if (!directory.empty() && executable(std::filesystem::path(directory) / "runsc")) {
        return std::filesystem::path(directory) / "runsc";
      }
    }
  }
  if (executable("/usr/bin/runsc")) return std::filesystem::path("/usr/bin/runsc");
  return std::nullopt;
}

// busybox plus the host's curl and every library ldd names for it, at the same paths: the egress
// conformance suite runs curl in the guest. False when the host has no curl.
bool make_curl_rootfs(const std::filesystem::path& root) {
  if (::access("/usr/bin/curl", X_OK) != 0) return false;
  make_busybox_rootfs(root);
  std::vector<std::filesystem::path> files = {"/usr/bin/curl"};
  FILE* listing = ::popen("ldd /usr/bin/curl", "r");
  if (listing == nullptr) return false;
  char line[1024];
  while (std::fgets(line, sizeof line, listing) != nullptr) {
    std::istringstream words(line);
    std::string word;
    while (words >> word) {
      if (word.front() == '/') files.emplace_back(word);
    }
  }
  if (::pclose(listing) != 0) return false;
  for (const auto& file : files) {
    const auto target = root / file.relative_path();
    std::filesystem::create_directories(target.parent_path());
    std::filesystem::copy_file(file, target, std::filesystem::copy_options::overwrite_existing);
  }
  std::filesystem::create_directories(root / "root");
  return true;
}

struct SharedStore {
  std::unique_ptr<TemporaryDirectory> directory;
  std::filesystem::path store;
  bool python = false;
  bool curl = false;
};

SharedStore& shared() {
  static SharedStore instance;
  static std::once_flag once;
  std::call_once(once, [] {
    instance.directory = std::make_unique<TemporaryDirectory>("airlock-gvisor-images");
    instance.store = instance.directory->path() / "images";
    images::ImageStore store(instance.store,
                             images::OwnershipMap::shifted(GvisorBackendConfig{}.uid_base));
    const char* prepared = std::getenv("AIRLOCK_TEST_IMAGES");
    const std::filesystem::path images = prepared != nullptr ? prepared : "";
    std::error_code error;
    if (!images.empty() && std::filesystem::exists(images / "busybox.tar", error)) {
      store.import_tar(images / "busybox.tar", "busybox");
    } else {
      const auto source = instance.directory->path() / "busybox-source";
      make_busybox_rootfs(source);
      store.import_directory(source, "busybox");
      std::filesystem::remove_all(source, error);
    }
    if (!images.empty() && std::filesystem::exists(images / "python.tar", error)) {
      store.import_tar(images / "python.tar", "python");
      instance.python = true;
    }
    const auto curl_source = instance.directory->path() / "curl-source";
    if (make_curl_rootfs(curl_source)) {
      store.import_directory(curl_source, "curl");
      instance.curl = true;
    }
    std::filesystem::remove_all(curl_source, error);
  });
  return instance;
}

}  // namespace

void make_busybox_rootfs(const std::filesystem::path& root) {
  for (const char* directory : {"bin", "etc", "proc", "sys", "dev", "tmp", "root", "usr"}) {
    std::filesystem::create_directories(root / directory);
  }
  std::filesystem::copy_file("/bin/busybox", root / "bin" / "busybox");
  std::filesystem::create_symlink("../bin", root / "usr" / "bin");
  int output[2];
  if (::pipe(output) != 0) throw std::runtime_error("pipe");
  const pid_t child = ::fork();
  if (child == 0) {
    ::dup2(output[1], 1);
    ::execl("/bin/busybox", "busybox", "--list", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(output[1]);
  std::string applets;
  char chunk[4096];
  ssize_t got;
  while ((got = ::read(output[0], chunk, sizeof chunk)) > 0) {
    applets.append(chunk, static_cast<std::size_t>(got));
  }
  ::close(output[0]);
  ::waitpid(child, nullptr, 0);
  std::istringstream names(applets);
  std::string name;
  while (names >> name) {
    if (name == "busybox") continue;  // a link named busybox would replace the binary
    std::error_code ignored;
    std::filesystem::create_symlink("busybox", root / "bin" / name, ignored);
  }
  std::ofstream(root / "etc" / "passwd") << "root:x:0:0:root:/root:/bin/sh\n";
  std::ofstream(root / "etc" / "group") << "root:x:0:\n";
  std::filesystem::permissions(root / "tmp", std::filesystem::perms(01777));
}

int as_unprivileged_user(const std::function<int()>& body) {
  const pid_t child = ::fork();
  if (child == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
        ::setresuid(65534, 65534, 65534) != 0) {
      ::_exit(255);
    }
    ::_exit(body());
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 255;
}

std::optional<std::string> gvisor_unavailable() {
  if (::geteuid() != 0) {
    return std::string(
        "the gvisor backend's tests need root (runsc creates namespaces and "
        "cgroups; CI runs as root)");
  }
  if (!runsc_binary()) {
    return std::string("runsc is not installed (scripts/bootstrap --test installs it)");
  }
  if (!executable("/bin/busybox")) {
    return std::string("busybox-static is not installed (scripts/bootstrap --test installs it)");
  }
  return std::nullopt;
}

TemporaryDirectory::TemporaryDirectory(const std::string& prefix) {
  std::string pattern = "/tmp/" + prefix + "-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp " + pattern);
  path_ = pattern;
  // runsc's Gofer runs unprivileged and must pass through to the state it binds.
  ::chmod(path_.c_str(), 0711);
}

TemporaryDirectory::~TemporaryDirectory() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

const std::filesystem::path& shared_image_store() {
  return shared().store;
}
bool curl_image_available() {
  return shared().curl;
}

bool python_image_available() {
  return shared().python;
}

std::vector<long> processes_mentioning(const std::string& needle) {
  std::vector<long> found;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmdline(entry.path() / "cmdline", std::ios::binary);
    std::string text;
    for (std::string argument; std::getline(cmdline, argument, '\0');) text += argument + ' ';
    if (text.find(needle) != std::string::npos && std::stol(name) != ::getpid()) {
      found.push_back(std::stol(name));
    }
  }
  return found;
}

void GvisorBackendTest::SetUp() {
  if (gvisor_unavailable()) return;
  state_ = std::make_unique<TemporaryDirectory>("airlock-gvisor-state");
  key_ = SandboxKey{"gvisor-test",
                    std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()),
                    "/agents/test"};
  backend_ = make_backend();
  ready_ = true;
}

void GvisorBackendTest::TearDown() {
  if (!ready_) return;
  backend_->purge_all();
  const auto left = processes_mentioning(state_->path().string());
  EXPECT_TRUE(left.empty()) << left.size() << " runsc process(es) of this test left running";
  std::error_code error;
  std::size_t sandboxes = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(state_->path() / "gvisor" / "sandboxes", error)) {
    (void)entry;
    ++sandboxes;
  }
  EXPECT_EQ(sandboxes, 0u) << "sandbox state left behind";
  for (const auto& cgroup : cgroups_of_this_state()) {
    ADD_FAILURE() << "cgroup left behind: " << cgroup;
  }
  backend_.reset();
  state_.reset();
}

std::vector<std::filesystem::path> GvisorBackendTest::cgroups_of_this_state() const {
  const std::string prefix =
      "airlock-" + sha256_hex((state_->path() / "gvisor").string()).substr(0, 8) + "-";
  std::vector<std::filesystem::path> found;
  std::error_code error;
  for (const auto& hierarchy : std::filesystem::directory_iterator("/sys/fs/cgroup", error)) {
    for (const auto& cgroup :
         std::filesystem::directory_iterator(hierarchy.path() / "airlock-gvisor", error)) {
      if (cgroup.is_directory() && cgroup.path().filename().string().rfind(prefix, 0) == 0) {
        found.push_back(cgroup.path());
      }
    }
  }
  return found;
}

GvisorBackendConfig GvisorBackendTest::config() const {
  GvisorBackendConfig config;
  config.state_dir = state_->path();
  config.image_store = shared_image_store();
  return config;
}

std::shared_ptr<SandboxBackend> GvisorBackendTest::make_backend(
    const std::function<void(GvisorBackendConfig&)>& adjust) {
  GvisorBackendConfig adjusted = config();
  if (adjust) adjust(adjusted);
  return make_gvisor_backend(adjusted);
}

std::shared_ptr<Sandbox> GvisorBackendTest::acquire(const SandboxSpec& spec,
                                                    std::optional<SandboxKey> key) {
  return backend_->acquire(key.value_or(key_), spec);
}

SandboxSpec GvisorBackendTest::spec(const std::string& kind,
                                    const std::function<void(SandboxSpec::Fields&)>& adjust) {
  SandboxSpec::Fields fields;
  fields.kind = kind;
  fields.image = "busybox";
  if (adjust) adjust(fields);
  return SandboxSpec(fields);
}

ExecResult GvisorBackendTest::sh(Sandbox& sandbox, const std::string& line,
                                 std::chrono::milliseconds timeout) {
  ExecOptions options;
  options.working_directory = kWork;
  options.timeout = timeout;
  return sandbox.exec(Command::argv({"sh", "-c", line}), options);
}

}  // namespace airlock::gvisor_backend::testing
