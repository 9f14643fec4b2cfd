// Where a gvisor guest can write, and what of the host it can reach through the filesystem,
// attacked: the storage bound (resources.disk_bytes) shared by the root, the work dir, /tmp and
// /dev/shm; the host directories bound into the guest; the places an unprivileged host user
// could plant something a guest would see; links planted in the state directory; and a state
// directory and image store deep enough that no socket path beneath them fits in sun_path.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "airlock/errors.hpp"
#include "airlock/images.hpp"
#include "airlock/json.hpp"
#include "gvisor/fixture.hpp"

namespace airlock::gvisor_backend::testing {
namespace {

using Storage = GvisorBackendTest;

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

std::uint64_t free_bytes(const std::filesystem::path& path) {
  struct statvfs info {};
  if (::statvfs(path.c_str(), &info) != 0) return 0;
  return static_cast<std::uint64_t>(info.f_bavail) * info.f_frsize;
}

std::string host_mount_table() {
  std::ifstream in("/proc/self/mountinfo");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::filesystem::path busybox_rootfs() {
  images::ImageStore store(shared_image_store(),
                           images::OwnershipMap::shifted(GvisorBackendConfig{}.uid_base));
  return store.find("busybox")->rootfs;
}

TEST_F(Storage, EverythingAGuestWritesSharesOneBoundedStore) {
  AIRLOCK_REQUIRE_GVISOR();
  auto sandbox = acquire(spec("storage", [](SandboxSpec::Fields& fields) {
    fields.resources.disk_bytes = 96 * kMiB;
  }));
  const std::vector<std::filesystem::path> watched = {"/", "/tmp", "/dev/shm", state_->path()};
  std::vector<std::uint64_t> before;
  for (const auto& path : watched) before.push_back(free_bytes(path));

  // 64 MiB into the image's own root, then 64 MiB more into each other writable place: the
  // store holds 96 MiB in all, so the later writes are cut short with ENOSPC. (Large, so that
  // what other tests write meanwhile on a busy host is far below what a leak would cost it.)
  const ExecResult filled = sh(*sandbox,
                               "for f in /root/a " + std::string(kWork) +
                                   "/b /tmp/c /dev/shm/d; do "
                                   "dd if=/dev/zero of=$f bs=1M count=64 2>&1 | grep -i 'no space'; "
                                   "done; du -k -c /root/a " +
                                   kWork + "/b /tmp/c /dev/shm/d | tail -1 | cut -f1",
                               std::chrono::seconds(120));
  ASSERT_EQ(filled.exit_code, 0) << filled.stderr_bytes;
  EXPECT_NE(filled.stdout_bytes.find("No space left"), std::string::npos)
      << "nothing refused the guest: " << filled.stdout_bytes;
  const auto last_line = filled.stdout_bytes.rfind('\n', filled.stdout_bytes.size() - 2);
  const std::uint64_t stored_kib =
      std::stoull(filled.stdout_bytes.substr(last_line == std::string::npos ? 0 : last_line + 1));
  EXPECT_LE(stored_kib, 97 * 1024) << "the guest stored more than its 96 MiB";
  EXPECT_GE(stored_kib, 90 * 1024) << "the store did not hold what it promised";

  // The host lost nothing of it: no filesystem under its state shrank, and its mount table
  // never held the store (it lives in the shepherd's mount namespace).
  for (std::size_t i = 0; i < watched.size(); ++i) {
    const std::uint64_t after = free_bytes(watched[i]);
    EXPECT_LT(before[i] > after ? before[i] - after : 0, 48 * kMiB)
        << watched[i] << " lost what the guest wrote";
  }
  EXPECT_EQ(host_mount_table().find("airlock-storage"), std::string::npos);

  // Freed space is the guest's again. The Sentry hands freed pages back to its store
  // asynchronously, so the write is retried for a while before it counts as refused.
  const ExecResult refilled =
      sh(*sandbox,
         "rm /root/a /tmp/c && for try in $(seq 1 40); do "
         "if err=$(dd if=/dev/zero of=/tmp/e bs=1M count=48 2>&1); then echo stored; break; fi; "
         "rm -f /tmp/e; sleep 0.25; done; echo \"$err\" >&2",
         std::chrono::seconds(60));
  EXPECT_EQ(refilled.stdout_bytes, "stored\n") << refilled.stderr_bytes;
}

TEST_F(Storage, ProgramsWrittenIntoTheStoreRun) {
  AIRLOCK_REQUIRE_GVISOR();
  auto sandbox = acquire(spec());
  // Copied by the guest into the root, /tmp and the work dir, and one the host writes.
  const ExecResult copied =
      sh(*sandbox, "for d in /root /tmp .; do cp /bin/busybox $d/ && $d/busybox echo ran-$d; done");
  EXPECT_EQ(copied.stdout_bytes, "ran-/root\nran-/tmp\nran-.\n") << copied.stderr_bytes;
  sandbox->write_file("script.sh", "#!/bin/sh\necho script-ran\n", kWork);
  EXPECT_EQ(sh(*sandbox, "chmod 755 script.sh && ./script.sh").stdout_bytes, "script-ran\n");
}

TEST_F(Storage, DiskBytesBelowOneMiBIsRefusedAndTheConfigNamesTheBound) {
  AIRLOCK_REQUIRE_GVISOR();
  EXPECT_THROW(acquire(spec("tiny", [](SandboxSpec::Fields& fields) {
                 fields.resources.disk_bytes = 4096;
               })),
               InvalidArgument);
  const auto parsed = parse_gvisor_backend_config(
      json::parse_text(R"({"disk_bytes": 67108864})", "test"), "gvisor");
  EXPECT_EQ(parsed.default_resources.disk_bytes, std::optional<std::uint64_t>(64 * kMiB));
  EXPECT_EQ(GvisorBackendConfig{}.default_resources.disk_bytes,
            std::optional<std::uint64_t>(1024 * kMiB));
  // The old setting that let the guest's writes land on the state directory's disk is gone.
  try {
    (void)parse_gvisor_backend_config(json::parse_text(R"({"overlay_medium": "dir"})", "test"),
                                      "gvisor");
    ADD_FAILURE() << "overlay_medium was accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("overlay_medium"), std::string::npos);
  }
}

TEST_F(Storage, HostDirectoriesBoundIntoTheGuestAreReadOnlyAndNameNoHostPath) {
  AIRLOCK_REQUIRE_GVISOR();
  auto sandbox = acquire(spec());
  EXPECT_EQ(sh(*sandbox, "ls -A /.airlock").stdout_bytes, "airlock-gvisor-guest\n");
  EXPECT_NE(sh(*sandbox, "touch /.airlock/planted").exit_code, 0);
  EXPECT_NE(sh(*sandbox, "rm /.airlock/airlock-gvisor-guest").exit_code, 0);
  // Every sandbox has its egress directory (so that a snapshot may be resumed under another
  // posture): under `closed` it is empty, and the guest cannot plant anything in it.
  EXPECT_EQ(sh(*sandbox, "ls -A /.airlock-egress").stdout_bytes, "");
  EXPECT_NE(sh(*sandbox, "touch /.airlock-egress/planted").exit_code, 0);
  const std::string mounts = sh(*sandbox, "cat /proc/self/mountinfo").stdout_bytes;
  ASSERT_NE(mounts.find(" /tmp "), std::string::npos) << mounts;
  for (const auto& host : {state_->path().string(), shared_image_store().string(),
                           std::string("/tmp/airlock-gvisor")}) {
    EXPECT_EQ(mounts.find(host), std::string::npos) << "the guest's mount table names " << host;
  }
}

// The image store keeps the images' own modes: a 1777 /tmp in the rootfs is world-writable on
// the host. Were its content reachable, any local user could plant a file — or a listening
// socket an allowlisted guest (runsc --host-uds=open) could connect to — in every sandbox of
// that image. The same for the empty lower layer of every sandbox's /tmp and /dev/shm.
TEST_F(Storage, NoHostUserCanPlantAnythingAGuestWouldSee) {
  AIRLOCK_REQUIRE_GVISOR();
  auto sandbox = acquire(spec());
  const auto image_tmp = busybox_rootfs() / "tmp";
  struct stat premise {};
  ASSERT_EQ(::stat(image_tmp.c_str(), &premise), 0);
  ASSERT_EQ(premise.st_mode & 07777, 01777u) << "the premise: the image's /tmp is world-writable";
  const auto empty = state_->path() / "gvisor" / "shared" / "empty";
  for (const auto& target : {image_tmp, empty}) {
    const int code = as_unprivileged_user([&target] {
      const std::string file = (target / "planted").string();
      const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd >= 0) return 1;
      const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
      const int dir = ::open(target.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (dir >= 0) {
        sockaddr_un address{};
        address.sun_family = AF_UNIX;
        std::snprintf(address.sun_path, sizeof address.sun_path, "/proc/self/fd/%d/planted.sock",
                      dir);
        if (::bind(sock, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) return 2;
        return 3;
      }
      return errno == EACCES ? 0 : 4;
    });
    EXPECT_EQ(code, 0) << "an unprivileged host user reached " << target << " (1: made a file, "
                       << "2: bound a socket, 3: opened it, 4: unexpected error)";
  }
  // The guest's writes into /tmp and /dev/shm never land in the shared lower layer either.
  ASSERT_EQ(sh(*sandbox, "echo a > /tmp/a && echo b > /dev/shm/b && ls -A /tmp /dev/shm").exit_code,
            0);
  EXPECT_TRUE(std::filesystem::is_empty(empty)) << "a guest's write reached the host directory";
  EXPECT_TRUE(std::filesystem::is_empty(image_tmp));
}

// root never follows a link it did not make where it keeps state: a link in place of the
// backend's own directory, or of one beneath it, is refused before anything is made through it.
TEST_F(Storage, LinksPlantedInTheStateDirectoryAreRefused) {
  AIRLOCK_REQUIRE_GVISOR();
  for (const char* planted : {"gvisor", "gvisor/sandboxes", "gvisor/shared", "gvisor/egress"}) {
    TemporaryDirectory state("airlock-gvisor-links");
    TemporaryDirectory elsewhere("airlock-gvisor-target");
    const auto link = state.path() / planted;
    std::filesystem::create_directories(link.parent_path());
    ::chmod(link.parent_path().c_str(), 0711);
    std::filesystem::create_directory_symlink(elsewhere.path(), link);
    try {
      make_backend([&state](GvisorBackendConfig& config) { config.state_dir = state.path(); });
      ADD_FAILURE() << "a link at " << planted << " was followed";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).size(), 0u);
    }
    EXPECT_TRUE(std::filesystem::is_empty(elsewhere.path()))
        << "something was made through the link at " << planted;
  }
}

// sun_path holds 108 bytes: runsc's control socket, the egress socket and the image store's
// paths all lie beneath directories far longer than that here.
TEST_F(Storage, ADeepStateDirectoryAndImageStoreWork) {
  AIRLOCK_REQUIRE_GVISOR();
  TemporaryDirectory top("airlock-gvisor-deep");
  std::filesystem::path deep = top.path();
  for (int level = 0; level < 3; ++level) {
    deep /= std::string(60, static_cast<char>('a' + level));
    std::filesystem::create_directory(deep);
    ::chmod(deep.c_str(), 0711);
  }
  {
    images::ImageStore store(deep / "images",
                             images::OwnershipMap::shifted(GvisorBackendConfig{}.uid_base));
    const auto source = top.path() / "busybox-source";
    make_busybox_rootfs(source);
    store.import_directory(source, "busybox");
    std::filesystem::remove_all(source);
  }
  backend_->purge_all();
  backend_ = make_backend([&deep](GvisorBackendConfig& config) {
    config.state_dir = deep / "state";
    config.image_store = deep / "images";
  });
  auto sandbox = acquire(spec());
  EXPECT_EQ(sh(*sandbox, "echo deep").stdout_bytes, "deep\n");
  sandbox->write_file("note", "kept", kWork);
  EXPECT_EQ(sandbox->read_file("note", kWork, 1024), "kept");
  // Another backend object (another process) adopts it through runsc's control socket.
  auto other = make_backend([&deep](GvisorBackendConfig& config) {
    config.state_dir = deep / "state";
    config.image_store = deep / "images";
  });
  EXPECT_EQ(other->acquire(key_, spec())->instance_id(), sandbox->instance_id());
  EXPECT_EQ(other->purge_all(), 1);
  EXPECT_TRUE(processes_mentioning((deep / "state").string()).empty());
}

}  // namespace
}  // namespace airlock::gvisor_backend::testing
