// run_code in the python image (scripts/build-test-images python.tar, via AIRLOCK_TEST_IMAGES;
// scripts/test.d/35-gvisor.sh provides it). Also shows coreutils' statx-based tools work under
// the installed runsc (the bookworm build's did not).
#include "airlock/errors.hpp"
#include "gvisor/fixture.hpp"

namespace airlock::gvisor_backend::testing {
namespace {

using PythonImage = GvisorBackendTest;

TEST_F(PythonImage, RunCodeRunsPythonAndCoreutilsWork) {
  AIRLOCK_REQUIRE_GVISOR();
  if (!python_image_available()) {
    GTEST_SKIP() << "SKIPPED: AIRLOCK_TEST_IMAGES does not hold python.tar (run "
                    "scripts/build-test-images; scripts/test.d/35-gvisor.sh does)";
  }
  auto sandbox =
      acquire(spec("python", [](SandboxSpec::Fields& fields) { fields.image = "python"; }));
  const ExecResult ran =
      sandbox->run_code("import os, platform\nprint(platform.release())\nprint(os.getcwd())\n",
                        std::chrono::seconds(60));
  EXPECT_EQ(ran.exit_code, 0) << ran.stderr_bytes;
  EXPECT_EQ(ran.stdout_bytes, std::string("4.4.0\n") + kWork + "\n");
  const ExecResult failing = sandbox->run_code("raise SystemExit(4)", std::chrono::seconds(60));
  EXPECT_EQ(failing.exit_code, 4);
  sandbox->write_file("data.txt", "12345", kWork);
  const ExecResult tools = sh(*sandbox, "stat -c %s data.txt && ls data.txt");
  EXPECT_EQ(tools.stdout_bytes, "5\ndata.txt\n") << tools.stderr_bytes;
}

}  // namespace
}  // namespace airlock::gvisor_backend::testing
