// The file plane under attack: links planted by the guest (exec ln -s) in every position, paths
// outside, non-regular entries, and caps that must refuse before the body moves.
#include "airlock/paths.hpp"
#include "backends/docker/engine_streams.hpp"
#include "backends/docker/tar_io.hpp"
#include "engine_fixture.hpp"

namespace airlock::docker::test {
namespace {

constexpr const char* kOutside = "/srv/work-outside";  // a sibling sharing a string prefix
const std::string kSecret = "the guest must not reach this\n";

// Every attack runs against both file planes: the host plane (openat2 on the container's root)
// and the archive endpoints.
class FilesTest : public EngineTest, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    EngineTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    DockerConfig config = test_config();
    config.file_plane = GetParam();
    backend_ = make_backend(config);
    sandbox_ = acquire();
    make_work(*sandbox_);
    sandbox_->write_file("secret.txt", kSecret, kOutside);
    sandbox_->write_file("sub/leaf.txt", kSecret, kOutside);
    sandbox_->write_file("real/inside.txt", "a legitimate output\n", kWork);
    plant("ln -s /srv/work-outside link-dir && ln -s /srv/work-outside/secret.txt link-file");
  }

  void plant(const std::string& line) {
    const auto result = sh(*sandbox_, line, kWork);
    ASSERT_EQ(result.exit_code, 0) << line << ": " << result.stderr_text();
  }
  bool exists(const std::string& absolute) {
    return sh(*sandbox_,
              "test -e " + posix_quote(absolute) + " || test -L " + posix_quote(absolute))
               .exit_code == 0;
  }
  std::string cat(const std::string& absolute) {
    return sh(*sandbox_, "cat " + posix_quote(absolute)).stdout_bytes;
  }

  std::shared_ptr<Sandbox> sandbox_;
};

// ---- writes -----------------------------------------------------------------------------------

TEST_P(FilesTest, AWriteReadsBackByteExact) {
  std::string binary;
  for (int i = 0; i < 256; ++i) binary.push_back(static_cast<char>(i));
  binary += std::string(1 << 20, '\0') + "ünïcödé";
  sandbox_->write_file("real/binary.bin", binary, kWork);
  EXPECT_EQ(sandbox_->read_file("real/binary.bin", kWork, 2u << 20), binary);
  EXPECT_EQ(sh(*sandbox_, "wc -c < real/binary.bin", kWork).stdout_text(),
            std::to_string(binary.size()) + "\n");
  sandbox_->write_file("empty.txt", "", kWork);
  EXPECT_EQ(sandbox_->read_file("empty.txt", kWork, 10), "");
}

TEST_P(FilesTest, AWriteCreatesParentsAndReplaces) {
  sandbox_->write_file("deep/er/est/leaf.txt", "first", kWork);
  sandbox_->write_file("/srv/work/deep/er/est/leaf.txt", "second", kWork);
  EXPECT_EQ(cat("/srv/work/deep/er/est/leaf.txt"), "second");
  EXPECT_EQ(sandbox_->stat_file("deep/er", kWork)->kind, EntryKind::directory);
}

TEST_P(FilesTest, CannotWriteOutsideTheWorkingDirectory) {
  for (const char* path : {"../work-outside/planted.txt", "/srv/work-outside/planted.txt",
                           "/etc/planted", "real/../../planted.txt", "sub\\planted.txt"}) {
    EXPECT_THROW(sandbox_->write_file(path, "x", kWork), ConfinementError) << path;
  }
  EXPECT_FALSE(exists("/srv/work-outside/planted.txt"));
  EXPECT_FALSE(exists("/srv/planted.txt"));
}

TEST_P(FilesTest, CannotWriteThroughALinkedParent) {
  EXPECT_THROW(sandbox_->write_file("link-dir/landed.txt", "x", kWork), ConfinementError);
  EXPECT_THROW(sandbox_->write_file("link-dir/new/landed.txt", "x", kWork), ConfinementError);
  EXPECT_FALSE(exists("/srv/work-outside/landed.txt"));
  EXPECT_FALSE(exists("/srv/work-outside/new"));
}

TEST_P(FilesTest, ALinkedDestinationIsRefusedNotFollowed) {
  EXPECT_THROW(sandbox_->write_file("link-file", "overwritten", kWork), ConfinementError);
  EXPECT_EQ(cat("/srv/work-outside/secret.txt"), kSecret);
}

TEST_P(FilesTest, ALinkedWorkingDirectoryAndItsDescendantsAreRefused) {
  EXPECT_THROW(sandbox_->write_file("landed.txt", "x", "/srv/work/link-dir"), ConfinementError);
  EXPECT_THROW(sandbox_->write_file("landed.txt", "x", "/srv/work/link-dir/sub"), ConfinementError);
  EXPECT_FALSE(exists("/srv/work-outside/landed.txt"));
  EXPECT_FALSE(exists("/srv/work-outside/sub/landed.txt"));
}

TEST_P(FilesTest, TheWorkingDirectoryItselfIsNotAFile) {
  EXPECT_THROW(sandbox_->write_file(".", "x", kWork), ConfinementError);
  EXPECT_THROW(sandbox_->write_file("real", "x", kWork), IsADirectory);
  EXPECT_EQ(sandbox_->stat_file("real", kWork)->kind, EntryKind::directory);
}

TEST_P(FilesTest, AFileAsAParentIsNotADirectoryNotAnEscape) {
  sandbox_->write_file("plain.txt", "not a directory\n", kWork);
  EXPECT_THROW(sandbox_->write_file("plain.txt/deeper.txt", "x", kWork), NotADirectory);
  EXPECT_THROW(sandbox_->stat_file("plain.txt/deeper.txt", kWork), NotADirectory);
}

// ---- stat and read ----------------------------------------------------------------------------

TEST_P(FilesTest, StatDescribesALinkAsALinkWithNoSize) {
  const auto link = sandbox_->stat_file("link-file", kWork);
  ASSERT_TRUE(link);
  EXPECT_EQ(link->kind, EntryKind::symlink);
  EXPECT_FALSE(link->size_bytes);
  const auto file = sandbox_->stat_file("real/inside.txt", kWork);
  ASSERT_TRUE(file);
  EXPECT_EQ(file->kind, EntryKind::file);
  EXPECT_EQ(file->size_bytes, 20u);
  EXPECT_EQ(file->path, "real/inside.txt");
  EXPECT_FALSE(sandbox_->stat_file("absent.txt", kWork));
}

TEST_P(FilesTest, CannotStatOrReadThroughALinkedParent) {
  EXPECT_THROW(sandbox_->stat_file("link-dir/secret.txt", kWork), ConfinementError);
  EXPECT_THROW(sandbox_->read_file("link-dir/secret.txt", kWork, 1 << 20), ConfinementError);
  EXPECT_THROW(sandbox_->read_file("secret.txt", "/srv/work/link-dir", 1 << 20), ConfinementError);
  EXPECT_THROW(sandbox_->read_file("leaf.txt", "/srv/work/link-dir/sub", 1 << 20),
               ConfinementError);
}

TEST_P(FilesTest, ALinkIsNeverReadEvenToALegitimateTarget) {
  plant("ln -s real/inside.txt innocent-link");
  for (const char* link : {"link-file", "innocent-link"}) {
    try {
      sandbox_->read_file(link, kWork, 1 << 20);
      ADD_FAILURE() << link << " was read";
    } catch (const ConfinementError&) {
      ADD_FAILURE() << "a final link is refused as a non-regular entry, not an escape";
    } catch (const SystemError& error) {
      EXPECT_EQ(error.error_number(), ELOOP) << error.what();
    }
  }
}

TEST_P(FilesTest, AFifoIsReportedAsOtherAndRefusedWithoutHanging) {
  plant("mkfifo pipe");
  EXPECT_EQ(sandbox_->stat_file("pipe", kWork)->kind, EntryKind::other);
  EXPECT_THROW(sandbox_->read_file("pipe", kWork, 1 << 20), SystemError);
}

TEST_P(FilesTest, ReadsRefuseDirectoriesAndMissingFiles) {
  EXPECT_THROW(sandbox_->read_file("real", kWork, 1 << 20), IsADirectory);
  EXPECT_THROW(sandbox_->read_file("absent.txt", kWork, 1 << 20), NotFound);
}

TEST_P(FilesTest, AReadOverTheCapIsRefusedNeverTruncated) {
  sandbox_->write_file("big.txt", std::string(5000, 'b'), kWork);
  try {
    sandbox_->read_file("big.txt", kWork, 4999);
    ADD_FAILURE() << "a read past max_bytes returned";
  } catch (const TransferCapExceeded& error) {
    EXPECT_EQ(error.limit(), 4999u);
    EXPECT_EQ(error.size(), 5000u);
  }
  EXPECT_EQ(sandbox_->read_file("big.txt", kWork, 5000).size(), 5000u);
}

TEST_P(FilesTest, TheCapRefusesBeforeTheBodyIsTransferred) {
  plant("head -c 67108864 /dev/zero > huge.bin");
  const auto started = Clock::now();
  EXPECT_THROW(sandbox_->read_file("huge.bin", kWork, 1024), TransferCapExceeded);
  // The mechanism itself: the tar header is judged while the body is still on the engine.
  EngineDownload download(*client_,
                          client_->versioned("/containers/" + sandbox_->instance_id() +
                                             "/archive?path=/srv/work/huge.bin"),
                          Clock::now() + std::chrono::seconds(30));
  ASSERT_EQ(download.wait_for_head(), 200);
  TarStreamReader reader(download);
  const auto header = reader.next();
  ASSERT_TRUE(header);
  EXPECT_EQ(header->size, 64ull << 20);
  EXPECT_LT(download.consumed(), 2ull << 20) << "the reader pulled the body to judge the header";
  RecordProperty(
      "refusal_ms",
      std::to_string(
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count()));
}

// ---- listing ----------------------------------------------------------------------------------

TEST_P(FilesTest, AListingNamesItsLinksAndStaysOneLevelDeep) {
  plant("mkfifo pipe");
  const auto entries = sandbox_->list_dir(".", kWork);
  std::map<std::string, SandboxEntry> by_path;
  for (const auto& entry : entries) by_path[entry.path] = entry;
  ASSERT_TRUE(by_path.contains("link-file"));
  EXPECT_EQ(by_path["link-file"].kind, EntryKind::symlink);
  EXPECT_EQ(by_path["link-dir"].kind, EntryKind::symlink);
  EXPECT_EQ(by_path["real"].kind, EntryKind::directory);
  EXPECT_EQ(by_path["pipe"].kind, EntryKind::other);
  EXPECT_FALSE(by_path.contains("real/inside.txt")) << "the listing went two levels deep";
  const auto real = sandbox_->list_dir("real", kWork);
  ASSERT_EQ(real.size(), 1u);
  EXPECT_EQ(real[0].path, "real/inside.txt");
  EXPECT_EQ(real[0].size_bytes, 20u);
}

TEST_P(FilesTest, CannotListALinkedDirectoryOrThroughOne) {
  EXPECT_THROW(sandbox_->list_dir("link-dir", kWork), ConfinementError);
  EXPECT_THROW(sandbox_->list_dir("link-dir/sub", kWork), ConfinementError);
  EXPECT_THROW(sandbox_->list_dir(".", "/srv/work/link-dir/sub"), ConfinementError);
  EXPECT_THROW(sandbox_->list_dir("real/inside.txt", kWork), NotADirectory);
}

// ---- removal ----------------------------------------------------------------------------------

TEST_P(FilesTest, ARemovedLinkIsUnlinkedNeverFollowed) {
  plant("ln -s /srv/work-outside/secret.txt link-out && ln -s /srv/work-outside link-out-dir");
  sandbox_->remove("link-out", kWork, false);
  sandbox_->remove("link-out-dir", kWork, true);
  EXPECT_FALSE(exists("/srv/work/link-out"));
  EXPECT_FALSE(exists("/srv/work/link-out-dir"));
  EXPECT_EQ(cat("/srv/work-outside/secret.txt"), kSecret);
  EXPECT_EQ(cat("/srv/work-outside/sub/leaf.txt"), kSecret);
}

TEST_P(FilesTest, ALinkInsideARecursiveRemovalIsUnlinkedNotFollowed) {
  sandbox_->write_file("tree/a.txt", "a", kWork);
  plant("ln -s /srv/work-outside tree/inside-link");
  sandbox_->remove("tree", kWork, true);
  EXPECT_FALSE(exists("/srv/work/tree"));
  EXPECT_EQ(cat("/srv/work-outside/secret.txt"), kSecret);
}

TEST_P(FilesTest, CannotRemoveThroughALinkedParentOrOutside) {
  for (bool recursive : {false, true}) {
    EXPECT_THROW(sandbox_->remove("link-dir/secret.txt", kWork, recursive), ConfinementError);
    EXPECT_THROW(sandbox_->remove("../work-outside/secret.txt", kWork, recursive),
                 ConfinementError);
    EXPECT_THROW(sandbox_->remove(".", kWork, recursive), ConfinementError);
  }
  EXPECT_EQ(cat("/srv/work-outside/secret.txt"), kSecret);
  EXPECT_TRUE(exists("/srv/work"));
}

TEST_P(FilesTest, ADirectoryNeedsRecursiveEvenWhenEmpty) {
  plant("mkdir -p empty");
  EXPECT_THROW(sandbox_->remove("empty", kWork, false), SystemError);
  EXPECT_TRUE(exists("/srv/work/empty"));
  sandbox_->remove("empty", kWork, true);
  EXPECT_FALSE(exists("/srv/work/empty"));
  sandbox_->remove("empty", kWork, true);  // a missing path is success
  sandbox_->remove("real/inside.txt", kWork, false);
  EXPECT_FALSE(exists("/srv/work/real/inside.txt"));
}

TEST_P(FilesTest, AHardLinkIsNeverReadAsTheFileItNames) {
  plant("ln /srv/work-outside/secret.txt hard-link");
  if (GetParam() == "archive") {
    // The archive stat has no link count: the stated residual of that plane.
    GTEST_SKIP() << "SKIPPED: the archive endpoints cannot tell a hard link from a file";
  }
  EXPECT_EQ(sandbox_->stat_file("hard-link", kWork)->kind, EntryKind::other);
  EXPECT_THROW(sandbox_->read_file("hard-link", kWork, 1 << 20), SystemError);
}

INSTANTIATE_TEST_SUITE_P(Planes, FilesTest, ::testing::Values("host", "archive"),
                         [](const auto& plane) { return plane.param; });

}  // namespace
}  // namespace airlock::docker::test
