// The store's contract: what an import keeps, how it is named and owned, when it is visible,
// and what survives concurrency, failure and a killed importer.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "airlock/errors.hpp"
#include "airlock/images.hpp"
#include "airlock/state_dir.hpp"
#include "images/image_fixtures.hpp"

namespace airlock::images {
namespace {

using testing::Compression;
using testing::Scratch;
using testing::TarEntry;

std::vector<TarEntry> sample_tree() {
  TarEntry fifo;
  fifo.name = "run/pipe";
  fifo.type = TarEntry::Type::fifo;
  fifo.mode = 0620;
  TarEntry owned = TarEntry::file("home/user/notes", "mine\n", 0600);
  owned.uid = 1000;
  owned.gid = 1001;
  TarEntry owned_dir = TarEntry::directory("home/user", 0700);
  owned_dir.uid = 1000;
  owned_dir.gid = 1001;
  return {TarEntry::directory(".", 0755),
          TarEntry::directory("bin"),
          TarEntry::file("bin/tool", "#!/bin/sh\necho tool\n", 0755),
          TarEntry::symlink("bin/alias", "tool"),
          TarEntry::symlink("bin/abs", "/bin/tool"),
          TarEntry::hardlink("bin/tool-again", "bin/tool"),
          TarEntry::directory("etc"),
          TarEntry::file("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"),
          TarEntry::directory("readonly", 0555),
          TarEntry::file("readonly/file", "ro\n", 0444),
          TarEntry::directory("home"),
          owned_dir,
          owned,
          TarEntry::directory("run"),
          fifo,
          TarEntry::directory("tmp", 01777)};
}

class Store : public ::testing::Test {
 protected:
  ImageStore store() const {
    return ImageStore(scratch_.store(), OwnershipMap::for_current_process());
  }
  std::filesystem::path sample_tar(Compression compression = Compression::none) const {
    const auto tar = scratch_.path("sample.tar");
    testing::write_tar(tar, sample_tree(), compression);
    return tar;
  }
  Scratch scratch_;
};

TEST_F(Store, ImportedTarIsFaithful) {
  const ImportResult result = store().import_tar(sample_tar(), "sample");
  const auto& rootfs = result.image.rootfs;
  EXPECT_TRUE(rootfs.is_absolute());
  EXPECT_EQ(result.image.reference, "sample:latest");
  EXPECT_EQ(result.image.source_kind, SourceKind::tar);
  EXPECT_EQ(testing::read_file(rootfs / "bin/tool"), "#!/bin/sh\necho tool\n");
  EXPECT_EQ(std::filesystem::read_symlink(rootfs / "bin/alias"), "tool");
  EXPECT_EQ(std::filesystem::read_symlink(rootfs / "bin/abs"), "/bin/tool");
  struct stat tool {
  }, again{};
  ASSERT_EQ(::stat((rootfs / "bin/tool").c_str(), &tool), 0);
  ASSERT_EQ(::stat((rootfs / "bin/tool-again").c_str(), &again), 0);
  EXPECT_EQ(tool.st_ino, again.st_ino) << "a hard link became a copy";
  EXPECT_EQ(tool.st_mode & 07777, 0755U);
  EXPECT_EQ(tool.st_mtim.tv_sec, 1'700'000'000);
  struct stat st {};
  ASSERT_EQ(::stat((rootfs / "readonly").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0555U);
  EXPECT_EQ(st.st_mtim.tv_sec, 1'700'000'000) << "directory times are applied last";
  ASSERT_EQ(::lstat((rootfs / "run/pipe").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0620U);
  ASSERT_EQ(::stat((rootfs / "tmp").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 01777U);
  EXPECT_EQ(result.image.entries, 16U);  // 15 entries plus the root
}

TEST_F(Store, EveryCompressionIsDetectedFromContent) {
  std::string id;
  for (const auto compression : {Compression::none, Compression::gzip, Compression::xz,
                                 Compression::zstd, Compression::bzip2}) {
    const ImportResult result = store().import_tar(sample_tar(compression), "sample");
    if (id.empty()) id = result.image.id;
    EXPECT_EQ(result.image.id, id) << "compression changed the content";
  }
}

TEST_F(Store, IdDependsOnContentNotOnSourceKind) {
  // One tree, made on disk by the caller (so every owner is in range whoever runs this), then
  // archived by the system tar and wrapped as an OCI layer.
  const auto source = scratch_.path("tree");
  testing::write_file(source / "bin/tool", "#!/bin/sh\necho tool\n");
  std::filesystem::permissions(source / "bin/tool", std::filesystem::perms(0755));
  std::filesystem::create_hard_link(source / "bin/tool", source / "bin/tool-again");
  std::filesystem::create_symlink("tool", source / "bin/alias");
  testing::write_file(source / "etc/passwd", "root:x:0:0:root:/root:/bin/sh\n");
  std::filesystem::create_directories(source / "tmp");
  std::filesystem::permissions(source / "tmp", std::filesystem::perms(01777));
  ASSERT_EQ(::mkfifo((source / "pipe").c_str(), 0640), 0);
  const auto tar = scratch_.path("tree.tar");
  const std::string command =
      "tar --numeric-owner -C '" + source.string() + "' -cf '" + tar.string() + "' .";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  testing::OciManifestSpec spec;
  spec.raw_layers = {tar};
  testing::write_oci_layout(scratch_.path("layout"), {spec});

  const ImportResult from_dir = store().import_directory(source, "from-dir");
  const ImportResult from_tar = store().import_tar(tar, "from-tar");
  const ImportResult from_oci = store().import_oci_layout(scratch_.path("layout"), "from-oci");
  EXPECT_EQ(from_dir.image.id, from_tar.image.id);
  EXPECT_EQ(from_oci.image.id, from_tar.image.id);
  EXPECT_EQ(scratch_.content().size(), 1U) << "identical content is stored once";
  EXPECT_EQ(store().list().size(), 3U);

  testing::write_file(source / "etc/passwd", "root:x:0:0:root:/root:/bin/ash\n");
  EXPECT_NE(store().import_directory(source, "edited").image.id, from_tar.image.id);
}

TEST_F(Store, DirectoryImportStoresLinksWithoutFollowingThem) {
  const auto source = scratch_.path("rootfs");
  testing::write_file(source / "etc/hostname", "box\n");
  std::filesystem::create_symlink(scratch_.outside(), source / "escape");
  std::filesystem::create_symlink("/etc/passwd", source / "passwd");
  ASSERT_EQ(::mkfifo((source / "fifo").c_str(), 0600), 0);
  const ImportResult result = store().import_directory(source, "dir");
  EXPECT_TRUE(std::filesystem::is_symlink(result.image.rootfs / "escape"));
  EXPECT_EQ(std::filesystem::read_symlink(result.image.rootfs / "escape"), scratch_.outside());
  EXPECT_TRUE(std::filesystem::is_symlink(result.image.rootfs / "passwd"));
  EXPECT_TRUE(std::filesystem::is_fifo(result.image.rootfs / "fifo"));
  EXPECT_EQ(testing::read_file(result.image.rootfs / "etc/hostname"), "box\n");
  EXPECT_EQ(result.image.source_kind, SourceKind::directory);
}

TEST_F(Store, OwnershipIsShiftedByUidBase) {
  if (::geteuid() != 0) GTEST_SKIP() << "SKIPPED: shifting owners needs root (CAP_CHOWN)";
  constexpr std::uint32_t kBase = 2'000'000'000;
  ImageStore shifted(scratch_.store(), OwnershipMap::shifted(kBase));
  const ImportResult result = shifted.import_tar(sample_tar(), "owned");
  struct stat st {};
  ASSERT_EQ(::lstat((result.image.rootfs / "bin/tool").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kBase);
  EXPECT_EQ(st.st_gid, kBase);
  ASSERT_EQ(::lstat((result.image.rootfs / "home/user/notes").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kBase + 1000);
  EXPECT_EQ(st.st_gid, kBase + 1001);
  ASSERT_EQ(::lstat((result.image.rootfs / "home/user").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kBase + 1000);
  ASSERT_EQ(::lstat((result.image.rootfs / "bin/alias").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kBase) << "a link's own owner is mapped, not its target's";
  ASSERT_EQ(::lstat(result.image.rootfs.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kBase);
}

TEST_F(Store, CallerOwnershipLeavesEverythingOwnedByCaller) {
  ImageStore caller(scratch_.store(), OwnershipMap::caller());
  const ImportResult result = caller.import_tar(sample_tar(), "caller");
  for (const auto& path : {"home/user/notes", "home/user", "bin/tool", "bin/alias"}) {
    struct stat st {};
    ASSERT_EQ(::lstat((result.image.rootfs / path).c_str(), &st), 0) << path;
    EXPECT_EQ(st.st_uid, ::geteuid()) << path;
  }
}

TEST_F(Store, StoreRefusesADifferentOwnershipMap) {
  ImageStore(scratch_.store(), OwnershipMap::caller()).import_tar(sample_tar(), "sample");
  try {
    ImageStore other(scratch_.store(), OwnershipMap::shifted(1'000'000'000));
    FAIL() << "a store made with the caller map was opened with a shifted map";
  } catch (const InvalidArgument& error) {
    EXPECT_EQ(error.check(), "ownership");
    EXPECT_NE(std::string(error.what()).find("caller"), std::string::npos) << error.what();
  }
}

TEST_F(Store, UidBaseThatWouldOverflowIsRefused) {
  EXPECT_THROW(OwnershipMap::shifted(0), InvalidArgument);
  EXPECT_THROW(OwnershipMap::shifted(0xffff0000U), InvalidArgument);
  EXPECT_NO_THROW(OwnershipMap::shifted(0xfffeffffU - 65535));
}

TEST_F(Store, UnknownReferenceErrorNamesTheStoreAndHowToImport) {
  try {
    store().resolve("python");
    FAIL() << "an unknown reference resolved";
  } catch (const InvalidArgument& error) {
    EXPECT_EQ(std::string(error.what()),
              "image 'python:latest' is not in the image store at " + scratch_.store().string() +
                  "; build it offline with `airlock image build python`, or add it with "
                  "`airlock image import --name python:latest PATH`");
  }
  store().import_tar(sample_tar(), "sample");
  EXPECT_THROW(store().resolve("sample:other"), InvalidArgument);
  EXPECT_THROW(store().remove("python"), InvalidArgument);
  EXPECT_FALSE(store().find("python").has_value());
}

TEST_F(Store, ResolveAcceptsTheFullImageId) {
  const ImportResult result = store().import_tar(sample_tar(), "sample:v1");
  const ImageInfo by_id = store().resolve(result.image.id);
  EXPECT_EQ(by_id.reference, "sample:v1");
  EXPECT_EQ(by_id.rootfs, result.image.rootfs);
  EXPECT_EQ(store().resolve("sample:v1").id, result.image.id);
}

TEST_F(Store, ReimportReplacesTheReferenceAndCollectsTheOldContent) {
  const ImportResult first = store().import_tar(sample_tar(), "sample");
  EXPECT_FALSE(first.replaced);
  auto tree = sample_tree();
  tree[7].data = "root:x:0:0:root:/root:/bin/ash\n";
  testing::write_tar(scratch_.path("v2.tar"), tree);
  const ImportResult second = store().import_tar(scratch_.path("v2.tar"), "sample");
  EXPECT_TRUE(second.replaced);
  EXPECT_NE(second.image.id, first.image.id);
  EXPECT_EQ(store().resolve("sample").id, second.image.id);
  EXPECT_FALSE(std::filesystem::exists(first.image.rootfs)) << "unreferenced content was kept";
  EXPECT_EQ(scratch_.content().size(), 1U);
  EXPECT_TRUE(scratch_.incoming().empty());
}

TEST_F(Store, RemoveKeepsContentAnotherReferenceNames) {
  const ImportResult one = store().import_tar(sample_tar(), "one");
  store().import_tar(sample_tar(), "two");
  store().remove("one");
  EXPECT_FALSE(store().find("one").has_value());
  EXPECT_TRUE(std::filesystem::exists(one.image.rootfs / "bin/tool"));
  store().remove("two");
  EXPECT_FALSE(std::filesystem::exists(one.image.rootfs));
  EXPECT_TRUE(scratch_.content().empty());
  EXPECT_TRUE(store().list().empty());
}

TEST_F(Store, RemoveIsRefusedWhilePinnedEvenAfterThePinnerReleases) {
  store().import_tar(sample_tar(), "pinned");
  ImagePin pin = store().pin("pinned");
  EXPECT_TRUE(std::filesystem::exists(pin.image().rootfs / "bin/tool"));
  // What a backend does: hand a copy of the descriptor to the sandbox's long-lived process.
  const int sandbox_copy = ::dup(pin.fd());
  ASSERT_GE(sandbox_copy, 0);
  pin.release();
  try {
    store().remove("pinned");
    FAIL() << "a pinned image was removed";
  } catch (const InvalidArgument& error) {
    EXPECT_EQ(error.check(), "in_use") << error.what();
  }
  EXPECT_TRUE(store().find("pinned").has_value());
  ::close(sandbox_copy);  // the sandbox ends
  store().remove("pinned");
  EXPECT_TRUE(scratch_.content().empty());
}

// A snapshot names its image by id (its reference may have moved on since): pin takes an id as
// resolve does, and pins that content, not whatever the name holds now.
TEST_F(Store, AnIdIsPinnedAsResolveFindsIt) {
  const std::string id = store().import_tar(sample_tar(), "app").image.id;
  auto tree = sample_tree();
  tree[7].data = "changed\n";
  testing::write_tar(scratch_.path("v2.tar"), tree);
  store().import_tar(scratch_.path("v2.tar"), "app-next");
  ImagePin pin = store().pin(id);
  EXPECT_EQ(pin.image().id, id);
  EXPECT_EQ(pin.image().reference, "app:latest");
  try {
    store().pin("sha256:" + std::string(64, '0'));
    FAIL() << "an unknown id was pinned";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("sha256:000"), std::string::npos) << error.what();
  }
}

TEST_F(Store, PinnedContentSurvivesReplacementUntilUnpinned) {
  store().import_tar(sample_tar(), "app");
  ImagePin pin = store().pin("app");
  auto tree = sample_tree();
  tree[7].data = "changed\n";
  testing::write_tar(scratch_.path("v2.tar"), tree);
  store().import_tar(scratch_.path("v2.tar"), "app");
  EXPECT_TRUE(std::filesystem::exists(pin.image().rootfs / "bin/tool"))
      << "a running sandbox lost its lower layer";
  pin.release();
  store().import_tar(scratch_.path("v2.tar"), "other");  // any later change collects garbage
  EXPECT_FALSE(std::filesystem::exists(pin.image().rootfs));
}

TEST_F(Store, ConcurrentImportsOfTheSameNameLeaveOneCompleteImage) {
  const auto tar = sample_tar(Compression::gzip);
  // Processes first (fork before any thread exists), then threads.
  std::vector<pid_t> children;
  for (int i = 0; i < 3; ++i) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      int code = 0;
      try {
        ImageStore(scratch_.store(), OwnershipMap::for_current_process()).import_tar(tar, "race");
      } catch (...) {
        code = 1;
      }
      ::_exit(code);
    }
    children.push_back(child);
  }
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      try {
        store().import_tar(tar, "race");
        store().resolve("race");
      } catch (const std::exception& error) {
        ADD_FAILURE() << error.what();
        ++failures;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (const pid_t child : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "an importing process failed";
  }
  EXPECT_EQ(failures.load(), 0);
  const ImageInfo image = store().resolve("race");
  EXPECT_EQ(testing::read_file(image.rootfs / "bin/tool"), "#!/bin/sh\necho tool\n");
  EXPECT_EQ(scratch_.content().size(), 1U);
  EXPECT_TRUE(scratch_.incoming().empty()) << "finished imports left work behind";
}

TEST_F(Store, FailedImportKeepsThePreviousImage) {
  const ImportResult good = store().import_tar(sample_tar(), "app");
  std::vector<TarEntry> entries = sample_tree();
  for (int i = 0; i < 300; ++i) {
    entries.push_back(TarEntry::file("data/" + std::to_string(i), std::string(4096, 'z')));
  }
  const auto broken = scratch_.path("broken.tar.gz");
  testing::write_tar(broken, entries, Compression::gzip);
  std::filesystem::resize_file(broken, std::filesystem::file_size(broken) * 2 / 3);
  EXPECT_THROW(store().import_tar(broken, "app"), InvalidArgument);
  EXPECT_EQ(store().resolve("app").id, good.image.id);
  EXPECT_TRUE(std::filesystem::exists(good.image.rootfs / "bin/tool"));
  EXPECT_TRUE(scratch_.incoming().empty());
  EXPECT_EQ(scratch_.content().size(), 1U);
}

TEST_F(Store, KilledImportPublishesNothingAndIsSweptLater) {
  std::vector<TarEntry> entries;
  for (int i = 0; i < 400; ++i) {
    entries.push_back(TarEntry::file("data/" + std::to_string(i), std::string(8192, 'k')));
  }
  const auto tar = scratch_.path("big.tar");
  testing::write_tar(tar, entries);
  const std::string bytes = testing::read_file(tar);
  const auto fifo = scratch_.path("feed");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  store().import_tar(sample_tar(), "unrelated");  // creates the store

  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      ImageStore(scratch_.store(), OwnershipMap::for_current_process()).import_tar(fifo, "victim");
    } catch (...) {
    }
    ::_exit(0);
  }
  const int writer = ::open(fifo.c_str(), O_WRONLY);
  ASSERT_GE(writer, 0);
  const std::size_t half = bytes.size() / 2;
  ASSERT_EQ(::write(writer, bytes.data(), half), static_cast<ssize_t>(half));
  // Wait until the importer has written part of the tree, then kill it mid-import.
  bool extracting = false;
  for (int i = 0; i < 500 && !extracting; ++i) {
    for (const auto& name : scratch_.incoming()) {
      std::error_code ignored;
      if (std::filesystem::exists(scratch_.store() / "incoming" / name / "rootfs/data/100",
                                  ignored)) {
        extracting = true;
      }
    }
    if (!extracting) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ::close(writer);
  ASSERT_TRUE(extracting) << "the importer never started extracting";
  ASSERT_TRUE(WIFSIGNALED(status)) << "the importer finished before it was killed";

  EXPECT_FALSE(store().find("victim").has_value()) << "a killed import published an image";
  EXPECT_FALSE(scratch_.incoming().empty()) << "the fixture did not leave an abandoned import";
  // Any later import or removal sweeps what the dead importer left.
  store().remove("unrelated");
  EXPECT_TRUE(scratch_.incoming().empty()) << "the abandoned import was not swept";
  EXPECT_TRUE(scratch_.content().empty());
}

TEST_F(Store, ImportPathDetectsTheSourceKind) {
  const auto source = scratch_.path("rootfs");
  testing::write_file(source / "hello", "hi\n");
  testing::OciManifestSpec spec;
  spec.layers = {{TarEntry::file("hello", "hi\n")}};
  testing::write_oci_layout(scratch_.path("layout"), {spec});
  EXPECT_EQ(store().import_path(source, "a").image.source_kind, SourceKind::directory);
  EXPECT_EQ(store().import_path(sample_tar(Compression::xz), "b").image.source_kind,
            SourceKind::tar);
  EXPECT_EQ(store().import_path(scratch_.path("layout"), "c").image.source_kind,
            SourceKind::oci_layout);
  EXPECT_THROW(store().import_path(source, "d", SourceKind::tar), InvalidArgument);
  EXPECT_THROW(store().import_path(scratch_.path("missing"), "e"), NotFound);
  EXPECT_THROW(store().import_path(source, "f", std::nullopt, "v1"), InvalidArgument);
}

TEST_F(Store, RelativeStoreRootIsRefused) {
  EXPECT_THROW(ImageStore("relative/store", OwnershipMap::caller()), InvalidArgument);
}

TEST_F(Store, ReadsOnAStoreThatDoesNotExistCreateNothing) {
  ImageStore empty(scratch_.path("never"), OwnershipMap::for_current_process());
  EXPECT_TRUE(empty.list().empty());
  EXPECT_FALSE(empty.find("x").has_value());
  EXPECT_THROW(empty.resolve("x"), InvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(scratch_.path("never")));
}

}  // namespace
}  // namespace airlock::images
