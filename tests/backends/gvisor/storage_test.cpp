// The gvisor backend's state directory, attacked: links planted where it keeps state.
#include <sys/stat.h>

#include <filesystem>

#include "airlock/errors.hpp"
#include "gvisor/fixture.hpp"

namespace airlock::gvisor_backend::testing {
namespace {

using Storage = GvisorBackendTest;

// root never follows a link it did not make where it keeps state: a link in place of the
// backend's own directory, or of one beneath it, is refused before anything is made through it.
TEST_F(Storage, LinksPlantedInTheStateDirectoryAreRefused) {
  AIRLOCK_REQUIRE_GVISOR();
  for (const char* planted : {"gvisor", "gvisor/sandboxes", "gvisor/egress"}) {
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

}  // namespace
}  // namespace airlock::gvisor_backend::testing
