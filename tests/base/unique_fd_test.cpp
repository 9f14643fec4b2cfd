// base::UniqueFd closes what it owns exactly once, and only what it still owns. Whether a
// descriptor is open is read from /proc/self/fd, the kernel's own table.
#include "base/unique_fd.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <type_traits>
#include <utility>

namespace airlock::base {
namespace {

bool open_in_this_process(int fd) {
  return std::filesystem::exists(
      std::filesystem::symlink_status("/proc/self/fd/" + std::to_string(fd)));
}

// A fresh descriptor of our own (/dev/null: nothing else in the test holds it).
int fresh_descriptor() {
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  return fd;
}

static_assert(!std::is_copy_constructible_v<UniqueFd> && !std::is_copy_assignable_v<UniqueFd>,
              "one owner: a copy would close the descriptor twice");
static_assert(std::is_nothrow_move_constructible_v<UniqueFd> &&
                  std::is_nothrow_move_assignable_v<UniqueFd>,
              "moves never throw (containers of descriptors rely on it)");
static_assert(!std::is_convertible_v<UniqueFd, bool> && std::is_constructible_v<bool, UniqueFd>,
              "the bool is explicit: a descriptor never turns into an integer by accident");
static_assert(!std::is_convertible_v<int, UniqueFd>, "owning a number is always spelled out");

TEST(UniqueFd, AnEmptyOneHoldsNothing) {
  const UniqueFd empty;
  EXPECT_FALSE(empty);
  EXPECT_EQ(empty.get(), -1);
}

TEST(UniqueFd, TheDescriptorIsClosedWhenItsOwnerEnds) {
  const int fd = fresh_descriptor();
  {
    const UniqueFd owner(fd);
    EXPECT_TRUE(owner);
    EXPECT_EQ(owner.get(), fd);
    EXPECT_TRUE(open_in_this_process(fd));
  }
  EXPECT_FALSE(open_in_this_process(fd));
}

TEST(UniqueFd, AMoveHandsOwnershipOverAndTheSourceClosesNothing) {
  const int fd = fresh_descriptor();
  UniqueFd target;
  {
    UniqueFd source(fd);
    UniqueFd moved(std::move(source));
    EXPECT_FALSE(source);  // NOLINT(bugprone-use-after-move): the moved-from state is the point
    EXPECT_EQ(moved.get(), fd);
    target = std::move(moved);
  }
  // Both earlier owners have ended; the descriptor is still open, held by the last one.
  EXPECT_TRUE(open_in_this_process(fd));
  EXPECT_EQ(target.get(), fd);
  target = UniqueFd();
  EXPECT_FALSE(open_in_this_process(fd));
}

TEST(UniqueFd, MoveAssignmentClosesWhatTheTargetHeldBefore) {
  const int first = fresh_descriptor();
  const int second = fresh_descriptor();
  UniqueFd target(first);
  UniqueFd source(second);
  target = std::move(source);
  EXPECT_FALSE(open_in_this_process(first));
  EXPECT_TRUE(open_in_this_process(second));
  EXPECT_EQ(target.get(), second);
}

TEST(UniqueFd, MovingOntoItselfKeepsTheDescriptor) {
  const int fd = fresh_descriptor();
  UniqueFd owner(fd);
  UniqueFd& same = owner;
  owner = std::move(same);
  EXPECT_EQ(owner.get(), fd);
  EXPECT_TRUE(open_in_this_process(fd));
}

TEST(UniqueFd, ReleaseGivesTheDescriptorUpWithoutClosingIt) {
  const int fd = fresh_descriptor();
  int released = -1;
  {
    UniqueFd owner(fd);
    released = owner.release();
    EXPECT_FALSE(owner);
  }
  EXPECT_EQ(released, fd);
  EXPECT_TRUE(open_in_this_process(fd));
  ::close(fd);
}

TEST(UniqueFd, ResetClosesTheOldDescriptorAndHoldsTheNewOne) {
  const int first = fresh_descriptor();
  const int second = fresh_descriptor();
  UniqueFd owner(first);
  owner.reset(second);
  EXPECT_FALSE(open_in_this_process(first));
  EXPECT_EQ(owner.get(), second);
  owner.reset();
  EXPECT_FALSE(open_in_this_process(second));
  EXPECT_FALSE(owner);
}

TEST(UniqueFd, ClosingLeavesTheErrnoOfTheFailureBeingReported) {
  // The idiom it protects: `if (::write(fd.get(), …) < 0) { fd.reset(); report(errno); }`.
  UniqueFd owner(fresh_descriptor());
  errno = ENOSPC;
  owner.reset();
  EXPECT_EQ(errno, ENOSPC);
  // Even when the close itself fails (a number nothing holds: EBADF).
  UniqueFd stale(1 << 20);
  errno = EDQUOT;
  stale.reset();
  EXPECT_EQ(errno, EDQUOT);
}

}  // namespace
}  // namespace airlock::base
