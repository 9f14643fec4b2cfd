// Directory images: an overlay over a rootfs, writes landing in the sandbox's own storage.
#include <fstream>
#include <thread>

#include "airlock/errors.hpp"
#include "airlock/images.hpp"
#include "backends/linux/state_store.hpp"
#include "linux/fixture.hpp"

namespace airlock::linux_backend::testing {
namespace {

class ImagesTest : public LinuxBackendTest {
 protected:
  void SetUp() override {
    LinuxBackendTest::SetUp();
    if (IsSkipped()) return;
    images_ = std::make_unique<TemporaryDirectory>("airlock-linux-image");
    rootfs_ = make_busybox_rootfs(images_->path(), LinuxBackendConfig{}.uid_base);
    if (!rootfs_) GTEST_SKIP() << "SKIPPED: busybox-static is not installed (/bin/busybox)";
  }
  SandboxSpec image_spec(const std::string& kind = "busybox") {
    return spec(kind, [&](SandboxSpec::Fields& fields) { fields.image = rootfs_->string(); });
  }
  std::unique_ptr<TemporaryDirectory> images_;
  std::optional<std::filesystem::path> rootfs_;
};

TEST_F(ImagesTest, ARootfsDirectoryRunsCommands) {
  auto sandbox = acquire(image_spec());
  const ExecResult result = sh(*sandbox, "ls /bin | grep -c . ; cat /etc/passwd; id -u; pwd");
  ASSERT_EQ(result.exit_code, 0) << result.stderr_bytes;
  EXPECT_NE(result.stdout_bytes.find("root:x:0:0:root:/root:/bin/sh"), std::string::npos);
  EXPECT_NE(result.stdout_bytes.find(std::string(kWork)), std::string::npos);
  // No host files: the host's /etc/hostname and /usr/lib are not there.
  EXPECT_NE(sh(*sandbox, "test -e /usr/lib/os-release").exit_code, 0);
}

TEST_F(ImagesTest, WritesLandInTheSandboxNotTheImage) {
  auto sandbox = acquire(image_spec());
  ASSERT_EQ(sh(*sandbox, "echo changed > /etc/passwd && rm /bin/vi && echo new > /new-file")
                .exit_code,
            0);
  std::ifstream passwd(*rootfs_ / "etc" / "passwd");
  std::string first_line;
  std::getline(passwd, first_line);
  EXPECT_EQ(first_line, "root:x:0:0:root:/root:/bin/sh");
  EXPECT_TRUE(std::filesystem::is_symlink(*rootfs_ / "bin" / "vi"));
  EXPECT_FALSE(std::filesystem::exists(*rootfs_ / "new-file"));
  // A second sandbox of the same image starts from the pristine image.
  auto other = acquire(image_spec("busybox-2"));
  EXPECT_EQ(sh(*other, "head -1 /etc/passwd").stdout_bytes, "root:x:0:0:root:/root:/bin/sh\n");
}

TEST_F(ImagesTest, TheFilePlaneWorksOnImages) {
  auto sandbox = acquire(image_spec());
  sandbox->write_file("hello.txt", "from the host", kWork);
  EXPECT_EQ(sh(*sandbox, "cat hello.txt").stdout_bytes, "from the host");
  ASSERT_EQ(sh(*sandbox, "ln -s /etc link-etc && echo guest > out.txt").exit_code, 0);
  EXPECT_EQ(sandbox->read_file("out.txt", kWork, 100), "guest\n");
  EXPECT_THROW(sandbox->read_file("link-etc/passwd", kWork, 100), ConfinementError);
  EXPECT_THROW(sandbox->write_file("link-etc/planted", "x", kWork), ConfinementError);
  // The root of an image is writable (an overlay), so the file plane may write anywhere in it.
  sandbox->write_file("opt/tool.cfg", "x", "/");
  EXPECT_EQ(sh(*sandbox, "cat /opt/tool.cfg").stdout_bytes, "x");
}

TEST_F(ImagesTest, TestProgramsRunInAnImageWithoutALibrary) {
  auto sandbox = acquire(image_spec());
  const std::string maker = install_testcase(*sandbox, "zombie_maker");
  EXPECT_EQ(sh(*sandbox, maker + " 5").exit_code, 0);
}

TEST_F(ImagesTest, AStoredImageRunsAndStaysPinnedWhileInUse) {
  images::ImageStore store(state_->path() / "images",
                           images::OwnershipMap::for_current_process(LinuxBackendConfig{}.uid_base));
  // The store takes a rootfs as the image describes it (root-owned), and stores it shifted.
  TemporaryDirectory source("airlock-linux-image-source");
  const auto unshifted = make_busybox_rootfs(source.path(), 0);
  ASSERT_TRUE(unshifted);
  store.import_directory(*unshifted, "busybox");
  {
    auto sandbox = acquire(spec("stored", [](SandboxSpec::Fields& fields) {
      fields.image = "busybox";
    }));
    const ExecResult result = sh(*sandbox, "id -u; stat -c %u /bin/busybox; echo x > /bin/new");
    EXPECT_EQ(result.stdout_bytes, "0\n0\n") << result.stderr_bytes;
    EXPECT_NE(sandbox->record().image.find("busybox:latest (sha256:"), std::string::npos)
        << sandbox->record().image;
    // In use: the store refuses to remove it.
    EXPECT_THROW(store.remove("busybox"), InvalidArgument);
    backend_->dispose(key_);
  }
  // The pin went with the sandbox's init.
  for (int attempt = 0; attempt < 50; ++attempt) {
    try {
      store.remove("busybox");
      break;
    } catch (const InvalidArgument&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  EXPECT_FALSE(store.find("busybox"));
}

TEST_F(ImagesTest, AnUnknownImageNamesTheStoreAndHowToImport) {
  try {
    acquire(spec("unknown", [](SandboxSpec::Fields& fields) { fields.image = "nonesuch:1.0"; }));
    FAIL() << "an unknown image was accepted";
  } catch (const InvalidArgument& refused) {
    EXPECT_NE(refused.message().find("airlock image import"), std::string::npos)
        << refused.message();
  }
  EXPECT_TRUE(StateStore(state_->path()).ids().empty());
}

TEST_F(ImagesTest, AnImageThatIsNotADirectoryIsRefused) {
  EXPECT_THROW(acquire(spec("missing", [](SandboxSpec::Fields& fields) {
                 fields.image = "/nonexistent/rootfs";
               })),
               InvalidArgument);
  EXPECT_THROW(acquire(spec("commas", [](SandboxSpec::Fields& fields) {
                 fields.image = "/tmp/a,upperdir=/etc";
               })),
               InvalidArgument);
}

}  // namespace
}  // namespace airlock::linux_backend::testing
