// The guest-path rules every backend's file plane shares, attacked lexically and with a stat
// that describes planted links.
#include "airlock/paths.hpp"

#include <gtest/gtest.h>

#include <map>

#include "airlock/errors.hpp"

namespace airlock {
namespace {

// A guest filesystem described by kind per absolute path: what an unconfined no-follow stat sees.
struct FakeGuest {
  std::map<std::string, EntryKind> entries;
  GuestStat stat() const {
    return [this](const std::string& path) -> std::optional<EntryKind> {
      auto found = entries.find(path);
      if (found == entries.end()) return std::nullopt;
      return found->second;
    };
  }
};

TEST(GuestPaths, NormalisationIsLexical) {
  EXPECT_EQ(normalize_guest_path("/a//b/./c/../d"), "/a/b/d");
  EXPECT_EQ(normalize_guest_path("/.."), "/");
  EXPECT_EQ(normalize_guest_path("/../../etc"), "/etc");
  EXPECT_EQ(normalize_guest_path("a/../../b"), "../b");
  EXPECT_EQ(normalize_guest_path(""), ".");
  EXPECT_EQ(normalize_guest_path("./"), ".");
  EXPECT_EQ(normalize_guest_path("/work/"), "/work");
}

TEST(GuestPaths, ARelativePathInsideIsConfined) {
  EXPECT_EQ(confine_guest_path("out/a.txt", "/work"), "/work/out/a.txt");
  EXPECT_EQ(confine_guest_path("/work/out/a.txt", "/work"), "/work/out/a.txt");
  EXPECT_EQ(confine_guest_path("./a/../b", "/work/"), "/work/b");
  EXPECT_EQ(confine_guest_path(".", "/work"), "/work");
}

TEST(GuestPaths, DotDotIsJudgedAfterNormalising) {
  // Looks like it stays inside, and lexically leaves.
  EXPECT_THROW(confine_guest_path("a/../../etc/passwd", "/work"), ConfinementError);
  // Looks like it leaves, and normalises back inside: allowed.
  EXPECT_EQ(confine_guest_path("../work/a", "/work"), "/work/a");
}

TEST(GuestPaths, TheSiblingPrefixIsNotInside) {
  EXPECT_THROW(confine_guest_path("/work-outside/secret.txt", "/work"), ConfinementError);
  EXPECT_THROW(confine_guest_path("../work-outside/secret.txt", "/work"), ConfinementError);
  EXPECT_EQ(guest_path_relative_to("/work-outside/x", "/work"), std::nullopt);
  EXPECT_EQ(guest_path_relative_to("/work/x", "/work"), "x");
  EXPECT_EQ(guest_path_relative_to("/work", "/work/"), "");
}

TEST(GuestPaths, AnAbsolutePathOutsideIsRefused) {
  EXPECT_THROW(confine_guest_path("/etc/passwd", "/work"), ConfinementError);
  EXPECT_THROW(confine_guest_path("/", "/work"), ConfinementError);
}

TEST(GuestPaths, ABackslashIsRefusedAsConfinementNotNotFound) {
  EXPECT_THROW(confine_guest_path("sub\\file.txt", "/work"), ConfinementError);
  EXPECT_THROW(confine_guest_path("..\\..\\etc", "/work"), ConfinementError);
}

TEST(GuestPaths, ANulByteIsRefused) {
  EXPECT_THROW(confine_guest_path(std::string("a\0b", 3), "/work"), ConfinementError);
}

TEST(GuestPaths, ARelativeWorkingDirectoryIsBadInput) {
  EXPECT_THROW(confine_guest_path("a", "work"), InvalidArgument);
  EXPECT_THROW(confine_guest_path("a", ""), InvalidArgument);
}

TEST(GuestPaths, TheChainStartsAboveTheWorkingDirectory) {
  EXPECT_EQ(guest_directory_chain("/maf/work/a/b", "/maf/work"),
            (std::vector<std::string>{"/maf", "/maf/work", "/maf/work/a", "/maf/work/a/b"}));
  EXPECT_EQ(guest_directory_chain("/maf/work", "/maf/work"),
            (std::vector<std::string>{"/maf", "/maf/work"}));
}

TEST(GuestPaths, ALinkInAParentIsRefused) {
  FakeGuest guest{{{"/work", EntryKind::directory}, {"/work/link-dir", EntryKind::symlink}}};
  EXPECT_THROW(refuse_symlinked_parents(guest.stat(), "/work/link-dir/secret.txt", "/work"),
               ConfinementError);
}

TEST(GuestPaths, ALinkAboveTheWorkingDirectoryIsRefused) {
  // The working directory's own ancestors are walked: a linked ancestor is an escape too.
  FakeGuest guest{{{"/srv", EntryKind::symlink}}};
  EXPECT_THROW(refuse_symlinked_parents(guest.stat(), "/srv/work/a.txt", "/srv/work"),
               ConfinementError);
}

TEST(GuestPaths, ALinkedWorkingDirectoryIsRefused) {
  FakeGuest guest{{{"/work", EntryKind::directory}, {"/work/link-dir", EntryKind::symlink}}};
  EXPECT_THROW(
      refuse_symlinked_parents(guest.stat(), "/work/link-dir/secret.txt", "/work/link-dir"),
      ConfinementError);
}

TEST(GuestPaths, APlainParentIsNotADirectoryNotAnEscape) {
  FakeGuest guest{{{"/work", EntryKind::directory}, {"/work/plain.txt", EntryKind::file}}};
  EXPECT_THROW(refuse_symlinked_parents(guest.stat(), "/work/plain.txt/deeper.txt", "/work"),
               NotADirectory);
}

TEST(GuestPaths, TheWalkStopsAtTheFirstMissingComponent) {
  FakeGuest guest{{{"/work", EntryKind::directory}}};
  EXPECT_NO_THROW(refuse_symlinked_parents(guest.stat(), "/work/new/deeper/leaf.txt", "/work"));
}

TEST(GuestPaths, ListingWalksThePathItself) {
  FakeGuest guest{{{"/work", EntryKind::directory}, {"/work/link-dir", EntryKind::symlink}}};
  EXPECT_NO_THROW(refuse_symlinked_parents(guest.stat(), "/work/link-dir", "/work"));
  EXPECT_THROW(refuse_symlinked_parents(guest.stat(), "/work/link-dir", "/work",
                                        /*include_self=*/true),
               ConfinementError);
}

TEST(GuestPaths, AWriteRefusesTheWorkingDirectoryItself) {
  FakeGuest guest{{{"/work", EntryKind::directory}}};
  EXPECT_THROW(confine_guest_write_path(guest.stat(), ".", "/work"), ConfinementError);
  EXPECT_THROW(confine_guest_write_path(guest.stat(), "/work/", "/work"), ConfinementError);
}

TEST(GuestPaths, AWriteRefusesALinkedDestination) {
  FakeGuest guest{{{"/work", EntryKind::directory}, {"/work/link-file", EntryKind::symlink}}};
  EXPECT_THROW(confine_guest_write_path(guest.stat(), "link-file", "/work"), ConfinementError);
}

TEST(GuestPaths, AWriteThroughALinkedParentIsRefused) {
  FakeGuest guest{{{"/work", EntryKind::directory}, {"/work/link-dir", EntryKind::symlink}}};
  EXPECT_THROW(confine_guest_write_path(guest.stat(), "link-dir/landed.txt", "/work"),
               ConfinementError);
}

TEST(GuestPaths, AnOrdinaryWriteIsAllowed) {
  FakeGuest guest{{{"/work", EntryKind::directory}, {"/work/real", EntryKind::directory}}};
  EXPECT_EQ(confine_guest_write_path(guest.stat(), "real/written.txt", "/work"),
            "/work/real/written.txt");
}

TEST(GuestPaths, AWindowsDrivePathIsRecognisedButNeverConfinedAgainst) {
  EXPECT_TRUE(is_windows_absolute_path("C:/work"));
  EXPECT_TRUE(is_windows_absolute_path("d:\\"));
  EXPECT_FALSE(is_windows_absolute_path("C:work"));  // drive-relative
  EXPECT_FALSE(is_windows_absolute_path("C:"));
  EXPECT_FALSE(is_windows_absolute_path("1:/work"));
  EXPECT_FALSE(is_windows_absolute_path("/work"));
  // The POSIX file planes refuse it as a working directory: bad input, never a crash.
  EXPECT_THROW(confine_guest_path("a.txt", "C:/work"), InvalidArgument);
  EXPECT_THROW(guest_directory_chain("C:/work/a", "C:/work"), InvalidArgument);
}

TEST(GuestPaths, QuotingNeverLeavesAWordUnquoted) {
  EXPECT_EQ(posix_quote("a b"), "'a b'");
  EXPECT_EQ(posix_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(posix_quote(""), "''");
  EXPECT_EQ(posix_join({"printf", "%s", "$(echo injected)"}), "'printf' '%s' '$(echo injected)'");
}

}  // namespace
}  // namespace airlock
