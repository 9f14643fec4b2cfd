// The offline test images that scripts/build-test-images makes (busybox.tar, busybox-oci/,
// python.tar) import cleanly. They are built outside the unit tests (debootstrap takes minutes):
// scripts/test.d/15-images.sh builds them and points AIRLOCK_TEST_IMAGES at them. Without that,
// each test says SKIPPED and why.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>

#include "airlock/images.hpp"
#include "images/image_fixtures.hpp"

namespace airlock::images {
namespace {

std::filesystem::path test_image(const std::string& name) {
  const char* dir = std::getenv("AIRLOCK_TEST_IMAGES");
  if (dir == nullptr || *dir == '\0') return {};
  const std::filesystem::path path = std::filesystem::path(dir) / name;
  return std::filesystem::exists(path) ? path : std::filesystem::path();
}

#define REQUIRE_TEST_IMAGE(variable, name)                                          \
  const std::filesystem::path variable = test_image(name);                          \
  if (variable.empty()) {                                                           \
    GTEST_SKIP() << "SKIPPED: " name                                                \
                    " not found: set AIRLOCK_TEST_IMAGES to the output of "         \
                    "scripts/build-test-images (scripts/test.d/15-images.sh does)"; \
  }

// No setuid/setgid bit and no device node anywhere in the stored tree.
void expect_no_privilege(const std::filesystem::path& rootfs) {
  std::size_t checked = 0;
  for (auto it = std::filesystem::recursive_directory_iterator(rootfs);
       it != std::filesystem::recursive_directory_iterator(); ++it) {
    struct stat st {};
    ASSERT_EQ(::lstat(it->path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 06000, 0U) << it->path();
    EXPECT_FALSE(S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) << it->path();
    ++checked;
  }
  EXPECT_GT(checked, 10U);
}

TEST(TestImages, BusyboxTarImportsWithEveryAppletLinked) {
  REQUIRE_TEST_IMAGE(tar, "busybox.tar");
  testing::Scratch scratch;
  ImageStore store(scratch.store(), OwnershipMap::for_current_process());
  const ImageInfo image = store.import_tar(tar, "busybox").image;
  EXPECT_TRUE(std::filesystem::is_regular_file(image.rootfs / "bin/busybox"));
  EXPECT_EQ(std::filesystem::read_symlink(image.rootfs / "bin/sh"), "busybox");
  EXPECT_TRUE(std::filesystem::is_symlink(image.rootfs / "bin/ls"));
  EXPECT_NE(testing::read_file(image.rootfs / "etc/passwd").find("root:x:0:0"), std::string::npos);
  struct stat st {};
  ASSERT_EQ(::stat((image.rootfs / "tmp").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 01777U);
  expect_no_privilege(image.rootfs);
}

TEST(TestImages, BusyboxOciLayoutHasTheSameIdAsTheTar) {
  REQUIRE_TEST_IMAGE(tar, "busybox.tar");
  REQUIRE_TEST_IMAGE(layout, "busybox-oci");
  testing::Scratch scratch;
  ImageStore store(scratch.store(), OwnershipMap::for_current_process());
  const ImportResult from_oci = store.import_oci_layout(layout, "busybox-oci", "latest");
  const ImportResult from_tar = store.import_tar(tar, "busybox");
  EXPECT_EQ(from_oci.image.id, from_tar.image.id);
  EXPECT_FALSE(from_oci.image.source_digest.empty());
  EXPECT_FALSE(from_oci.image.config.env.empty()) << "the layout's config Env was not read";
}

TEST(TestImages, DebootstrapPythonTarImportsWithoutPrivilegeOrDevices) {
  REQUIRE_TEST_IMAGE(tar, "python.tar");
  testing::Scratch scratch;
  ImageStore store(scratch.store(), OwnershipMap::for_current_process());
  const ImportResult result = store.import_tar(tar, "python");
  const auto& rootfs = result.image.rootfs;
  EXPECT_TRUE(std::filesystem::exists(rootfs / "usr/bin/python3"));
  EXPECT_TRUE(std::filesystem::is_symlink(rootfs / "bin")) << "bookworm is merged-usr";
  EXPECT_GT(result.image.bytes, 100U << 20);
  // debootstrap leaves setuid programs (su, mount, passwd…): every one must come out plain.
  expect_no_privilege(rootfs);
  for (const auto& note : result.notes) std::cout << "  note: " << note << "\n";
}

}  // namespace
}  // namespace airlock::images
