// Snapshots of the linux backend, attacked: the host copies a hostile guest's storage, so every
// test here plants something the copy could trip on — links to host files and directories,
// hard links, FIFOs, sockets, device nodes, whiteouts, opaque directories, trees too deep or
// too large, a guest writing while it is saved, a stream crafted to climb out of its
// destination — and checks what reached the host, what came back, and what was left.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "airlock/errors.hpp"
#include "airlock/router.hpp"
#include "backends/linux/snapshot_stream.hpp"
#include "backends/linux/snapshots.hpp"
#include "linux/fixture.hpp"

namespace airlock::linux_backend::testing {
namespace {

namespace fs = std::filesystem;
namespace ss = snapshot_stream;

std::string file_text(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary);
  file << text;
}

base::UniqueFd open_dir(const fs::path& path) {
  return base::UniqueFd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
}

// Every entry beneath `root`, as "relative-path type" lines (l: link → target), sorted.
std::set<std::string> listing(const fs::path& root) {
  std::set<std::string> out;
  for (auto it = fs::recursive_directory_iterator(root, fs::directory_options::none);
       it != fs::recursive_directory_iterator(); ++it) {
    const auto status = it->symlink_status();
    std::string line = fs::relative(it->path(), root).string();
    if (fs::is_symlink(status)) {
      line += " -> " + fs::read_symlink(it->path()).string();
    } else if (fs::is_directory(status)) {
      line += "/";
    }
    out.insert(line);
  }
  return out;
}

// A stream of `source` (one section "work"), in a file of `into`.
ss::Outcome capture(const fs::path& source, const fs::path& stream, std::uint64_t max_bytes,
                    ss::IdRange ids = {0, 65536}) {
  base::UniqueFd out(::open(stream.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  base::UniqueFd directory = open_dir(source);
  ss::Writer writer(out.get(), ids, max_bytes);
  ss::Outcome outcome = writer.start();
  if (outcome) outcome = writer.section("work", directory.get());
  if (outcome) outcome = writer.finish();
  return outcome;
}

ss::Outcome restore(const fs::path& stream, const fs::path& destination,
                    ss::IdRange ids = {0, 65536}) {
  base::UniqueFd in(::open(stream.c_str(), O_RDONLY | O_CLOEXEC));
  base::UniqueFd directory = open_dir(destination);
  return ss::restore(in.get(), {{"work", directory.get()}}, ids);
}

// ---- the stream, on host trees made for the attack (root: device nodes, trusted attributes) ----

class SnapshotStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    AIRLOCK_REQUIRE_ROOT();
    scratch_ = std::make_unique<TemporaryDirectory>("airlock-snapshot-stream");
    source_ = scratch_->path() / "source";
    target_ = scratch_->path() / "target";
    stream_ = scratch_->path() / "stream";
    fs::create_directories(source_);
    fs::create_directories(target_);
  }
  std::unique_ptr<TemporaryDirectory> scratch_;
  fs::path source_, target_, stream_;
};

TEST_F(SnapshotStreamTest, HardLinksFifosWhiteoutsAndOpaqueMarksAreKeptSocketsDevicesAndOtherAttributesDropped) {
  write_text(source_ / "first", "one file, two names\n");
  ASSERT_EQ(::link((source_ / "first").c_str(), (source_ / "second").c_str()), 0);
  ASSERT_EQ(::mkfifo((source_ / "fifo").c_str(), 0640), 0);  // nobody writes: must not block
  ASSERT_EQ(::mknod((source_ / "whiteout").c_str(), S_IFCHR | 0, makedev(0, 0)), 0);
  ASSERT_EQ(::mknod((source_ / "null-device").c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
  ASSERT_EQ(::mknod((source_ / "block-device").c_str(), S_IFBLK | 0600, makedev(7, 0)), 0);
  {
    const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, (source_ / "socket").c_str(), sizeof address.sun_path - 1);
    ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    ::close(listener);
  }
  fs::create_directories(source_ / "opaque");
  ASSERT_EQ(::setxattr((source_ / "opaque").c_str(), "trusted.overlay.opaque", "y", 1, 0), 0);
  ASSERT_EQ(::setxattr((source_ / "first").c_str(), "user.note", "kept", 4, 0), 0);
  ASSERT_EQ(::setxattr((source_ / "first").c_str(), "trusted.overlay.origin", "x", 1, 0), 0);
  ASSERT_EQ(::chown((source_ / "first").c_str(), 1000, 1000), 0);
  ASSERT_EQ(::chmod((source_ / "first").c_str(), 0640), 0);
  // A file capability (set after the chown, which would clear it): never carried into another
  // sandbox.
  const unsigned char capability[20] = {0x00, 0x00, 0x00, 0x02};
  ASSERT_EQ(::setxattr((source_ / "first").c_str(), "security.capability", capability,
                       sizeof capability, 0),
            0);

  const auto started = std::chrono::steady_clock::now();
  const ss::Outcome captured = capture(source_, stream_, 1 << 20);
  ASSERT_TRUE(captured) << captured.what << ": " << std::strerror(captured.error);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
  EXPECT_EQ(captured.counts.files, 1u);
  EXPECT_EQ(captured.counts.hard_links, 1u);
  EXPECT_EQ(captured.counts.fifos, 1u);
  EXPECT_EQ(captured.counts.whiteouts, 1u);
  EXPECT_EQ(captured.counts.dropped_sockets, 1u);
  EXPECT_EQ(captured.counts.dropped_devices, 2u);
  EXPECT_EQ(captured.counts.dropped_xattrs, 2u);  // the origin and the capability

  const ss::Outcome restored = restore(stream_, target_, {5000, 65536});
  ASSERT_TRUE(restored) << restored.what << ": " << std::strerror(restored.error);
  struct stat first {}, second {}, fifo {}, whiteout {};
  ASSERT_EQ(::lstat((target_ / "first").c_str(), &first), 0);
  ASSERT_EQ(::lstat((target_ / "second").c_str(), &second), 0);
  EXPECT_EQ(first.st_ino, second.st_ino) << "the hard link became two files";
  EXPECT_EQ(first.st_nlink, 2u);
  EXPECT_EQ(first.st_uid, 6000u) << "guest uid 1000 is the new range's 1000";
  EXPECT_EQ(first.st_mode & 07777, 0640u);
  EXPECT_EQ(file_text(target_ / "second"), "one file, two names\n");
  ASSERT_EQ(::lstat((target_ / "fifo").c_str(), &fifo), 0);
  EXPECT_TRUE(S_ISFIFO(fifo.st_mode));
  ASSERT_EQ(::lstat((target_ / "whiteout").c_str(), &whiteout), 0);
  EXPECT_TRUE(S_ISCHR(whiteout.st_mode) && whiteout.st_rdev == 0) << "the whiteout is gone";
  EXPECT_FALSE(fs::exists(fs::symlink_status(target_ / "socket")));
  EXPECT_FALSE(fs::exists(fs::symlink_status(target_ / "null-device")));
  EXPECT_FALSE(fs::exists(fs::symlink_status(target_ / "block-device")));
  char value[16] = {};
  EXPECT_EQ(::getxattr((target_ / "opaque").c_str(), "trusted.overlay.opaque", value, sizeof value),
            1);
  EXPECT_EQ(::getxattr((target_ / "first").c_str(), "user.note", value, sizeof value), 4);
  EXPECT_LT(::getxattr((target_ / "first").c_str(), "security.capability", value, sizeof value), 0);
  EXPECT_LT(::getxattr((target_ / "first").c_str(), "trusted.overlay.origin", value, sizeof value),
            0);
}

TEST_F(SnapshotStreamTest, TheCaptureNeverFollowsALinkAndReadsNoFileOutsideTheTree) {
  TemporaryDirectory host("airlock-snapshot-canary");
  const std::string secret = "canary-" + std::to_string(::getpid()) + "-must-never-be-copied";
  write_text(host.path() / "secret.txt", secret);
  fs::create_directories(host.path() / "dir");
  write_text(host.path() / "dir" / "inner.txt", secret);
  const auto before = listing(host.path());
  fs::create_symlink("/etc/shadow", source_ / "shadow");
  fs::create_symlink(host.path() / "secret.txt", source_ / "secret");
  fs::create_symlink(host.path() / "dir", source_ / "dir-outside");
  fs::create_symlink("../../../../../../etc", source_ / "climb");
  fs::create_directories(source_ / "real");
  fs::create_symlink("../secret", source_ / "real" / "chain");

  ASSERT_TRUE(capture(source_, stream_, 1 << 20));
  const std::string bytes = file_text(stream_);
  EXPECT_EQ(bytes.find(secret), std::string::npos) << "a linked host file was read";
  const std::string shadow = file_text("/etc/shadow");
  ASSERT_FALSE(shadow.empty());
  EXPECT_EQ(bytes.find(shadow.substr(0, shadow.find('\n'))), std::string::npos)
      << "/etc/shadow was read through a link";
  ASSERT_TRUE(restore(stream_, target_));
  EXPECT_EQ(fs::read_symlink(target_ / "shadow"), "/etc/shadow");
  EXPECT_EQ(fs::read_symlink(target_ / "dir-outside"), host.path() / "dir");
  EXPECT_EQ(fs::read_symlink(target_ / "climb"), "../../../../../../etc");
  EXPECT_EQ(fs::read_symlink(target_ / "real" / "chain"), "../secret");
  EXPECT_EQ(listing(host.path()), before) << "the restore wrote through a link";
  EXPECT_EQ(file_text(host.path() / "secret.txt"), secret);
}

// A stream is only ever one this backend wrote, but the restore trusts it no more than the
// guest whose names it carries: each of these is refused and nothing lands outside.
TEST_F(SnapshotStreamTest, TheRestoreRefusesAStreamThatNamesAnythingOutsideItsDestination) {
  const auto u16 = [](std::uint16_t v) { return std::string{char(v & 0xff), char(v >> 8)}; };
  const auto u32 = [](std::uint32_t v) {
    std::string out;
    for (int s = 0; s < 32; s += 8) out.push_back(char(v >> s));
    return out;
  };
  const auto name = [&](const std::string& n) { return u16(std::uint16_t(n.size())) + n; };
  const auto attrs = [&](std::uint32_t mode, std::uint32_t uid) {
    return u32(mode) + u32(uid) + u32(uid) + std::string(8, '\0') + u32(0) + u16(0);
  };
  const auto file = [&](const std::string& n, const std::string& data) {
    std::string size;
    for (int s = 0; s < 64; s += 8) size.push_back(char(std::uint64_t(data.size()) >> s));
    return "F" + name(n) + attrs(0644, 0) + u32(0) + size + data;
  };
  const std::string head = std::string("ALSNAP01") + "S" + name("work") + attrs(0755, 0);
  TemporaryDirectory outside("airlock-snapshot-outside");
  const std::string escape = outside.path().string();
  const std::vector<std::pair<std::string, std::string>> attacks = {
      {"dot-dot", head + file("..", "x") + "EZ"},
      {"dot", head + "D" + name(".") + attrs(0755, 0) + "E" + "EZ"},
      {"slash", head + file("a/b", "x") + "EZ"},
      {"absolute", head + file(escape + "/planted", "x") + "EZ"},
      {"link-then-directory",
       head + "L" + name("a") + attrs(0777, 0) + u32(std::uint32_t(escape.size())) + escape +
           "D" + name("a") + attrs(0755, 0) + file("planted", "x") + "E" + "EZ"},
      {"link-then-file",
       head + "L" + name("b") + attrs(0777, 0) + u32(std::uint32_t(escape.size() + 8)) + escape +
           "/planted" + file("b", "x") + "EZ"},
      {"hard-link-to-nothing", head + "H" + name("c") + u32(7) + "EZ"},
      {"owner-outside-the-range", head + "F" + name("d") + attrs(0644, 70000) + "EZ"},
      {"set-uid-attribute", head + "D" + name("e") + u32(0755) + u32(0) + u32(0) +
                                 std::string(8, '\0') + u32(0) + u16(1) +
                                 name("security.capability") + u32(1) + "x" + "E" + "EZ"},
      {"unknown-section", std::string("ALSNAP01") + "S" + name("etc") + attrs(0755, 0) + "EZ"},
      {"truncated", head + "F" + name("f")},
      {"trailing", head + "EZ" + "S"},
  };
  for (const auto& [what, bytes] : attacks) {
    SCOPED_TRACE(what);
    const fs::path destination = scratch_->path() / ("dest-" + what);
    fs::create_directories(destination);
    write_text(stream_, bytes);
    const ss::Outcome restored = restore(stream_, destination);
    EXPECT_FALSE(restored) << "accepted";
    EXPECT_TRUE(fs::is_empty(outside.path())) << "something landed outside the destination";
    EXPECT_FALSE(fs::exists(fs::symlink_status(destination.parent_path() / "planted")));
  }
}

TEST_F(SnapshotStreamTest, AStreamNeverExceedsItsBoundNorFollowsATreeTooDeep) {
  write_text(source_ / "big", std::string(64 * 1024, 'b'));
  const ss::Outcome bounded = capture(source_, stream_, 32 * 1024);
  EXPECT_EQ(bounded.error, EFBIG) << bounded.what;
  EXPECT_LE(fs::file_size(stream_), 32u * 1024u) << "more was written than the bound";
  fs::remove(source_ / "big");
  fs::path deep = source_;
  for (std::uint32_t level = 0; level <= ss::kMaxDepth + 1; ++level) deep /= "d";
  fs::create_directories(deep);
  const ss::Outcome too_deep = capture(source_, stream_, 64 << 20);
  EXPECT_EQ(too_deep.error, ELOOP) << too_deep.what;
}

TEST(SnapshotRoom, TheHostDiskKeepsAReserveAfterASnapshot) {
  constexpr std::uint64_t MiB = 1 << 20;
  EXPECT_FALSE(room_refusal(10'000 * MiB, 100'000 * MiB, 100 * MiB));
  EXPECT_TRUE(room_refusal(1'100 * MiB, 100'000 * MiB, 100 * MiB)) << "under 1 GiB would be left";
  EXPECT_TRUE(room_refusal(50 * MiB, 100'000 * MiB, 100 * MiB)) << "it does not fit";
  EXPECT_TRUE(room_refusal(100 * MiB, 1'000 * MiB, 50 * MiB)) << "under the 64 MiB floor";
  EXPECT_FALSE(room_refusal(200 * MiB, 1'000 * MiB, 50 * MiB));
  // While it is written, the stream stops where the reserve begins.
  EXPECT_EQ(room_for(10'000 * MiB, 100'000 * MiB), 10'000 * MiB - 1'024 * MiB);
  EXPECT_EQ(room_for(60 * MiB, 1'000 * MiB), 0u);
}

// ---- through real sandboxes ----

class SnapshotTest : public LinuxBackendTest {
 protected:
  SnapshotRecord take(Sandbox& sandbox) { return sandbox.snapshot(); }
  std::shared_ptr<LinuxSandbox> resume(const SnapshotRecord& record,
                                       std::optional<SandboxKey> key = std::nullopt,
                                       std::optional<SandboxSpec> wanted = std::nullopt) {
    auto sandbox = std::dynamic_pointer_cast<LinuxSandbox>(backend_->acquire_from_snapshot(
        key ? *key : key_, wanted ? *wanted : spec(), record));
    if (!sandbox) throw std::runtime_error("the resume did not return a linux sandbox");
    audit_.track(sandbox->record());
    return sandbox;
  }
  fs::path snapshot_dir(const std::string& id) const {
    return state_->path() / "linux" / "snapshots" / id;
  }
  std::string out(Sandbox& sandbox, const std::string& line) {
    const ExecResult result = sh(sandbox, line);
    EXPECT_EQ(result.exit_code, 0) << line << ": " << result.stderr_bytes;
    return result.stdout_bytes;
  }
};

TEST_F(SnapshotTest, FilesSurviveAResumeAndAFileDeletedAfterTheSnapshotComesBack) {
  auto sandbox = acquire(spec());
  sandbox->write_file("notes/plane.txt", "through the file plane\n", kWork);
  out(*sandbox,
      "printf by-a-command > notes/exec.txt && mkdir -p empty/inner && "
      "printf owned > owned.txt && chmod 0640 owned.txt && "
      "printf scratch > /tmp/scratch.txt && touch -d @1000000000 notes/plane.txt");
  const SnapshotRecord record = take(*sandbox);
  EXPECT_EQ(record.backend, "linux");
  EXPECT_EQ(record.content, SnapshotContent::filesystem);
  EXPECT_GT(record.bytes, 0u);
  // After the snapshot: one file deleted, one added.
  out(*sandbox, "rm notes/exec.txt && echo later > later.txt");
  const long old_init = sandbox->record().init_pid;
  const std::uint64_t old_start = sandbox->record().init_start_time;
  auto resumed = resume(record);
  EXPECT_NE(resumed->instance_id(), sandbox->instance_id());
  EXPECT_FALSE(process_alive(old_init, old_start)) << "the live sandbox was not disposed first";
  EXPECT_EQ(resumed->read_file("notes/plane.txt", kWork, 1 << 20), "through the file plane\n");
  EXPECT_EQ(resumed->read_file("notes/exec.txt", kWork, 1 << 20), "by-a-command")
      << "a file deleted after the snapshot did not come back";
  EXPECT_FALSE(resumed->stat_file("later.txt", kWork)) << "a later file is in the resume";
  EXPECT_EQ(out(*resumed, "stat -c '%u:%g %a' owned.txt; stat -c %Y notes/plane.txt; "
                          "test -d empty/inner && cat /tmp/scratch.txt"),
            "0:0 640\n1000000000\nscratch");
  // (Guest commands hold no CAP_CHOWN: other guest owners are checked on the stream itself,
  // HardLinksFifos…, where guest 1000 lands as the new range's 1000.)
}

TEST_F(SnapshotTest, PlantedLinksStayLinksAndNoHostFileIsReadOrWritten) {
  TemporaryDirectory host("airlock-snapshot-canary");
  const std::string secret = "host-canary-" + std::to_string(::getpid());
  write_text(host.path() / "secret.txt", secret);
  fs::create_directories(host.path() / "dir");
  const auto before = listing(host.path());
  const auto shadow_before = fs::last_write_time("/etc/shadow");
  auto sandbox = acquire(spec());
  const std::string canary = host.path().string();
  out(*sandbox, "ln -s /etc/shadow shadow && ln -s " + canary + "/secret.txt secret && ln -s " +
                    canary + "/dir dir-outside && ln -s /root root-dir && "
                    "ln -s ../../../../../etc climb && mkdir real && ln -s ../secret real/chain && "
                    "printf one > a && ln a b && mkfifo fifo && ln -s " +
                    canary + "/dir /tmp/tmp-link");
  const SnapshotRecord record = take(*sandbox);
  const std::string bytes = file_text(snapshot_dir(record.id) / "storage.stream");
  EXPECT_EQ(bytes.find(secret), std::string::npos) << "a host file was read through a link";
  const std::string shadow = file_text("/etc/shadow");
  EXPECT_EQ(bytes.find(shadow.substr(0, shadow.find('\n'))), std::string::npos);
  EXPECT_EQ(listing(host.path()), before);
  auto resumed = resume(record);
  EXPECT_EQ(out(*resumed, "for l in shadow secret dir-outside root-dir climb real/chain "
                          "/tmp/tmp-link; do test -L $l && readlink $l; done"),
            "/etc/shadow\n" + canary + "/secret.txt\n" + canary + "/dir\n/root\n"
            "../../../../../etc\n../secret\n" + canary + "/dir\n");
  EXPECT_EQ(out(*resumed, "test -p fifo && stat -c %i a b | uniq | wc -l"), "1\n")
      << "the FIFO or the hard link did not come back as one";
  EXPECT_EQ(listing(host.path()), before) << "the resume wrote through a link";
  EXPECT_EQ(file_text(host.path() / "secret.txt"), secret);
  EXPECT_EQ(fs::last_write_time("/etc/shadow"), shadow_before);
}

class SnapshotImageTest : public SnapshotTest {
 protected:
  void SetUp() override {
    SnapshotTest::SetUp();
    if (IsSkipped()) return;
    images_ = std::make_unique<TemporaryDirectory>("airlock-snapshot-image");
    const std::uint32_t owner = LinuxBackendConfig{}.uid_base;
    rootfs_ = make_busybox_rootfs(images_->path(), owner);
    if (!rootfs_) GTEST_SKIP() << "SKIPPED: busybox-static is not installed (/bin/busybox)";
    write_text(*rootfs_ / "etc" / "lower.txt", "from the image\n");
    fs::create_directories(*rootfs_ / "opt" / "tree");
    write_text(*rootfs_ / "opt" / "tree" / "old.txt", "from the image\n");
    for (const auto& path : {*rootfs_ / "etc" / "lower.txt", *rootfs_ / "opt",
                             *rootfs_ / "opt" / "tree", *rootfs_ / "opt" / "tree" / "old.txt"}) {
      ASSERT_EQ(::lchown(path.c_str(), owner, owner), 0);
    }
  }
  SandboxSpec image_spec() {
    return spec("busybox", [&](SandboxSpec::Fields& fields) { fields.image = rootfs_->string(); });
  }
  std::unique_ptr<TemporaryDirectory> images_;
  std::optional<fs::path> rootfs_;
};

TEST_F(SnapshotImageTest, AWhiteoutSurvivesSoAnImageFileDeletedBeforeTheSnapshotStaysDeleted) {
  auto sandbox = acquire(image_spec());
  out(*sandbox, "rm /etc/lower.txt && rm -r /opt/tree && mkdir /opt/tree && "
                "echo new > /opt/tree/new.txt && echo changed > /etc/motd");
  const SnapshotRecord record = take(*sandbox);
  auto resumed = resume(record, std::nullopt, image_spec());
  EXPECT_EQ(out(*resumed, "test -e /etc/lower.txt && echo back; ls /opt/tree; cat /etc/motd"),
            "new.txt\nchanged\n")
      << "a deleted image file came back, or the replaced directory shows the image's files";
  // The image itself was never written.
  EXPECT_EQ(file_text(*rootfs_ / "etc" / "lower.txt"), "from the image\n");
  EXPECT_TRUE(fs::exists(*rootfs_ / "opt" / "tree" / "old.txt"));
  // Over another image it would not be the same files: refused.
  EXPECT_THROW(resume(record, SandboxKey{key_.scope, key_.thread_id, "/other"}, spec("busybox")),
               InvalidArgument);
}

TEST_F(SnapshotTest, AResumeRunsUnderTheSpecsLimitsNotTheSnapshots) {
  auto sandbox = acquire(spec());
  sandbox->write_file("kept.txt", "kept\n", kWork);
  const SnapshotRecord record = take(*sandbox);
  const SandboxSpec smaller = spec("test", [](SandboxSpec::Fields& fields) {
    fields.resources.disk_bytes = std::uint64_t{32} << 20;
    fields.resources.memory_bytes = std::uint64_t{96} << 20;
  });
  auto resumed = resume(record, std::nullopt, smaller);
  EXPECT_EQ(out(*resumed, "cat kept.txt; df -k /tmp | awk 'NR==2 {print $2}'"), "kept\n32768\n");
  std::string limit;
  for (const auto& cgroup : resumed->record().cgroups) {
    for (const char* file : {"/memory.limit_in_bytes", "/memory.max"}) {
      const std::string text = read_text(cgroup + file);
      if (!text.empty()) limit = text;
    }
  }
  EXPECT_EQ(limit, std::to_string(std::uint64_t{96} << 20) + "\n");
}

TEST_F(SnapshotTest, TwoForksOfOneSnapshotDiverge) {
  auto source = acquire(spec());
  out(*source, "echo source > shared.txt");
  const SnapshotRecord record = take(*source);
  auto left = resume(record, SandboxKey{key_.scope, key_.thread_id, "/left"});
  auto right = resume(record, SandboxKey{key_.scope, key_.thread_id, "/right"});
  out(*left, "echo left > shared.txt && echo l > only-left.txt");
  out(*right, "echo right > only-right.txt");
  EXPECT_EQ(out(*right, "cat shared.txt; ls"), "source\nonly-right.txt\nshared.txt\n");
  EXPECT_EQ(out(*left, "cat shared.txt; ls"), "left\nonly-left.txt\nshared.txt\n");
  EXPECT_EQ(out(*source, "cat shared.txt; ls"), "source\nshared.txt\n");
}

TEST_F(SnapshotTest, AFrozenCaptureIsConsistentWhileTheGuestKeepsWriting) {
  auto sandbox = acquire(spec());
  const std::string writer = install_testcase(*sandbox, "snapshot_writer");
  out(*sandbox, writer + " </dev/null >/dev/null 2>&1 &");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  constexpr std::size_t kBlock = 2 * 1024 * 1024;
  for (int round = 0; round < 12; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const SnapshotRecord record = take(*sandbox);
    auto fork = resume(record, SandboxKey{key_.scope, key_.thread_id, "/fork"});
    const std::string a = fork->read_file("a.dat", kWork, 8 << 20);
    const std::string b = fork->read_file("b.dat", kWork, 8 << 20);
    ASSERT_EQ(a.size(), kBlock);
    ASSERT_EQ(b.size(), kBlock);
    std::uint32_t na = 0, nb = 0;
    std::memcpy(&na, a.data(), 4);
    std::memcpy(&nb, b.data(), 4);
    EXPECT_EQ(a.find_first_not_of(char('a' + na % 26), 4), std::string::npos) << "a.dat is torn";
    EXPECT_EQ(b.find_first_not_of(char('a' + nb % 26), 4), std::string::npos) << "b.dat is torn";
    EXPECT_TRUE(nb == na || nb + 1 == na)
        << "a.dat holds " << na << " and b.dat " << nb << ": no instant had both";
    backend_->delete_snapshot(record.id);
  }
  // Thawed: the writer runs on.
  const std::string first = sandbox->read_file("a.dat", kWork, 8 << 20).substr(0, 4);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_NE(sandbox->read_file("a.dat", kWork, 8 << 20).substr(0, 4), first)
      << "the guest stayed frozen";
}

TEST_F(SnapshotTest, AFailedCaptureThawsTheGuestAndLeavesNothing) {
  auto sandbox = acquire(spec());
  // Deeper than a stream may go: the capture stops, and must not leave the guest frozen.
  out(*sandbox, "d=deep; for i in $(seq 300); do d=$d/d; done; mkdir -p $d");
  EXPECT_THROW(take(*sandbox), BackendError);
  EXPECT_EQ(out(*sandbox, "echo running"), "running\n");
  EXPECT_TRUE(fs::is_empty(state_->path() / "linux" / "snapshots"))
      << "a failed capture left its staging directory";
}

TEST_F(SnapshotTest, ASparseFileLargerThanTheStorageMakesTheSnapshotRefusedNotTheHostFull) {
  const SandboxSpec small = spec("test", [](SandboxSpec::Fields& fields) {
    fields.resources.disk_bytes = std::uint64_t{8} << 20;
  });
  auto sandbox = acquire(small);
  // No blocks in the storage, 64 GiB to a reader: stored whole, it would be 8000 times the
  // storage.
  out(*sandbox, "truncate -s 64G sparse");
  EXPECT_THROW(take(*sandbox), BackendError);
  EXPECT_TRUE(fs::is_empty(state_->path() / "linux" / "snapshots"));
  EXPECT_EQ(out(*sandbox, "echo running"), "running\n");
}

TEST_F(SnapshotTest, ASnapshotIsNeverLargerThanTheSandboxsStorageAndIsRootsOnly) {
  static constexpr std::uint64_t kDisk = 8 << 20;
  const SandboxSpec small = spec("test", [](SandboxSpec::Fields& fields) {
    fields.resources.disk_bytes = kDisk;
  });
  auto sandbox = acquire(small);
  // As full as the guest can make it: one large file, then small files until the store is full.
  sh(*sandbox, "head -c 7000000 /dev/zero > big; i=0; while printf x > f$i; do i=$((i+1)); done");
  const SnapshotRecord record = take(*sandbox);
  EXPECT_LE(record.bytes, kDisk);
  struct stat directory {}, stream {}, json {};
  ASSERT_EQ(::lstat(snapshot_dir(record.id).c_str(), &directory), 0);
  ASSERT_EQ(::lstat((snapshot_dir(record.id) / "storage.stream").c_str(), &stream), 0);
  ASSERT_EQ(::lstat((snapshot_dir(record.id) / "record.json").c_str(), &json), 0);
  ASSERT_EQ(::lstat((state_->path() / "linux" / "snapshots").c_str(), &directory), 0);
  EXPECT_EQ(directory.st_mode & 07777, 0700u);
  EXPECT_EQ(stream.st_mode & 07777, 0600u);
  EXPECT_EQ(json.st_mode & 07777, 0600u);
  EXPECT_EQ(stream.st_uid, 0u);
  EXPECT_LE(static_cast<std::uint64_t>(stream.st_size), kDisk);
  // It fits back into a sandbox of the same storage.
  auto resumed = resume(record, std::nullopt, small);
  EXPECT_EQ(out(*resumed, "wc -c < big"), "7000000\n");
}

TEST_F(SnapshotTest, OneConversationsSnapshotNeverReachesAnothersSandbox) {
  RouterOptions routing;
  routing.min_isolation = Isolation::container;
  SandboxRouter router({backend_}, routing);
  const SandboxKey mine{key_.scope, "thread-1", "/agent"};
  const SandboxKey theirs{key_.scope, "thread-2", "/agent"};
  const SandboxKey elsewhere{key_.scope + "-other", "thread-1", "/agent"};
  auto a = router.acquire(mine, spec());
  a->write_file("secret.txt", "thread one's\n", kWork);
  const SnapshotRecord first = router.snapshot(mine, spec());
  auto b = router.acquire(theirs, spec());
  b->write_file("own.txt", "thread two's\n", kWork);
  const SnapshotRecord second = router.snapshot(theirs, spec());
  for (const SandboxKey& stranger : {theirs, elsewhere}) {
    EXPECT_THROW(router.resume(stranger, spec(), first.id), NotFound);
    EXPECT_THROW(router.delete_snapshot(stranger, first.id), NotFound);
  }
  // Below the router too: the backend reads whose a snapshot is from its own record, not from
  // the record a caller hands it.
  SnapshotRecord forged = first;
  forged.labels = second.labels;
  EXPECT_THROW(backend_->acquire_from_snapshot(theirs, spec(), forged), NotFound);
  auto resumed = router.resume(theirs, spec(), second.id);
  audit_.track(std::dynamic_pointer_cast<LinuxSandbox>(resumed)->record());
  audit_.track(std::dynamic_pointer_cast<LinuxSandbox>(a)->record());
  EXPECT_FALSE(resumed->stat_file("secret.txt", kWork)) << "another conversation's file arrived";
  EXPECT_EQ(resumed->read_file("own.txt", kWork, 1 << 10), "thread two's\n");
  // The snapshot store is nowhere in the guest's view.
  const ExecResult looked = sh(*resumed, "ls " + (state_->path() / "linux" / "snapshots").string());
  EXPECT_NE(looked.exit_code, 0);
  EXPECT_TRUE(backend_->find_snapshot(first.id));
}

TEST_F(SnapshotTest, NothingIsLeftAfterDisposeScopeOrPurge) {
  auto sandbox = acquire(spec());
  sandbox->write_file("x.txt", "x\n", kWork);
  const SnapshotRecord first = take(*sandbox);
  const SnapshotRecord second = take(*sandbox);
  auto fork = resume(first, SandboxKey{key_.scope, key_.thread_id, "/fork"});
  const RecordFile fork_record = fork->record();
  // Another conversation's snapshot stays.
  const SandboxKey other{key_.scope + "-other", "t", "/agent"};
  auto kept = acquire(spec(), other);
  const SnapshotRecord theirs = take(*kept);
  sandbox.reset();
  fork.reset();
  EXPECT_EQ(backend_->dispose_scope(key_.scope, key_.thread_id), 2);
  EXPECT_FALSE(backend_->find_snapshot(first.id));
  EXPECT_FALSE(backend_->find_snapshot(second.id));
  EXPECT_FALSE(fs::exists(snapshot_dir(first.id)));
  EXPECT_FALSE(process_alive(fork_record.init_pid, fork_record.init_start_time));
  for (const auto& cgroup : fork_record.cgroups) EXPECT_FALSE(fs::exists(cgroup)) << cgroup;
  EXPECT_TRUE(backend_->find_snapshot(theirs.id));
  // A capture a dead process left half-made is reclaimed, as purge removes every snapshot.
  const fs::path staging = state_->path() / "linux" / "snapshots" /
                           ".snap-0123456789abcdef01234567.staging-999999999";
  fs::create_directories(staging / "inner");
  // And a snapshot whose record cannot be read any more: no conversation matches it, a purge
  // still removes it.
  const fs::path broken = snapshot_dir("snap-abcdefabcdefabcdefabcdef");
  fs::create_directories(broken);
  write_text(broken / "record.json", "{ not json");
  kept.reset();
  backend_->purge_all();
  EXPECT_FALSE(backend_->find_snapshot(theirs.id));
  EXPECT_FALSE(fs::exists(staging));
  EXPECT_FALSE(fs::exists(broken));
  EXPECT_TRUE(backend_->list_snapshots().empty());
}

// The figures docs/backends/linux.md quotes: a cold acquire (with the standby, as an acquire
// normally runs), a snapshot and a resume, of a sandbox holding `files` small files and one of
// `megabytes` MiB. Medians of a few runs, printed; the test only checks they were taken.
TEST_F(SnapshotTest, SnapshotAndResumeTimesBesideAColdAcquire) {
  using Clock = std::chrono::steady_clock;
  const auto ms = [](Clock::duration span) {
    return std::chrono::duration<double, std::milli>(span).count();
  };
  const auto median = [](std::vector<double> values) {
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
  };
  constexpr int kRuns = 7;
  for (const auto& [files, megabytes] : {std::pair{10, 0}, std::pair{1000, 64}}) {
    std::vector<double> cold, saved, resumed, forked, bytes;
    for (int run = 0; run < kRuns; ++run) {
      const SandboxKey key{key_.scope, "timing", "/agent-" + std::to_string(run)};
      auto started = Clock::now();
      auto sandbox = acquire(spec(), key);
      cold.push_back(ms(Clock::now() - started));
      out(*sandbox, "mkdir -p many && i=0; while [ $i -lt " + std::to_string(files) +
                        " ]; do echo $i > many/f$i; i=$((i+1)); done; head -c " +
                        std::to_string(megabytes << 20) + " /dev/urandom > big");
      started = Clock::now();
      const SnapshotRecord record = take(*sandbox);
      saved.push_back(ms(Clock::now() - started));
      bytes.push_back(static_cast<double>(record.bytes));
      started = Clock::now();
      auto back = resume(record, key);
      resumed.push_back(ms(Clock::now() - started));
      EXPECT_EQ(out(*back, "ls many | wc -l"), std::to_string(files) + "\n");
      // A fork: under a key of the conversation that has no live sandbox to dispose of first.
      const SandboxKey fork_key{key_.scope, "timing", "/fork-" + std::to_string(run)};
      started = Clock::now();
      auto fork = resume(record, fork_key);
      forked.push_back(ms(Clock::now() - started));
      backend_->dispose(fork_key);
      backend_->dispose(key);
      backend_->delete_snapshot(record.id);
    }
    std::printf("snapshot timings, %d files + %d MiB (%.1f MiB stream), median of %d: cold "
                "acquire %.1f ms, snapshot %.1f ms, resume (the live one disposed first) %.1f "
                "ms, fork %.1f ms\n",
                files, megabytes, median(bytes) / (1 << 20), kRuns, median(cold), median(saved),
                median(resumed), median(forked));
  }
}

}  // namespace
}  // namespace airlock::linux_backend::testing
