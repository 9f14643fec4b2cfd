// The microvm backend, attacked through real VMs (TCG on this machine kind): what a closed guest
// has of a network, what the jail leaves QEMU, what a restored snapshot shares with its
// siblings, what a wedged guest kernel costs its host, and what a SIGKILLed owner leaves behind.
// The tests share one state directory (and so one snapshot template); each ends with no
// sandbox of its own left.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "airlock/backends/microvm.hpp"
#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "airlock/images.hpp"
#include "airlock/sandbox.hpp"

namespace airlock {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::optional<std::string> unavailable() {
  if (::geteuid() != 0) return "the microvm backend needs root";
  for (const char* tool : {"/usr/bin/qemu-system-x86_64", "/usr/bin/qemu-img", "/bin/busybox"}) {
    if (::access(tool, X_OK) != 0) return std::string(tool) + " is missing";
  }
  return std::nullopt;
}

// The shared state directory, once made.
fs::path& made_root() {
  static fs::path root;
  return root;
}

struct Shared {
  fs::path root;
  fs::path state;
  fs::path store;
};

Shared& shared() {
  static Shared instance = [] {
    Shared made;
    char pattern[] = "/tmp/airlock-microvm-test-XXXXXX";
    made.root = ::mkdtemp(pattern);
    made.state = made.root / "state";
    made.store = made.root / "images";
    const fs::path source = made.root / "busybox";
    for (const char* directory : {"bin", "etc", "proc", "sys", "dev", "tmp", "root"}) {
      fs::create_directories(source / directory);
    }
    fs::copy_file("/bin/busybox", source / "bin" / "busybox");
    // Relative links: `busybox --install -s` would point them at this host's copy.
    const std::string install = "cd " + (source / "bin").string() +
                                " && for applet in $(./busybox --list); do"
                                " [ -e \"$applet\" ] || ln -s busybox \"$applet\"; done";
    if (std::system(install.c_str()) != 0) throw std::runtime_error("busybox applet links");
    images::ImageStore store(made.store, images::OwnershipMap::shifted());
    store.import_directory(source, "busybox");
    fs::remove_all(source);
    made_root() = made.root;
    return made;
  }();
  return instance;
}

// The shared state directory goes when the run ends (an atexit handler registered while the
// static above is made would run after its destructor, and remove nothing).
class RemoveShared : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code error;
    if (!made_root().empty()) fs::remove_all(made_root(), error);
  }
};
const auto* const kRemoveShared = ::testing::AddGlobalTestEnvironment(new RemoveShared);

class Microvm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const auto why = unavailable()) GTEST_SKIP() << "SKIPPED: " << *why;
    backend_ = make(config());
  }
  void TearDown() override {
    if (backend_) {
      backend_->purge_all();
      EXPECT_TRUE(backend_->list_sandboxes().empty());
      backend_.reset();
    }
    // Nothing of a VM may outlive its test.
    EXPECT_EQ(qemu_processes(), 0) << "QEMU processes left running";
  }

  static MicrovmBackendConfig config() {
    MicrovmBackendConfig made;
    made.state_dir = shared().state;
    made.image_store = shared().store;
    made.accel = MicrovmAccel::tcg;
    return made;
  }
  static std::shared_ptr<SandboxBackend> make(MicrovmBackendConfig made) {
    return make_microvm_backend(std::move(made));
  }
  static SandboxSpec spec(const std::string& kind = "test") {
    SandboxSpec::Fields fields;
    fields.kind = kind;
    fields.work_dir = "/maf-sandbox/work";
    return SandboxSpec(std::move(fields));
  }
  static SandboxKey key(const std::string& thread) { return SandboxKey{"microvm-test", thread, "/"}; }
  static ExecResult sh(Sandbox& sandbox, const std::string& line,
                       std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    ExecOptions options;
    options.timeout = timeout;
    return sandbox.exec(Command::argv({"sh", "-c", line}), options);
  }
  static int qemu_processes() {
    int count = 0;
    std::error_code error;
    for (const auto& entry : fs::directory_iterator("/proc", error)) {
      const std::string comm = read_file(entry.path() / "comm");
      if (comm.rfind("qemu-system-x86", 0) == 0) ++count;
    }
    return count;
  }
  // The pids of QEMU processes, as the host sees them.
  static std::vector<pid_t> qemu_pids() {
    std::vector<pid_t> pids;
    std::error_code error;
    for (const auto& entry : fs::directory_iterator("/proc", error)) {
      const std::string name = entry.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      if (read_file(entry.path() / "comm").rfind("qemu-system-x86", 0) == 0) {
        pids.push_back(std::stoi(name));
      }
    }
    return pids;
  }
  static std::string status_field(pid_t pid, const std::string& field) {
    std::istringstream lines(read_file("/proc/" + std::to_string(pid) + "/status"));
    std::string line;
    while (std::getline(lines, line)) {
      if (line.rfind(field + ":", 0) == 0) {
        const auto value = line.find_first_not_of(" \t", field.size() + 1);
        return value == std::string::npos ? std::string() : line.substr(value);
      }
    }
    return {};
  }

  std::shared_ptr<SandboxBackend> backend_;
};

TEST_F(Microvm, UnderTcgItDeclaresHardenedContainerAndSaysWhy) {
  EXPECT_EQ(backend_->isolation(), Isolation::hardened_container);
  const auto residuals = backend_->stated_residuals();
  ASSERT_FALSE(residuals.empty());
  EXPECT_NE(residuals.front().find("TCG"), std::string::npos) << residuals.front();
}

TEST_F(Microvm, AClosedGuestHasNoNetworkDeviceButLoopback) {
  auto sandbox = backend_->acquire(key("net"), spec());
  const auto interfaces = sh(*sandbox, "ls /sys/class/net");
  EXPECT_EQ(interfaces.exit_code, 0) << interfaces.stderr_text();
  EXPECT_EQ(interfaces.stdout_text(), "lo\n");
  // No route anywhere: a connect to a host address fails at once.
  const auto reach = sh(*sandbox, "nc -w 2 10.0.2.2 80 </dev/null && echo reached || echo no");
  EXPECT_EQ(reach.stdout_text(), "no\n");
  // And the guest's own kernel, not the host's.
  const auto kernel = sh(*sandbox, "uname -r");
  EXPECT_NE(kernel.stdout_text().find("cloud-amd64"), std::string::npos) << kernel.stdout_text();
}

TEST_F(Microvm, TheJailHoldsQemuWithoutCapabilitiesUnderItsSeccompSeeingNoHostPath) {
  auto sandbox = backend_->acquire(key("jail"), spec());
  ASSERT_EQ(sh(*sandbox, "true").exit_code, 0);
  const auto pids = qemu_pids();
  ASSERT_EQ(pids.size(), 1u);
  const pid_t qemu = pids.front();
  for (const char* field : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}) {
    EXPECT_EQ(status_field(qemu, field), "0000000000000000") << field;
  }
  EXPECT_EQ(status_field(qemu, "NoNewPrivs"), "1");
  // What QEMU prints goes into a pipe whose writing end never blocks: a guest that makes its
  // device models complain without end fills no host file and stalls no VM.
  for (const char* fd : {"1", "2"}) {
    const fs::path link = "/proc/" + std::to_string(qemu) + "/fd/" + fd;
    EXPECT_EQ(fs::read_symlink(link).string().rfind("pipe:", 0), 0u) << fd << " is not a pipe";
    std::istringstream info(read_file("/proc/" + std::to_string(qemu) + "/fdinfo/" + fd));
    std::string line;
    unsigned long flags = 0;
    while (std::getline(info, line)) {
      if (line.rfind("flags:", 0) == 0) flags = std::stoul(line.substr(6), nullptr, 8);
    }
    EXPECT_NE(flags & O_NONBLOCK, 0u) << "QEMU's descriptor " << fd << " blocks";
  }
  EXPECT_EQ(status_field(qemu, "Seccomp"), "2");  // QEMU's own filter (-sandbox on)
  EXPECT_EQ(status_field(qemu, "Uid").substr(0, 10), "1999999999");
  // Its root is the jail's: none of the host's own directories are there, and outside the
  // system's read-only /usr every file it can see is one the VM runs on.
  const fs::path root = "/proc/" + std::to_string(qemu) + "/root";
  for (const char* host_only : {"root", "home", "etc", "sys", "run", "var", "tmp/.X11-unix"}) {
    EXPECT_FALSE(fs::exists(root / host_only)) << host_only << " is visible to QEMU";
  }
  EXPECT_FALSE(fs::exists(root / shared().store.relative_path())) << "the image store is visible";
  std::vector<std::string> unexpected;
  std::size_t seen = 0;
  std::error_code error;
  for (auto entry = fs::recursive_directory_iterator(root, error);
       entry != fs::recursive_directory_iterator(); entry.increment(error)) {
    const fs::path inside = "/" / entry->path().lexically_relative(root);
    const std::string top = *std::next(inside.begin());
    if (top == "usr" || top == "proc" || top == "dev") {
      entry.disable_recursion_pending();
      continue;
    }
    if (!entry->is_regular_file(error)) continue;
    ++seen;
    const std::string name = inside.filename().string();
    // The kernel, the initramfs, the image's disk, the template's disk layer and its own.
    const bool needed = name == "vmlinux" || name == "initramfs.cpio" || name == "root.raw" ||
                        name == "disk.qcow2";
    if (!needed) unexpected.push_back(inside.string());
  }
  EXPECT_GE(seen, 3u) << "the walk saw nothing: it proves nothing";
  EXPECT_TRUE(unexpected.empty()) << "QEMU sees " << unexpected.front();
  // Its own namespaces: nothing of the host's network, processes or mounts.
  for (const char* space : {"net", "pid", "mnt", "ipc", "uts", "cgroup"}) {
    const auto ours = fs::read_symlink(fs::path("/proc/self/ns") / space);
    const auto its = fs::read_symlink("/proc/" + std::to_string(qemu) + "/ns/" + space);
    EXPECT_NE(ours, its) << space;
  }
}

TEST_F(Microvm, RestoredSiblingsDrawDifferentRandomBytesAndKnowTheTime) {
  auto first = backend_->acquire(key("rng-a"), spec());
  auto second = backend_->acquire(key("rng-b"), spec());
  const std::string draw = "head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'";
  const auto a = sh(*first, draw);
  const auto b = sh(*second, draw);
  ASSERT_EQ(a.stdout_text().size(), 64u) << a.stderr_text();
  ASSERT_EQ(b.stdout_text().size(), 64u) << b.stderr_text();
  EXPECT_NE(a.stdout_text(), b.stdout_text());
  // The clock is the host's, not the snapshot's.
  const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  const long guest = std::stol(sh(*first, "date +%s").stdout_text());
  EXPECT_LT(std::labs(guest - now), 30);
}

TEST_F(Microvm, TwoSandboxesNeverShareADiskNorTheTemplatesWritableState) {
  auto first = backend_->acquire(key("disk-a"), spec());
  auto second = backend_->acquire(key("disk-b"), spec());
  const fs::path templates = shared().state / "microvm" / "templates";
  std::map<fs::path, std::string> before;
  for (const auto& entry : fs::recursive_directory_iterator(templates)) {
    if (entry.is_regular_file()) before[entry.path()] = read_file(entry.path()).substr(0, 1 << 20);
  }
  ASSERT_EQ(sh(*first, "echo one > /root/mine && sync").exit_code, 0);
  first->write_file("/tmp/planted", "from a", "/");
  EXPECT_EQ(sh(*second, "cat /root/mine 2>&1; ls /tmp").stdout_text().find("one"),
            std::string::npos);
  EXPECT_FALSE(second->stat_file("/tmp/planted", "/"));
  EXPECT_EQ(first->read_file("/tmp/planted", "/", 1024), "from a");
  // The template's files are read-only to every VM: unchanged byte for byte.
  for (const auto& [path, head] : before) {
    EXPECT_EQ(read_file(path).substr(0, 1 << 20), head) << path;
    struct stat info {};
    ASSERT_EQ(::stat(path.c_str(), &info), 0);
    EXPECT_EQ(info.st_uid, 0u) << path;
    EXPECT_EQ(info.st_mode & 0222, 0200u) << path << " is writable by others";
  }
}

TEST_F(Microvm, AGuestThatWedgesItsKernelIsKilledByItsTimeoutAndReclaimed) {
  auto sandbox = backend_->acquire(key("wedge"), spec());
  const auto started = std::chrono::steady_clock::now();
  // A kernel that panics and then waits forever: nothing inside answers again.
  EXPECT_THROW(sh(*sandbox, "echo 0 > /proc/sys/kernel/panic; echo c > /proc/sysrq-trigger",
                  std::chrono::seconds(3)),
               Error);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(30));
  // Its VM is gone already, and the next acquire of the key gets a working one.
  for (int i = 0; i < 100 && qemu_processes() != 0; ++i) ::usleep(50000);
  EXPECT_EQ(qemu_processes(), 0);
  auto again = backend_->acquire(key("wedge"), spec());
  EXPECT_EQ(sh(*again, "echo alive").stdout_text(), "alive\n");
}

TEST_F(Microvm, ASigkilledOwnerLeavesNothingRunningAndTheNextBackendReclaimsIt) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t owner = ::fork();
  if (owner == 0) {
    ::close(ready[0]);
    try {
      auto backend = make(config());
      auto sandbox = backend->acquire(key("orphan"), spec());
      (void)!::write(ready[1], "r", 1);
      ::pause();
    } catch (...) {
    }
    ::_exit(1);
  }
  ::close(ready[1]);
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ::close(ready[0]);
  EXPECT_EQ(qemu_processes(), 1);
  ::kill(owner, SIGKILL);
  ::waitpid(owner, nullptr, 0);
  // The jail's leash ends with its owner, and QEMU with the jail.
  for (int i = 0; i < 100 && qemu_processes() != 0; ++i) ::usleep(50000);
  EXPECT_EQ(qemu_processes(), 0);
  // The record and the cgroup go when the next backend comes up.
  auto next = make(config());
  EXPECT_TRUE(next->list_sandboxes().empty());
  // A sandbox's cgroup is <hierarchy>/airlock-microvm/<12 of the state's hash>-<24 of the id>.
  std::size_t cgroups = 0;
  std::ifstream mounts("/proc/self/mountinfo");
  std::string line;
  while (std::getline(mounts, line)) {
    const auto separator = line.find(" - cgroup");
    if (separator == std::string::npos) continue;
    std::istringstream head(line.substr(0, separator));
    std::string field, mount_point;
    for (int index = 0; index < 5; ++index) head >> (index == 4 ? mount_point : field);
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(mount_point + "/airlock-microvm", error)) {
      if (entry.is_directory() && entry.path().filename().string().size() == 12 + 1 + 24) {
        ++cgroups;
        ADD_FAILURE() << entry.path() << " is left";
      }
    }
  }
  EXPECT_EQ(cgroups, 0u);
}

// Two forks of one snapshot wake from one memory image: each gets the time and fresh
// randomness before anything runs, and what the snapshot holds (the guest's memory, its disk)
// is root's alone on the host.
TEST_F(Microvm, ForksOfASnapshotDrawDifferentBytesAndTheSnapshotIsRootsAlone) {
  const SandboxKey source = key("fork-source");
  auto sandbox = backend_->acquire(source, spec());
  ASSERT_EQ(sh(*sandbox, "echo kept > /root/kept").exit_code, 0);
  const SnapshotRecord saved = sandbox->snapshot();
  EXPECT_EQ(saved.content, SnapshotContent::filesystem_and_memory);
  EXPECT_GT(saved.bytes, std::uint64_t{1} << 20);
  const fs::path directory = shared().state / "microvm" / "snapshots" / saved.id;
  struct stat info {};
  ASSERT_EQ(::stat(directory.c_str(), &info), 0);
  EXPECT_EQ(info.st_uid, 0u);
  EXPECT_EQ(info.st_mode & 0777, 0700u);
  for (const auto& entry : fs::directory_iterator(directory)) {
    ASSERT_EQ(::stat(entry.path().c_str(), &info), 0);
    EXPECT_EQ(info.st_mode & 0077, 0u) << entry.path() << " is open to others";
  }
  // The source runs on after its snapshot.
  EXPECT_EQ(sh(*sandbox, "cat /root/kept").stdout_text(), "kept\n");
  auto left = backend_->acquire_from_snapshot(key("fork-left"), spec(), saved);
  auto right = backend_->acquire_from_snapshot(key("fork-right"), spec(), saved);
  const std::string draw = "head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'";
  const auto a = sh(*left, draw);
  const auto b = sh(*right, draw);
  ASSERT_EQ(a.stdout_text().size(), 64u) << a.stderr_text();
  EXPECT_NE(a.stdout_text(), b.stdout_text());
  EXPECT_EQ(sh(*right, "cat /root/kept").stdout_text(), "kept\n");
  const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  EXPECT_LT(std::labs(std::stol(sh(*left, "date +%s").stdout_text()) - now), 30);
  // Deleting the snapshot leaves its forks whole: each fork's layer holds its own copy of the
  // snapshot's disk, over the template, and names nothing of the snapshot.
  const fs::path layer = shared().state / "microvm" / "sandboxes" /
                         sandbox_identity(key("fork-left"), "test", "closed") / "vm" /
                         "disk.qcow2";
  const std::string chain_command =
      "qemu-img info -U --backing-chain " + layer.string() + " > " +
      (shared().root / "chain.txt").string();
  ASSERT_EQ(std::system(chain_command.c_str()), 0);
  const std::string chain = read_file(shared().root / "chain.txt");
  EXPECT_NE(chain.find("templates/"), std::string::npos) << chain;
  EXPECT_EQ(chain.find("snapshots/"), std::string::npos) << chain;
  EXPECT_TRUE(backend_->delete_snapshot(saved.id));
  EXPECT_FALSE(fs::exists(directory));
  EXPECT_EQ(sh(*left, "echo more > /root/more && sync && cat /root/kept /root/more").stdout_text(),
            "kept\nmore\n");
}

// A local user who can guess where root will keep a state directory plants a link there: root
// must neither follow it nor make anything where it points.
TEST_F(Microvm, ALinkPlantedWhereItsStateGoesIsRefused) {
  const fs::path root = shared().root / "planted";
  const fs::path elsewhere = shared().root / "elsewhere";
  fs::create_directories(root);
  fs::create_directories(elsewhere);
  fs::create_symlink(elsewhere, root / "microvm");
  MicrovmBackendConfig planted = config();
  planted.state_dir = root;
  try {
    make(planted);
    ADD_FAILURE() << "a backend was made through a planted link";
  } catch (const BackendError& refused) {
    EXPECT_NE(std::string(refused.what()).find("refuses its state directory"), std::string::npos)
        << refused.what();
  }
  EXPECT_TRUE(fs::is_empty(elsewhere)) << "something was made where the link points";
  // And a state directory others may write is refused before anything is made in it.
  const fs::path open_to_all = shared().root / "open";
  fs::create_directories(open_to_all);
  ::chmod(open_to_all.c_str(), 0777);
  planted.state_dir = open_to_all;
  EXPECT_THROW(make(planted), InvalidArgument);
  EXPECT_TRUE(fs::is_empty(open_to_all));
}

TEST_F(Microvm, KvmAskedForAndUnusableIsRefusedNotDowngraded) {
  if (::access("/dev/kvm", R_OK | W_OK) != 0) {
    MicrovmBackendConfig asked = config();
    asked.accel = MicrovmAccel::kvm;
    EXPECT_THROW(make(asked), BackendError);
    return;
  }
  MicrovmBackendConfig asked = config();
  asked.accel = MicrovmAccel::kvm;
  asked.kvm_probe_timeout = std::chrono::seconds(15);
  try {
    auto backend = make(asked);
    // Only a KVM that really booted the guest may declare the microvm rung.
    EXPECT_EQ(backend->isolation(), Isolation::microvm);
  } catch (const BackendError& refused) {
    EXPECT_NE(std::string(refused.what()).find("KVM"), std::string::npos) << refused.what();
  }
}

}  // namespace
}  // namespace airlock
