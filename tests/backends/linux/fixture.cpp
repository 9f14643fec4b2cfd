#include "linux/fixture.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <sstream>

#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "backends/linux/state_store.hpp"
#include "backends/linux/tree_removal.hpp"

#ifndef AIRLOCK_TESTCASE_DIR
#error "AIRLOCK_TESTCASE_DIR must name the directory of the built guest programs"
#endif

namespace airlock::linux_backend::testing {
std::string read_text(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

namespace {

std::string random_suffix() {
  static std::mt19937_64 generator{std::random_device{}()};
  return std::to_string(generator());
}

}  // namespace

TemporaryDirectory::TemporaryDirectory(const std::string& prefix) {
  std::string pattern = "/tmp/" + prefix + "-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

VisibleHostDirectory::VisibleHostDirectory(const std::string& prefix) {
  const std::string parent = std::filesystem::is_directory("/opt") ? "/opt" : "/etc";
  std::string pattern = parent + "/" + prefix + "-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  ::chmod(pattern.c_str(), 0755);
  path_ = pattern;
}

VisibleHostDirectory::~VisibleHostDirectory() {
  const int parent = ::open(path_.parent_path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (parent >= 0) {
    (void)remove_tree(parent, path_.filename().string());
    ::close(parent);
  }
}

TemporaryDirectory::~TemporaryDirectory() {
  const int parent = ::open(path_.parent_path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (parent >= 0) {
    (void)remove_tree(parent, path_.filename().string());
    ::close(parent);
  }
}

std::size_t open_descriptor_count() {
  std::size_t count = 0;
  DIR* listing = ::opendir("/proc/self/fd");
  if (listing == nullptr) return 0;
  while (struct dirent* entry = ::readdir(listing)) {
    if (entry->d_name[0] != '.') ++count;
  }
  ::closedir(listing);
  return count - 1;  // the listing's own descriptor
}

bool process_alive(long pid, std::uint64_t start_time) {
  const auto start = process_start_time(pid);
  return start && *start == start_time;
}

LeakAudit::LeakAudit() : descriptors_(open_descriptor_count()) {}

void LeakAudit::track(const RecordFile& record) {
  for (const auto& known : tracked_) {
    if (known.instance_id == record.instance_id) return;
  }
  tracked_.push_back(record);
}

void LeakAudit::expect_clean(const std::filesystem::path& state_dir) const {
  for (const auto& record : tracked_) {
    EXPECT_FALSE(process_alive(record.init_pid, record.init_start_time))
        << "the init of " << record.instance_id << " (pid " << record.init_pid
        << ") is still running";
    for (const auto& cgroup : record.cgroups) {
      EXPECT_FALSE(std::filesystem::exists(cgroup)) << "cgroup left behind: " << cgroup;
    }
  }
  const std::string mounts = read_text("/proc/self/mountinfo");
  EXPECT_EQ(mounts.find(state_dir.string()), std::string::npos)
      << "a mount under the state directory is visible on the host";
  std::error_code error;
  const auto linux_dir = state_dir / "linux";
  if (std::filesystem::exists(linux_dir, error)) {
    for (const auto& entry : std::filesystem::directory_iterator(linux_dir, error)) {
      const std::string name = entry.path().filename().string();
      if (name == "locks") continue;
      if (name == "snapshots") {
        // Snapshots go with their conversation or a purge; the directory itself may stay.
        EXPECT_TRUE(std::filesystem::is_empty(entry.path(), error))
            << "a snapshot was left behind in " << entry.path();
        continue;
      }
      if (name == "standby") {
        // Standby records are removed with their standby; the directory itself may stay.
        EXPECT_TRUE(std::filesystem::is_empty(entry.path(), error))
            << "a standby was left behind in " << entry.path();
        continue;
      }
      ADD_FAILURE() << "state left behind: " << entry.path();
    }
  }
  EXPECT_EQ(open_descriptor_count(), descriptors_) << "descriptors leaked";
}

std::optional<std::filesystem::path> make_busybox_rootfs(const std::filesystem::path& where,
                                                         std::uint32_t uid_base) {
  const std::filesystem::path busybox = "/bin/busybox";
  if (!std::filesystem::exists(busybox)) return std::nullopt;
  const std::filesystem::path root = where / "busybox-rootfs";
  for (const char* directory : {"bin", "etc", "proc", "sys", "dev", "tmp", "root", "usr", "run"}) {
    std::filesystem::create_directories(root / directory);
  }
  std::filesystem::copy_file(busybox, root / "bin" / "busybox");
  std::filesystem::create_symlink("../bin", root / "usr" / "bin");
  // The applet list, from busybox itself (it is static and runs anywhere).
  int output[2];
  if (::pipe(output) != 0) return std::nullopt;
  const pid_t child = ::fork();
  if (child == 0) {
    ::dup2(output[1], 1);
    ::execl(busybox.c_str(), "busybox", "--list", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(output[1]);
  std::string applets;
  char chunk[4096];
  ssize_t got;
  while ((got = ::read(output[0], chunk, sizeof chunk)) > 0) applets.append(chunk, got);
  ::close(output[0]);
  ::waitpid(child, nullptr, 0);
  std::istringstream names(applets);
  std::string name;
  while (names >> name) {
    if (name == "busybox") continue;  // linking it would replace the binary with a loop
    std::error_code ignored;
    std::filesystem::create_symlink("busybox", root / "bin" / name, ignored);
  }
  std::ofstream(root / "etc" / "passwd") << "root:x:0:0:root:/root:/bin/sh\n";
  std::ofstream(root / "etc" / "group") << "root:x:0:\n";
  std::filesystem::permissions(root / "tmp", std::filesystem::perms(01777));
  // Owned by the guest's root, as the image store stores images.
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    ::lchown(entry.path().c_str(), uid_base, uid_base);
  }
  ::lchown(root.c_str(), uid_base, uid_base);
  return root;
}

std::string testcase_bytes(const std::string& name) {
  const std::string content = read_text(std::string(AIRLOCK_TESTCASE_DIR) + "/" + name);
  if (content.empty()) throw std::runtime_error("test program not built: " + name);
  return content;
}

void LinuxBackendTest::SetUp() {
  root_ = ::geteuid() == 0;
  if (!root_) {
    GTEST_SKIP() << "SKIPPED: the linux backend's tests need root (user namespaces with a full "
                    "uid range, cgroups, mounts)";
  }
  state_ = std::make_unique<TemporaryDirectory>("airlock-linux-state");
  key_ = SandboxKey{"scope-" + random_suffix(), "thread-1", "agent"};
  backend_ = make_backend();
}

void LinuxBackendTest::TearDown() {
  if (!root_) return;
  // Whatever the test left, purge reclaims; the audit then proves nothing else remains.
  LinuxBackendConfig config;
  config.state_dir = state_->path();
  auto backend = make_linux_backend(config);
  backend->purge_all();
  backend_.reset();
  audit_.expect_clean(state_->path());
}

std::shared_ptr<SandboxBackend> LinuxBackendTest::make_backend(
    const std::function<void(LinuxBackendConfig&)>& adjust) {
  LinuxBackendConfig config;
  config.state_dir = state_->path();
  if (adjust) adjust(config);
  return make_linux_backend(config);
}

std::shared_ptr<LinuxSandbox> LinuxBackendTest::acquire(const SandboxSpec& wanted,
                                                        std::optional<SandboxKey> key,
                                                        SandboxBackend* backend) {
  auto sandbox = std::dynamic_pointer_cast<LinuxSandbox>(
      (backend != nullptr ? backend : backend_.get())->acquire(key ? *key : key_, wanted));
  if (!sandbox) throw std::runtime_error("acquire did not return a linux sandbox");
  audit_.track(sandbox->record());
  return sandbox;
}

SandboxSpec LinuxBackendTest::spec(const std::string& kind,
                                   const std::function<void(SandboxSpec::Fields&)>& adjust) {
  SandboxSpec::Fields fields;
  fields.kind = kind;
  fields.work_dir = kWork;
  if (adjust) adjust(fields);
  return SandboxSpec(std::move(fields));
}

ExecResult LinuxBackendTest::sh(Sandbox& sandbox, const std::string& line,
                                std::chrono::milliseconds timeout) {
  ExecOptions options;
  options.working_directory = kWork;
  options.timeout = timeout;
  return sandbox.exec(Command::shell(line), options);
}

std::string LinuxBackendTest::install_testcase(Sandbox& sandbox, const std::string& name) {
  sandbox.write_file("bin/" + name, testcase_bytes(name), kWork);
  const std::string path = std::string(kWork) + "/bin/" + name;
  const ExecResult made = sh(sandbox, "chmod 0755 " + path);
  if (made.exit_code != 0) throw std::runtime_error("chmod failed: " + made.stderr_bytes);
  return path;
}

}  // namespace airlock::linux_backend::testing
