// The backend kit (src/backends/kit): what linux, gvisor and docker share, proven once here.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "backends/kit/contained.hpp"
#include "backends/kit/identity_lock.hpp"
#include "backends/kit/labels.hpp"

namespace airlock::backend_kit {
namespace {

struct Scratch {
  std::filesystem::path path;
  Scratch() {
    char pattern[] = "/tmp/airlock-kit-XXXXXX";
    path = ::mkdtemp(pattern);
  }
  ~Scratch() { std::filesystem::remove_all(path); }
};

TEST(BackendKit, AnIdentityLockExcludesEveryOtherHolder) {
  Scratch scratch;
  const base::UniqueFd held = lock_identity(scratch.path, "sandbox-a", "test");
  const base::UniqueFd other(::open((scratch.path / "sandbox-a.lock").c_str(), O_RDWR | O_CLOEXEC));
  ASSERT_TRUE(other);
  EXPECT_NE(::flock(other.get(), LOCK_EX | LOCK_NB), 0) << "a second holder got the lock";
  EXPECT_EQ(errno, EWOULDBLOCK);
  const base::UniqueFd unrelated = lock_identity(scratch.path, "sandbox-b", "test");
  EXPECT_TRUE(unrelated);
}

TEST(BackendKit, AnIdentityLockIsNeverOpenedThroughAPlantedLink) {
  Scratch scratch;
  const auto target = scratch.path / "elsewhere";
  std::filesystem::create_symlink(target, scratch.path / "planted.lock");
  try {
    (void)lock_identity(scratch.path, "planted", "test");
    ADD_FAILURE() << "the lock was taken through a link";
  } catch (const BackendError& error) {
    EXPECT_EQ(error.code().value(), ELOOP) << error.detail();
    EXPECT_NE(std::string(error.what()).find("the test backend could not lock"), std::string::npos);
  }
  EXPECT_FALSE(std::filesystem::exists(target)) << "the link's target was created";
}

TEST(BackendKit, LabelQueriesMatchWhatASandboxWasStampedWith) {
  const SandboxKey key{"scope-1", "thread-1", "/agents/a"};
  Labels stamped = kind_labels(key, "codeact");
  stamped.emplace("airlock.egress", "closed");
  EXPECT_TRUE(labels_match(stamped, key_labels(key)));
  EXPECT_TRUE(labels_match(stamped, kind_labels(key, "codeact")));
  EXPECT_TRUE(labels_match(stamped, scope_labels("scope-1", std::nullopt)));
  EXPECT_TRUE(labels_match(stamped, scope_labels("scope-1", "thread-1")));
  EXPECT_FALSE(labels_match(stamped, kind_labels(key, "other")));
  EXPECT_FALSE(labels_match(stamped, scope_labels("scope-1", "thread-2")));
  EXPECT_FALSE(labels_match(stamped, key_labels(SandboxKey{"scope-2", "thread-1", "/agents/a"})));
  // A long value is stored hashed, and the query hashes it the same way.
  const std::string long_scope(200, 's');
  EXPECT_TRUE(labels_match(key_labels({long_scope, "t", "a"}), scope_labels(long_scope, "t")));
}

TEST(BackendKit, AFailureInDisposalAnswersNotDoneInsteadOfEscaping) {
  EXPECT_EQ(contained("test", "dispose_kind", false, []() -> bool {
              throw BackendError("the engine went away", "detail");
            }),
            false);
  EXPECT_EQ(contained("test", "dispose_scope", -1, []() -> int { throw std::runtime_error("x"); }),
            -1);
  EXPECT_EQ(contained("test", "dispose_scope", -1, []() -> int { throw 7; }), -1);
  EXPECT_EQ(contained("test", "dispose_scope", -1, [] { return 3; }), 3);
  bool ran = false;
  contained("test", "dispose", [&] { ran = true; });
  EXPECT_TRUE(ran);
}

}  // namespace
}  // namespace airlock::backend_kit
