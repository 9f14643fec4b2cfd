// The file plane, attacked the way a hostile guest would: links planted in parents, in the
// working directory's ancestors, at the leaf, inside trees, and swapped in while the host works.
#include <atomic>
#include <thread>

#include "airlock/errors.hpp"
#include "linux/fixture.hpp"

namespace airlock::linux_backend::testing {
namespace {

const std::string kOutside = std::string(kWork) + "-outside";

class FilesTest : public LinuxBackendTest {
 protected:
  void SetUp() override {
    LinuxBackendTest::SetUp();
    if (IsSkipped()) return;
    sandbox_ = acquire(spec());
    // The guest's moves: a secret outside the work dir, links pointing at it.
    plant("mkdir -p " + kOutside + "/sub real && echo 'the guest must not reach this' > " +
          kOutside + "/secret.txt && echo leaf > " + kOutside + "/sub/leaf.txt && " +
          "echo 'a legitimate output' > real/inside.txt && echo 'not a directory' > plain.txt && "
          "ln -s " + kOutside + " link-dir && ln -s " + kOutside + "/secret.txt link-file && "
          "ln -s /etc link-etc");
  }
  void TearDown() override {
    sandbox_.reset();
    LinuxBackendTest::TearDown();
  }
  void plant(const std::string& line) {
    const ExecResult result = sh(*sandbox_, line);
    ASSERT_EQ(result.exit_code, 0) << line << ": " << result.stderr_bytes;
  }
  std::string guest_cat(const std::string& path) { return sh(*sandbox_, "cat " + path).stdout_bytes; }
  bool guest_exists(const std::string& path) {
    return sh(*sandbox_, "test -e " + path + " -o -L " + path).exit_code == 0;
  }

  std::shared_ptr<LinuxSandbox> sandbox_;
};

TEST_F(FilesTest, WriteLandsAndReadsBackExactly) {
  std::string binary = "\xc3\xbc" "n" "\xc3\xaf" "c" "\xc3\xb6" "d" "\xc3\xa9" "\xe2\x86\x92" "payload";
  for (int byte = 0; byte < 256; ++byte) binary.push_back(static_cast<char>(byte));
  sandbox_->write_file("real/written.bin", binary, kWork);
  EXPECT_EQ(sandbox_->read_file("real/written.bin", kWork, 1 << 20), binary);
  // The guest sees the same bytes.
  EXPECT_EQ(sh(*sandbox_, "wc -c < real/written.bin").stdout_bytes,
            std::to_string(binary.size()) + "\n");
  EXPECT_EQ(sh(*sandbox_, "cat real/written.bin").stdout_bytes, binary);
  const auto entry = sandbox_->stat_file("real/written.bin", kWork);
  ASSERT_TRUE(entry);
  EXPECT_EQ(entry->kind, EntryKind::file);
  EXPECT_EQ(entry->size_bytes, binary.size());
  EXPECT_EQ(entry->path, "real/written.bin");
}

TEST_F(FilesTest, WrittenFilesBelongToTheGuest) {
  sandbox_->write_file("deep/er/est/leaf.txt", "first", kWork);
  // The guest (root inside, an unprivileged uid outside) can change what the host put there.
  EXPECT_EQ(sh(*sandbox_, "echo more >> deep/er/est/leaf.txt && rm -r deep/er && echo ok")
                .stdout_bytes,
            "ok\n");
}

TEST_F(FilesTest, ASecondWriteReplaces) {
  sandbox_->write_file("twice.txt", "first", kWork);
  sandbox_->write_file("twice.txt", "second", kWork);
  EXPECT_EQ(guest_cat("twice.txt"), "second");
  // No temporary siblings are left behind.
  EXPECT_EQ(sh(*sandbox_, "ls -a | grep -c airlock-write || true").stdout_bytes, "0\n");
}

TEST_F(FilesTest, CannotWriteOutsideTheWorkingDirectory) {
  for (const std::string& path :
       std::vector<std::string>{"../work-outside/planted.txt", kOutside + "/planted.txt",
                                "/etc/planted.txt", "real/../../work-outside/planted.txt"}) {
    EXPECT_THROW(sandbox_->write_file(path, "x", kWork), ConfinementError) << path;
  }
  EXPECT_FALSE(guest_exists(kOutside + "/planted.txt"));
  EXPECT_THROW(sandbox_->write_file("sub\\file.txt", "x", kWork), ConfinementError);
}

TEST_F(FilesTest, CannotWriteThroughALinkedParent) {
  EXPECT_THROW(sandbox_->write_file("link-dir/landed.txt", "x", kWork), ConfinementError);
  EXPECT_FALSE(guest_exists(kOutside + "/landed.txt"));
  EXPECT_THROW(sandbox_->write_file("link-etc/landed.txt", "x", kWork), ConfinementError);
  // Parents that would have to be created under the link are refused too.
  EXPECT_THROW(sandbox_->write_file("link-dir/new/deeper.txt", "x", kWork), ConfinementError);
  EXPECT_FALSE(guest_exists(kOutside + "/new"));
}

TEST_F(FilesTest, ALinkedDestinationIsRefusedNotFollowed) {
  EXPECT_THROW(sandbox_->write_file("link-file", "overwritten", kWork), ConfinementError);
  EXPECT_EQ(guest_cat(kOutside + "/secret.txt"), "the guest must not reach this\n");
  EXPECT_EQ(sh(*sandbox_, "test -L link-file && echo still-a-link").stdout_bytes, "still-a-link\n");
}

TEST_F(FilesTest, TheWorkingDirectoryItselfIsRefused) {
  EXPECT_THROW(sandbox_->write_file(".", "x", kWork), ConfinementError);
  EXPECT_THROW(sandbox_->write_file(kWork, "x", kWork), ConfinementError);
  EXPECT_THROW(sandbox_->remove(".", kWork, false), ConfinementError);
  EXPECT_THROW(sandbox_->remove(".", kWork, true), ConfinementError);
  EXPECT_TRUE(guest_exists("real/inside.txt"));
}

TEST_F(FilesTest, ALinkedWorkingDirectoryIsRefusedByEveryMethod) {
  const std::string linked = std::string(kWork) + "/link-dir";
  EXPECT_THROW(sandbox_->write_file("landed.txt", "x", linked), ConfinementError);
  EXPECT_THROW(sandbox_->stat_file("secret.txt", linked), ConfinementError);
  EXPECT_THROW(sandbox_->read_file("secret.txt", linked, 1 << 20), ConfinementError);
  EXPECT_THROW(sandbox_->list_dir(".", linked), ConfinementError);
  EXPECT_THROW(sandbox_->remove("secret.txt", linked, false), ConfinementError);
  EXPECT_FALSE(guest_exists(kOutside + "/landed.txt"));
  EXPECT_TRUE(guest_exists(kOutside + "/secret.txt"));
}

TEST_F(FilesTest, ALinkedAncestorOfTheWorkingDirectoryIsRefusedByEveryMethod) {
  const std::string under = std::string(kWork) + "/link-dir/sub";
  EXPECT_THROW(sandbox_->write_file("landed.txt", "x", under), ConfinementError);
  EXPECT_THROW(sandbox_->stat_file("leaf.txt", under), ConfinementError);
  EXPECT_THROW(sandbox_->read_file("leaf.txt", under, 1 << 20), ConfinementError);
  EXPECT_THROW(sandbox_->list_dir(".", under), ConfinementError);
  EXPECT_THROW(sandbox_->remove("leaf.txt", under, true), ConfinementError);
  EXPECT_FALSE(guest_exists(kOutside + "/sub/landed.txt"));
  EXPECT_TRUE(guest_exists(kOutside + "/sub/leaf.txt"));
}

TEST_F(FilesTest, StatNamesALinkALink) {
  const auto entry = sandbox_->stat_file("link-file", kWork);
  ASSERT_TRUE(entry);
  EXPECT_EQ(entry->kind, EntryKind::symlink);
  EXPECT_FALSE(entry->size_bytes);
  const auto real = sandbox_->stat_file("real/inside.txt", kWork);
  ASSERT_TRUE(real);
  EXPECT_EQ(real->kind, EntryKind::file);
  EXPECT_EQ(real->size_bytes, 20u);
  EXPECT_FALSE(sandbox_->stat_file("missing.txt", kWork));
  EXPECT_FALSE(sandbox_->stat_file("missing-dir/missing.txt", kWork));
}

TEST_F(FilesTest, ALinkIsNeverRead) {
  // Refused as an OS-level refusal, not as an escape: the link's target is never looked at.
  EXPECT_THROW(
      {
        try {
          sandbox_->read_file("link-file", kWork, 1 << 20);
        } catch (const ConfinementError&) {
          ADD_FAILURE() << "a leaf link is refused as SystemError, not ConfinementError";
          throw SystemError("wrong type");
        }
      },
      SystemError);
}

TEST_F(FilesTest, ReadAndStatThroughALinkedParentAreRefused) {
  EXPECT_THROW(sandbox_->stat_file("link-dir/secret.txt", kWork), ConfinementError);
  EXPECT_THROW(sandbox_->read_file("link-dir/secret.txt", kWork, 1 << 20), ConfinementError);
  EXPECT_THROW(sandbox_->read_file("link-etc/passwd", kWork, 1 << 20), ConfinementError);
}

TEST_F(FilesTest, APlainParentIsNotADirectoryNotAnEscape) {
  EXPECT_THROW(sandbox_->stat_file("plain.txt/deeper.txt", kWork), NotADirectory);
  EXPECT_THROW(sandbox_->read_file("plain.txt/deeper.txt", kWork, 100), NotADirectory);
  EXPECT_THROW(sandbox_->write_file("plain.txt/deeper.txt", "x", kWork), NotADirectory);
  EXPECT_THROW(sandbox_->remove("plain.txt/deeper.txt", kWork, false), NotADirectory);
}

TEST_F(FilesTest, ListingNamesLinksAndRefusesLinkedDirectories) {
  const auto entries = sandbox_->list_dir(".", kWork);
  std::map<std::string, EntryKind> kinds;
  for (const auto& entry : entries) kinds[entry.path] = entry.kind;
  EXPECT_EQ(kinds["link-file"], EntryKind::symlink);
  EXPECT_EQ(kinds["link-dir"], EntryKind::symlink);
  EXPECT_EQ(kinds["real"], EntryKind::directory);
  EXPECT_EQ(kinds["plain.txt"], EntryKind::file);
  const auto nested = sandbox_->list_dir("real", kWork);
  ASSERT_EQ(nested.size(), 1u);
  EXPECT_EQ(nested[0].path, "real/inside.txt");
  EXPECT_THROW(sandbox_->list_dir("link-dir", kWork), ConfinementError);
  EXPECT_THROW(sandbox_->list_dir("link-dir/sub", kWork), ConfinementError);
  EXPECT_THROW(sandbox_->list_dir("missing", kWork), NotFound);
  EXPECT_THROW(sandbox_->list_dir("plain.txt", kWork), NotADirectory);
}

TEST_F(FilesTest, ReadRefusesPastMaxBytesWithoutReadingTheBody) {
  plant("head -c 10485760 /dev/zero > big.bin");
  try {
    sandbox_->read_file("big.bin", kWork, 1 << 20);
    FAIL() << "a file over the cap was read";
  } catch (const TransferCapExceeded& refused) {
    EXPECT_EQ(refused.limit(), 1u << 20);
    EXPECT_EQ(refused.size(), 10485760u);
    EXPECT_EQ(refused.file(), "big.bin");
  }
  EXPECT_EQ(sandbox_->read_file("big.bin", kWork, 10485760).size(), 10485760u);
}

TEST_F(FilesTest, AFifoIsNeverOpenedForReading) {
  plant("mkfifo trap");
  const auto entry = sandbox_->stat_file("trap", kWork);
  ASSERT_TRUE(entry);
  EXPECT_EQ(entry->kind, EntryKind::other);
  const auto started = std::chrono::steady_clock::now();
  EXPECT_THROW(sandbox_->read_file("trap", kWork, 100), SystemError);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5))
      << "a read of a FIFO blocked";
}

TEST_F(FilesTest, AHardLinkIsNotRead) {
  plant("echo shared > original.txt && ln original.txt hard.txt");
  const auto entry = sandbox_->stat_file("hard.txt", kWork);
  ASSERT_TRUE(entry);
  EXPECT_EQ(entry->kind, EntryKind::other);
  EXPECT_THROW(sandbox_->read_file("hard.txt", kWork, 100), SystemError);
}

TEST_F(FilesTest, RemoveUnlinksALinkNeverItsTarget) {
  plant("ln -s " + kOutside + "/secret.txt link-out && ln -s " + kOutside +
        "/secret.txt link-out-recursive && ln -s " + kOutside + " link-dir-out");
  sandbox_->remove("link-out", kWork, false);
  sandbox_->remove("link-out-recursive", kWork, true);
  sandbox_->remove("link-dir-out", kWork, true);
  EXPECT_FALSE(guest_exists("link-out"));
  EXPECT_FALSE(guest_exists("link-out-recursive"));
  EXPECT_FALSE(guest_exists("link-dir-out"));
  EXPECT_EQ(guest_cat(kOutside + "/secret.txt"), "the guest must not reach this\n");
  EXPECT_TRUE(guest_exists(kOutside + "/sub/leaf.txt"));
}

TEST_F(FilesTest, ALinkInsideARecursiveRemovalIsUnlinkedNotFollowed) {
  plant("mkdir -p tree/a/b && echo x > tree/a/b/file && ln -s " + kOutside +
        " tree/a/inside-link && ln -s " + kOutside + "/secret.txt tree/file-link");
  sandbox_->remove("tree", kWork, true);
  EXPECT_FALSE(guest_exists("tree"));
  EXPECT_EQ(guest_cat(kOutside + "/secret.txt"), "the guest must not reach this\n");
  EXPECT_TRUE(guest_exists(kOutside + "/sub/leaf.txt"));
}

TEST_F(FilesTest, RemovalRulesMatchTheProtocol) {
  sandbox_->remove("never-existed.txt", kWork, false);       // a missing path is success
  sandbox_->remove("missing-dir/never.txt", kWork, true);
  plant("mkdir -p empty full && echo x > full/x");
  EXPECT_THROW(sandbox_->remove("empty", kWork, false), IsADirectory);
  EXPECT_THROW(sandbox_->remove("full", kWork, false), IsADirectory);
  EXPECT_TRUE(guest_exists("full/x"));
  sandbox_->remove("empty", kWork, true);
  sandbox_->remove("full", kWork, true);
  EXPECT_FALSE(guest_exists("empty"));
  EXPECT_FALSE(guest_exists("full"));
  EXPECT_THROW(sandbox_->remove("link-dir/secret.txt", kWork, false), ConfinementError);
  EXPECT_THROW(sandbox_->remove("../work-outside/secret.txt", kWork, true), ConfinementError);
  EXPECT_TRUE(guest_exists(kOutside + "/secret.txt"));
}

TEST_F(FilesTest, DeepTreesAreRemoved) {
  // Deeper than the descriptors the remover holds at once: deeper levels are re-opened by name.
  plant("d=deep; for i in $(seq 1 120); do d=$d/l$i; done; mkdir -p $d && echo bottom > $d/f"
        " && ln -s " + kOutside + " $d/escape");
  sandbox_->remove("deep", kWork, true);
  EXPECT_FALSE(guest_exists("deep"));
  EXPECT_TRUE(guest_exists(kOutside + "/secret.txt"));
}

TEST_F(FilesTest, ReadOnlyPartsOfTheSandboxFailClearly) {
  try {
    sandbox_->write_file("airlock-probe", "x", "/usr");
    FAIL() << "a write under /usr succeeded";
  } catch (const SystemError& error) {
    EXPECT_EQ(error.error_number(), EROFS);
    EXPECT_NE(error.message().find("read-only"), std::string::npos) << error.message();
    EXPECT_EQ(error.message().find(state_->path().string()), std::string::npos)
        << "a host path leaked into the message";
  }
}

// The guest swaps `name` (a real directory) and `name-link` (a link to the outside directory)
// atomically, as fast as it can (renameat2 RENAME_EXCHANGE): `name` always exists, and is a
// directory one instant and a link the next.
std::string exchange_loop(const std::string& name) {
  return "python3 -c \"import ctypes, os\n"
         "libc = ctypes.CDLL(None, use_errno=True)\n"
         "os.symlink('" + kOutside + "', '" + name + "-link')\n"
         "while True: libc.renameat2(-100, b'" + name + "', -100, b'" + name + "-link', 2)\n\"";
}

TEST_F(FilesTest, ALinkSwappedInDuringReadsNeverLeaksTheOutside) {
  plant("mkdir -p flip && echo legit > flip/target.txt && echo SECRET > " + kOutside +
        "/target.txt");
  ExecOptions flipping;
  flipping.working_directory = kWork;
  flipping.timeout = std::chrono::seconds(60);
  std::stop_source stop;
  flipping.stop = stop.get_token();
  std::thread guest([&] {
    try {
      sandbox_->exec(Command::shell(exchange_loop("flip")), flipping);
    } catch (const Timeout&) {
    }
  });
  int legit = 0;
  int refused = 0;
  // Until both outcomes were seen often enough (the guest's flipper takes a moment to start).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < give_up && !(legit > 20 && refused > 20)) {
    try {
      const std::string content = sandbox_->read_file("flip/target.txt", kWork, 100);
      ASSERT_EQ(content, "legit\n") << "the outside was read through a swapped link";
      ++legit;
    } catch (const ConfinementError&) {
      ++refused;
    } catch (const NotFound&) {
    }
  }
  stop.request_stop();
  guest.join();
  EXPECT_GT(refused, 0) << "the race never put a link in the way; the test proved nothing";
  EXPECT_GT(legit, 0) << "the race never left the directory in place; the test proved nothing";
}

TEST_F(FilesTest, ALinkSwappedInDuringWritesNeverLandsOutside) {
  plant("mkdir -p flop");
  ExecOptions flipping;
  flipping.working_directory = kWork;
  flipping.timeout = std::chrono::seconds(60);
  std::stop_source stop;
  flipping.stop = stop.get_token();
  std::thread guest([&] {
    try {
      sandbox_->exec(Command::shell(exchange_loop("flop")), flipping);
    } catch (const Timeout&) {
    }
  });
  int refused = 0;
  int landed = 0;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int attempt = 0;
       std::chrono::steady_clock::now() < give_up && !(landed > 20 && refused > 20); ++attempt) {
    try {
      sandbox_->write_file("flop/landed-" + std::to_string(attempt % 7) + ".txt", "x", kWork);
      ++landed;
    } catch (const ConfinementError&) {
      ++refused;
    }
  }
  stop.request_stop();
  guest.join();
  const ExecResult outside = sh(*sandbox_, "ls " + kOutside + " | grep -c landed || true");
  EXPECT_EQ(outside.stdout_bytes, "0\n") << "a write landed outside through a swapped link";
  EXPECT_GT(refused, 0) << "the race never put a link in the way; the test proved nothing";
  EXPECT_GT(landed, 0) << "the race never left the directory in place; the test proved nothing";
}

}  // namespace
}  // namespace airlock::linux_backend::testing
