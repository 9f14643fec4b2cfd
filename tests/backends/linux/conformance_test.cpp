// The shared conformance suites, run against the linux backend: every probe, none skipped (the
// backend declares every capability the suites need), each suite on a fresh sandbox.
#include "airlock/conformance.hpp"
#include "linux/fixture.hpp"

namespace airlock::linux_backend::testing {
namespace {

class ConformanceTest : public LinuxBackendTest {
 protected:
  using Suite = std::vector<conformance::ProbeResult> (*)(conformance::ConformanceSubject&);

  void expect_suite_passes(const std::string& kind, Suite suite) {
    auto sandbox = acquire(spec(kind));
    conformance::PosixGuestSubject subject(*sandbox, kWork, *backend_->capabilities(),
                                           std::chrono::seconds(30));
    std::vector<conformance::ProbeResult> results;
    try {
      results = suite(subject);
    } catch (const ConformanceFailure& failure) {
      for (const auto& failed : failure.failures()) {
        ADD_FAILURE() << failed.probe << " (" << failed.why << "): " << failed.failure;
      }
      return;
    }
    EXPECT_FALSE(results.empty());
    for (const auto& result : results) {
      EXPECT_EQ(result.outcome, conformance::ProbeOutcome::passed)
          << result.suite << "/" << result.probe << ": " << result.detail;
    }
  }
};

TEST_F(ConformanceTest, FilesOutSuitePasses) {
  expect_suite_passes("conformance-files-out", conformance::assert_files_out_conformance);
}

TEST_F(ConformanceTest, FilesInSuitePasses) {
  expect_suite_passes("conformance-files-in", conformance::assert_files_in_conformance);
}

TEST_F(ConformanceTest, FilesDeleteSuitePasses) {
  expect_suite_passes("conformance-files-delete", conformance::assert_files_delete_conformance);
}

TEST_F(ConformanceTest, ExecSuitePasses) {
  expect_suite_passes("conformance-exec", conformance::assert_exec_conformance);
}

}  // namespace
}  // namespace airlock::linux_backend::testing
