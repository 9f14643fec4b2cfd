// An image archive as anyone hands it to `airlock image import`: any bytes — plain tar or any
// compression libarchive recognises — must import under the extraction limits or be refused
// with an airlock error. Nothing may land outside the scratch rootfs, which the target checks by
// keeping the rootfs in a sandbox directory of its own with a sentinel beside it.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "airlock/errors.hpp"
#include "airlock/images.hpp"
#include "fuzz_check.hpp"
#include "images/rootfs_writer.hpp"
#include "images/sources.hpp"

namespace {

namespace fs = std::filesystem;

const fs::path& scratch() {
  static const fs::path path = [] {
    std::string pattern = (fs::temp_directory_path() / "airlock-tar-fuzz-XXXXXX").string();
    FUZZ_CHECK(::mkdtemp(pattern.data()) != nullptr);
    return fs::path(pattern);
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fs::create_directories(scratch() / "outside");
  std::atexit([] {
    std::error_code ignored;
    fs::remove_all(scratch(), ignored);
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fs::path rootfs = scratch() / "rootfs";
  std::error_code error;
  fs::remove_all(rootfs, error);
  fs::create_directory(rootfs);
  const int memfd = ::memfd_create("tar-fuzz", MFD_CLOEXEC);
  FUZZ_CHECK(memfd >= 0);
  FUZZ_CHECK(::write(memfd, data, size) == static_cast<ssize_t>(size));
  FUZZ_CHECK(::lseek(memfd, 0, SEEK_SET) == 0);
  const int rootfs_fd = ::open(rootfs.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  FUZZ_CHECK(rootfs_fd >= 0);

  airlock::images::ExtractionLimits limits;
  limits.max_entries = 256;
  limits.max_total_bytes = 1 << 20;
  std::vector<std::string> notes;
  try {
    airlock::images::detail::RootfsWriter writer(
        rootfs_fd, airlock::images::OwnershipMap::caller(), limits, notes);
    writer.begin_layer(false);
    airlock::images::detail::read_tar(memfd, "fuzz.tar", writer);
    const auto summary = writer.finish();
    FUZZ_CHECK(summary.id.rfind("sha256:", 0) == 0);
    FUZZ_CHECK(summary.bytes <= limits.max_total_bytes);
  } catch (const airlock::Error&) {
    // Refused: the contract's outcome for a hostile archive.
  }
  ::close(rootfs_fd);
  ::close(memfd);
  // Nothing escaped the rootfs: its siblings are exactly what the target made.
  std::size_t siblings = 0;
  for (const auto& entry : fs::directory_iterator(scratch())) {
    (void)entry;
    ++siblings;
  }
  FUZZ_CHECK(siblings == 2);
  FUZZ_CHECK(fs::is_empty(scratch() / "outside"));
  return 0;
}
