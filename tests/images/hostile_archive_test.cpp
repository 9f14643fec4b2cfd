// Hostile archives: each attack is refused with a named reason (the InvalidArgument's check) and
// leaves nothing outside the store — and no half image inside it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "airlock/errors.hpp"
#include "airlock/images.hpp"
#include "images/image_fixtures.hpp"

namespace airlock::images {
namespace {

using testing::Compression;
using testing::Scratch;
using testing::TarEntry;

class HostileArchive : public ::testing::Test {
 protected:
  ImageStore store(ExtractionLimits limits = {}) {
    return ImageStore(scratch_.store(), OwnershipMap::for_current_process(), limits);
  }

  // Imports `entries` and expects a refusal whose check is `rule`; then proves that the outside
  // tree is untouched and that the store publishes nothing and keeps nothing in progress.
  std::string expect_refused(const std::vector<TarEntry>& entries, const std::string& rule,
                             ExtractionLimits limits = {},
                             Compression compression = Compression::none) {
    const auto tar = scratch_.path("hostile.tar");
    testing::write_tar(tar, entries, compression);
    const std::string before = scratch_.outside_snapshot();
    std::string message;
    try {
      store(limits).import_tar(tar, "hostile");
      ADD_FAILURE() << "the import was accepted; expected a refusal by rule '" << rule << "'";
    } catch (const InvalidArgument& error) {
      EXPECT_EQ(error.check(), rule) << error.what();
      message = error.what();
    }
    EXPECT_EQ(scratch_.outside_snapshot(), before) << "something was written outside the store";
    EXPECT_FALSE(store().find("hostile").has_value()) << "a refused import published an image";
    EXPECT_TRUE(scratch_.incoming().empty()) << "a refused import left work in incoming/";
    EXPECT_TRUE(scratch_.content().empty()) << "a refused import left content behind";
    return message;
  }

  Scratch scratch_;
};

TEST_F(HostileArchive, AbsolutePathIsRefused) {
  const std::string target = "/tmp/airlock-escape-" + std::to_string(::getpid());
  const std::string message =
      expect_refused({TarEntry::directory("etc"), TarEntry::file(target, "pwned")}, "paths");
  EXPECT_NE(message.find("absolute"), std::string::npos) << message;
  EXPECT_FALSE(std::filesystem::exists(target));
}

TEST_F(HostileArchive, DotDotEscapeIsRefused) {
  const std::string escape = "../../outside/pwned";
  expect_refused({TarEntry::file("ok", "fine"), TarEntry::file(escape, "pwned")}, "paths");
  expect_refused({TarEntry::file("a/b/../../../outside/pwned", "pwned")}, "paths");
  EXPECT_FALSE(std::filesystem::exists(scratch_.outside() / "pwned"));
}

TEST_F(HostileArchive, CannotWriteThroughPlantedAbsoluteSymlink) {
  const std::string message = expect_refused(
      {TarEntry::symlink("link", scratch_.outside().string()), TarEntry::file("link/pwned", "x")},
      "symlinks");
  EXPECT_NE(message.find("'link'"), std::string::npos) << message;
  EXPECT_FALSE(std::filesystem::exists(scratch_.outside() / "pwned"));
}

TEST_F(HostileArchive, CannotWriteThroughPlantedRelativeSymlink) {
  // From <store>/incoming/<x>/rootfs, four levels up is the scratch dir.
  expect_refused(
      {TarEntry::symlink("up", "../../../../outside"), TarEntry::file("up/secret", "overwritten")},
      "symlinks");
  EXPECT_EQ(testing::read_file(scratch_.outside() / "secret"), "the host's secret\n");
}

TEST_F(HostileArchive, CannotReplaceDirectoryWithSymlinkThenWriteThroughIt) {
  expect_refused({TarEntry::directory("d"), TarEntry::file("d/a", "a"),
                  TarEntry::symlink("d", scratch_.outside().string()),
                  TarEntry::file("d/sub/file", "overwritten")},
                 "symlinks");
}

TEST_F(HostileArchive, CannotWriteThroughSymlinkToItsOwnParent) {
  expect_refused({TarEntry::symlink("self", "."), TarEntry::file("self/x", "x")}, "symlinks");
}

TEST_F(HostileArchive, HardLinkToAbsoluteHostFileIsRefused) {
  const std::string message = expect_refused(
      {TarEntry::hardlink("stolen", (scratch_.outside() / "secret").string())}, "hardlinks");
  EXPECT_NE(message.find("absolute"), std::string::npos) << message;
  struct stat st {};
  ASSERT_EQ(::stat((scratch_.outside() / "secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_nlink, 1U) << "the host file gained a link";
}

TEST_F(HostileArchive, HardLinkEscapingWithDotDotIsRefused) {
  expect_refused({TarEntry::hardlink("stolen", "../../../../outside/secret")}, "hardlinks");
}

TEST_F(HostileArchive, HardLinkToEntryNotInImageIsRefused) {
  expect_refused({TarEntry::hardlink("shadow", "etc/shadow")}, "hardlinks");
}

TEST_F(HostileArchive, HardLinkThroughSymlinkIsRefused) {
  expect_refused({TarEntry::symlink("host", scratch_.outside().string()),
                  TarEntry::hardlink("stolen", "host/secret")},
                 "hardlinks");
}

TEST_F(HostileArchive, HardLinkToDirectoryIsRefused) {
  expect_refused({TarEntry::directory("d"), TarEntry::hardlink("x", "d")}, "hardlinks");
}

TEST_F(HostileArchive, DeviceNodesAreRefusedWhenPolicySaysRefuse) {
  TarEntry device;
  device.name = "dev/mem";
  device.type = TarEntry::Type::char_device;
  ExtractionLimits limits;
  limits.device_nodes = DeviceNodePolicy::refuse;
  expect_refused({TarEntry::directory("dev"), device}, "device_nodes", limits);
}

TEST_F(HostileArchive, DeviceNodesAreSkippedAndNamedByDefault) {
  TarEntry character;
  character.name = "dev/mem";
  character.type = TarEntry::Type::char_device;
  TarEntry block;
  block.name = "dev/sda";
  block.type = TarEntry::Type::block_device;
  const auto tar = scratch_.path("devices.tar");
  testing::write_tar(tar,
                     {TarEntry::directory("dev"), character, block, TarEntry::file("ok", "1")});
  const ImportResult result = store().import_tar(tar, "devices");
  ASSERT_EQ(result.notes.size(), 2U);
  EXPECT_NE(result.notes[0].find("dev/mem: character device skipped"), std::string::npos)
      << result.notes[0];
  EXPECT_NE(result.notes[1].find("dev/sda: block device skipped"), std::string::npos)
      << result.notes[1];
  struct stat st {};
  EXPECT_NE(::lstat((result.image.rootfs / "dev/mem").c_str(), &st), 0);
  EXPECT_NE(::lstat((result.image.rootfs / "dev/sda").c_str(), &st), 0);
  EXPECT_TRUE(std::filesystem::is_regular_file(result.image.rootfs / "ok"));
}

TEST_F(HostileArchive, SetuidAndSetgidBitsAreStripped) {
  const auto tar = scratch_.path("setuid.tar");
  testing::write_tar(
      tar, {TarEntry::file("su", "#!/bin/sh\n", 06755), TarEntry::directory("shared", 02775),
            TarEntry::directory("tmp", 01777)});
  const ImportResult result = store().import_tar(tar, "setuid");
  struct stat st {};
  ASSERT_EQ(::stat((result.image.rootfs / "su").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755U);
  ASSERT_EQ(::stat((result.image.rootfs / "shared").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0775U);
  ASSERT_EQ(::stat((result.image.rootfs / "tmp").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 01777U) << "the sticky bit is not a privilege and must stay";
}

TEST_F(HostileArchive, FileCapabilitiesAreNotExtracted) {
  TarEntry ping = TarEntry::file("ping", "binary", 0755);
  // A security.capability blob granting cap_net_raw (VFS_CAP_REVISION_2 layout).
  const std::string capability(
      "\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x00\x00\x00",
      20);
  ping.xattrs.emplace_back("security.capability", capability);
  ping.xattrs.emplace_back("user.note", "hello");
  const auto tar = scratch_.path("caps.tar");
  testing::write_tar(tar, {ping});
  const ImportResult result = store().import_tar(tar, "caps");
  char buffer[64];
  EXPECT_LT(::lgetxattr((result.image.rootfs / "ping").c_str(), "security.capability", buffer,
                        sizeof buffer),
            0);
  EXPECT_EQ(errno, ENODATA);
}

TEST_F(HostileArchive, OwnerOutsideGuestRangeIsRefused) {
  TarEntry file = TarEntry::file("etc/owned", "x");
  file.uid = 70000;
  const std::string message = expect_refused({file}, "ownership");
  EXPECT_NE(message.find("70000"), std::string::npos) << message;
  TarEntry negative = TarEntry::file("etc/owned", "x");
  negative.gid = 65536;
  expect_refused({negative}, "ownership");
}

TEST_F(HostileArchive, EntryCountBombStopsAtCeiling) {
  std::vector<TarEntry> entries;
  for (int i = 0; i < 10'000; ++i) entries.push_back(TarEntry::file("f" + std::to_string(i), ""));
  ExtractionLimits limits;
  limits.max_entries = 1000;
  const std::string message = expect_refused(entries, "max_entries", limits, Compression::gzip);
  EXPECT_NE(message.find("1000"), std::string::npos) << message;
}

TEST_F(HostileArchive, GzipBombStopsAtSizeCeiling) {
  TarEntry bomb = TarEntry::file("zeros", "");
  bomb.zero_bytes = 64ULL << 20;
  ExtractionLimits limits;
  limits.max_total_bytes = 1ULL << 20;
  const auto compressed = scratch_.path("hostile.tar");
  expect_refused({bomb}, "max_total_bytes", limits, Compression::gzip);
  EXPECT_LT(std::filesystem::file_size(compressed), 1U << 20)
      << "the fixture is not a bomb: its compressed form is not smaller than the ceiling";
}

TEST_F(HostileArchive, ManySmallFilesStopAtSizeCeiling) {
  std::vector<TarEntry> entries;
  for (int i = 0; i < 40; ++i)
    entries.push_back(TarEntry::file("f" + std::to_string(i), std::string(32 << 10, 'x')));
  ExtractionLimits limits;
  limits.max_total_bytes = 1ULL << 20;
  expect_refused(entries, "max_total_bytes", limits, Compression::xz);
}

TEST_F(HostileArchive, OverlyDeepPathIsRefused) {
  std::string deep;
  for (int i = 0; i < 300; ++i) deep += "d/";
  expect_refused({TarEntry::file(deep + "f", "x")}, "paths");
}

TEST_F(HostileArchive, TruncatedArchiveIsRefusedAsUnreadable) {
  std::vector<TarEntry> entries;
  for (int i = 0; i < 200; ++i) {
    entries.push_back(TarEntry::file("f" + std::to_string(i), std::string(8192, 'a' + i % 26)));
  }
  const auto tar = scratch_.path("whole.tar");
  testing::write_tar(tar, entries, Compression::gzip);
  std::filesystem::resize_file(tar, std::filesystem::file_size(tar) / 2);
  try {
    store().import_tar(tar, "truncated");
    FAIL() << "a truncated archive was accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_EQ(error.check(), "archive") << error.what();
  }
  EXPECT_FALSE(store().find("truncated").has_value());
  EXPECT_TRUE(scratch_.incoming().empty());
}

}  // namespace
}  // namespace airlock::images
