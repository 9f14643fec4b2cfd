// The file-system sink as a guarantee: links planted in the landing root, and links raced into
// it by a concurrent thread, never carry a write outside.
#include "airlock/sinks.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <seccomp.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "airlock/errors.hpp"

namespace airlock {
namespace {

namespace fs = std::filesystem;

// A scratch directory with `root/` (the landing root) and `outside/` (where nothing may land).
class ScratchDirectory {
 public:
  ScratchDirectory() {
    std::string pattern = (fs::temp_directory_path() / "airlock-sink-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
    fs::create_directory(root());
    fs::create_directory(outside());
  }
  ~ScratchDirectory() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;

  fs::path root() const { return path_ / "root"; }
  fs::path outside() const { return path_ / "outside"; }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string read_host_file(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

Artifact artifact(std::string name, std::string content) {
  return Artifact{std::move(name), std::move(content), "test", std::nullopt};
}

std::size_t entries_under(const fs::path& directory) {
  std::size_t count = 0;
  for (auto it = fs::recursive_directory_iterator(directory); it != fs::end(it); ++it) ++count;
  return count;
}

bool has_temporary_files(const fs::path& directory) {
  for (const auto& entry : fs::recursive_directory_iterator(directory)) {
    if (entry.path().filename().string().rfind(".airlock-", 0) == 0) return true;
  }
  return false;
}

TEST(FileSystemSink, LandsBytesCreatesParentsAndReplaces) {
  ScratchDirectory scratch;
  const OutputSink sink = make_file_system_sink(scratch.root());
  const std::string binary("\0\x01\xff payload", 11);
  const LandedArtifact landed = sink.deliver(artifact("a/b/c.bin", binary));
  EXPECT_EQ(read_host_file(scratch.root() / "a/b/c.bin"), binary);
  EXPECT_EQ(landed.name, "a/b/c.bin");
  EXPECT_EQ(landed.display, "a/b/c.bin (11 bytes)");
  EXPECT_EQ(landed.handle, (scratch.root() / "a/b/c.bin").string());
  sink.deliver(artifact("a/b/c.bin", "second"));
  EXPECT_EQ(read_host_file(scratch.root() / "a/b/c.bin"), "second");
  sink.deliver(artifact("empty.txt", ""));
  EXPECT_TRUE(fs::is_regular_file(scratch.root() / "empty.txt"));
  EXPECT_FALSE(has_temporary_files(scratch.root()));
}

TEST(FileSystemSink, DisplayAndFsyncOptionsApply) {
  ScratchDirectory scratch;
  FileSystemSinkOptions options;
  options.fsync = true;
  options.display = [](const Artifact& a, const fs::path&) { return "got " + a.name; };
  const OutputSink sink = make_file_system_sink(scratch.root(), options);
  EXPECT_EQ(sink.deliver(artifact("x.txt", "x")).display, "got x.txt");
  EXPECT_EQ(read_host_file(scratch.root() / "x.txt"), "x");
}

// A kernel without openat2 (played by a seccomp filter in a child process): the sink refuses,
// keeping ENOSYS and naming the requirement, and never lands the file by a plain open instead.
TEST(FileSystemSink, AKernelWithoutOpenat2IsRefusedNamingTheRequirement) {
  ScratchDirectory scratch;
  const OutputSink sink = make_file_system_sink(scratch.root());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    scmp_filter_ctx filter = ::seccomp_init(SCMP_ACT_ALLOW);
    if (filter == nullptr ||
        ::seccomp_rule_add(filter, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(openat2), 0) != 0 ||
        ::seccomp_load(filter) != 0) {
      ::_exit(10);
    }
    for (const char* name : {"top.txt", "a/nested.txt"}) {
      try {
        sink.deliver(artifact(name, "landed"));
        ::_exit(1);
      } catch (const SystemError& refused) {
        if (refused.error_number() != ENOSYS) ::_exit(2);
        if (refused.message().find("Linux 5.6") == std::string::npos) ::_exit(3);
      } catch (...) {
        ::_exit(4);
      }
    }
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "1: it landed; 2: another errno; 3: the message does not name Linux 5.6; 4: another "
         "error type; 10: the filter could not be installed";
  EXPECT_FALSE(fs::exists(scratch.root() / "top.txt"));
  EXPECT_FALSE(fs::exists(scratch.root() / "a" / "nested.txt"));
  EXPECT_FALSE(has_temporary_files(scratch.root()));
}

TEST(FileSystemSink, CannotEscapeThroughALinkPlantedAsAParent) {
  ScratchDirectory scratch;
  fs::create_directory_symlink(scratch.outside(), scratch.root() / "linked");
  const OutputSink sink = make_file_system_sink(scratch.root());
  try {
    sink.deliver(artifact("linked/escaped.txt", "escaped"));
    FAIL() << "a write through a planted link was accepted";
  } catch (const LandingNotConfined& refused) {
    // A model may see this message: it names the artifact, never a host path.
    EXPECT_EQ(refused.message().find(scratch.path().string()), std::string::npos)
        << refused.message();
    EXPECT_NE(refused.message().find("linked/escaped.txt"), std::string::npos);
  }
  EXPECT_EQ(entries_under(scratch.outside()), 0u);
}

TEST(FileSystemSink, CannotEscapeThroughALinkDeeperInTheTree) {
  ScratchDirectory scratch;
  fs::create_directories(scratch.root() / "a/b");
  fs::create_directory_symlink(scratch.outside(), scratch.root() / "a/b/c");
  const OutputSink sink = make_file_system_sink(scratch.root());
  EXPECT_THROW(sink.deliver(artifact("a/b/c/d/e.txt", "x")), LandingNotConfined);
  EXPECT_EQ(entries_under(scratch.outside()), 0u);
}

TEST(FileSystemSink, CannotEscapeThroughADanglingLinkedParent) {
  ScratchDirectory scratch;
  fs::create_directory_symlink(scratch.outside() / "not-yet", scratch.root() / "dangling");
  const OutputSink sink = make_file_system_sink(scratch.root());
  EXPECT_THROW(sink.deliver(artifact("dangling/x.txt", "x")), LandingNotConfined);
  EXPECT_FALSE(fs::exists(scratch.outside() / "not-yet"));
}

TEST(FileSystemSink, CannotOverwriteThroughALinkPlantedAsTheDestination) {
  ScratchDirectory scratch;
  { std::ofstream(scratch.outside() / "target.txt") << "original"; }
  fs::create_symlink(scratch.outside() / "target.txt", scratch.root() / "report.txt");
  const OutputSink sink = make_file_system_sink(scratch.root());
  EXPECT_THROW(sink.deliver(artifact("report.txt", "overwritten")), LandingNotConfined);
  EXPECT_EQ(read_host_file(scratch.outside() / "target.txt"), "original");
  EXPECT_TRUE(fs::is_symlink(scratch.root() / "report.txt"));
  EXPECT_FALSE(has_temporary_files(scratch.root()));
}

TEST(FileSystemSink, AFileStandingAsAParentIsNotADirectory) {
  ScratchDirectory scratch;
  { std::ofstream(scratch.root() / "plain") << "x"; }
  const OutputSink sink = make_file_system_sink(scratch.root());
  EXPECT_THROW(sink.deliver(artifact("plain/child.txt", "x")), NotADirectory);
}

TEST(FileSystemSink, ADirectoryAtTheDestinationIsRefusedAndLeavesNoTemporaryFile) {
  ScratchDirectory scratch;
  fs::create_directories(scratch.root() / "taken/inner");
  const OutputSink sink = make_file_system_sink(scratch.root());
  EXPECT_THROW(sink.deliver(artifact("taken", "x")), IsADirectory);
  EXPECT_FALSE(has_temporary_files(scratch.root()));
}

TEST(FileSystemSink, InvalidNamesAreRefusedByTheSinkItself) {
  ScratchDirectory scratch;
  const OutputSink sink = make_file_system_sink(scratch.root());
  for (const std::string name : {"a/../b", "a//b", "./x", "", "back\\slash", "\xff.txt"}) {
    EXPECT_THROW(sink.deliver(artifact(name, "x")), ArtifactNameInvalid) << name;
  }
  EXPECT_EQ(entries_under(scratch.outside()), 0u);
  EXPECT_EQ(entries_under(scratch.root()), 0u);
}

TEST(FileSystemSink, ANameResolvingOutsideTheRootIsNotConfinedAndNamesNoHostPath) {
  ScratchDirectory scratch;
  const OutputSink sink = make_file_system_sink(scratch.root());
  for (const std::string name :
       {"../x", "../outside/x.txt", "/etc/passwd", "a/../../x", "..", "a/b/../../../x"}) {
    try {
      sink.deliver(artifact(name, "x"));
      ADD_FAILURE() << name << " landed";
    } catch (const LandingNotConfined& refusal) {
      EXPECT_EQ(refusal.check(), "landing-root");
      EXPECT_EQ(refusal.message().find(scratch.path().string()), std::string::npos)
          << refusal.message();
    } catch (const std::exception& other) {
      ADD_FAILURE() << name << ": " << other.what();
    }
  }
  EXPECT_EQ(entries_under(scratch.outside()), 0u);
  EXPECT_EQ(entries_under(scratch.root()), 0u);
}

TEST(FileSystemSink, TheRootIsHeldFromWhenTheSinkWasMade) {
  ScratchDirectory scratch;
  const OutputSink sink = make_file_system_sink(scratch.root());
  // Swap the root's path for a link to outside after the sink opened it.
  fs::rename(scratch.root(), scratch.path() / "moved");
  fs::create_directory_symlink(scratch.outside(), scratch.root());
  sink.deliver(artifact("held.txt", "held"));
  EXPECT_EQ(read_host_file(scratch.path() / "moved/held.txt"), "held");
  EXPECT_EQ(entries_under(scratch.outside()), 0u);
}

TEST(FileSystemSink, AMissingRootIsRefusedUnlessAskedToCreateIt) {
  ScratchDirectory scratch;
  EXPECT_THROW(make_file_system_sink(scratch.path() / "absent"), SystemError);
  FileSystemSinkOptions options;
  options.create_root = true;
  const OutputSink sink = make_file_system_sink(scratch.path() / "absent/deeper", options);
  sink.deliver(artifact("x.txt", "x"));
  EXPECT_EQ(read_host_file(scratch.path() / "absent/deeper/x.txt"), "x");
}

// A thread flips `race` between a real directory and a link to outside as fast as it can while
// artifacts land beneath it. Every landing either succeeds inside the root or is refused;
// nothing may ever appear outside. Both outcomes must be seen, or the race never interleaved
// and the test proved nothing.
TEST(FileSystemSink, CannotEscapeThroughALinkRacedInAsAParent) {
  ScratchDirectory scratch;
  const OutputSink sink = make_file_system_sink(scratch.root());
  const fs::path race = scratch.root() / "race";
  const fs::path spare = scratch.root() / "spare";
  fs::create_directory(race);
  fs::create_directory_symlink(scratch.outside(), spare);
  std::atomic<bool> stop{false};
  std::atomic<long> flips{0};
  // RENAME_EXCHANGE swaps the directory and the link atomically, so `race` is always one or
  // the other and flips as fast as the kernel allows.
  std::thread flipper([&] {
    while (!stop.load()) {
      if (::renameat2(AT_FDCWD, race.c_str(), AT_FDCWD, spare.c_str(), RENAME_EXCHANGE) == 0) {
        ++flips;
      }
    }
  });
  long landed = 0;
  long refused = 0;
  long other_failures = 0;
  const auto started = std::chrono::steady_clock::now();
  for (long i = 0;; ++i) {
    try {
      sink.deliver(artifact("race/f" + std::to_string(i % 50) + ".txt", "payload"));
      ++landed;
    } catch (const LandingNotConfined&) {
      ++refused;
    } catch (const SystemError&) {
      ++other_failures;  // the directory vanished under us: ENOENT, a clean failure
    }
    const bool enough = i >= 3000 && landed >= 20 && refused >= 20;
    if (enough || std::chrono::steady_clock::now() - started > std::chrono::seconds(30)) break;
  }
  stop = true;
  flipper.join();
  EXPECT_EQ(entries_under(scratch.outside()), 0u) << "a write escaped through a raced link";
  EXPECT_GT(landed, 0) << "no artifact ever landed: the race never interleaved";
  EXPECT_GT(refused, 0) << "no link was ever met: the race never interleaved";
  RecordProperty("flips", std::to_string(flips.load()));
  RecordProperty("landed", std::to_string(landed));
  RecordProperty("refused", std::to_string(refused));
  RecordProperty("other_failures", std::to_string(other_failures));
}

// The same race at the destination itself: `leaf.txt` flips between a regular file and a link
// to a file outside. The outside file's bytes must never change.
TEST(FileSystemSink, CannotOverwriteThroughALinkRacedInAsTheDestination) {
  ScratchDirectory scratch;
  const fs::path target = scratch.outside() / "target.txt";
  { std::ofstream(target) << "original"; }
  const OutputSink sink = make_file_system_sink(scratch.root());
  const fs::path leaf = scratch.root() / "leaf.txt";
  std::atomic<bool> stop{false};
  std::thread flipper([&] {
    std::error_code ignored;
    while (!stop.load()) {
      fs::remove(leaf, ignored);
      fs::create_symlink(target, leaf, ignored);
      fs::remove(leaf, ignored);
      std::ofstream(leaf) << "inside";
    }
  });
  long landed = 0;
  long refused = 0;
  const auto started = std::chrono::steady_clock::now();
  for (long i = 0;; ++i) {
    try {
      sink.deliver(artifact("leaf.txt", "overwritten"));
      ++landed;
    } catch (const LandingNotConfined&) {
      ++refused;
    } catch (const SystemError&) {
    }
    const bool enough = i >= 3000 && landed >= 20 && refused >= 20;
    if (enough || std::chrono::steady_clock::now() - started > std::chrono::seconds(30)) break;
  }
  stop = true;
  flipper.join();
  EXPECT_EQ(read_host_file(target), "original") << "a write went through a raced link";
  EXPECT_GT(landed, 0);
  EXPECT_GT(refused, 0);
  EXPECT_EQ(entries_under(scratch.outside()), 1u);
}

}  // namespace
}  // namespace airlock
