// The pieces `airlock run` and `airlock exec` are made of, attacked directly: sizes with units,
// docker's env-file format, the -w confinement, --put trees that hold links and FIFOs, --get
// trees walked without following a link, and the caps on both.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "airlock/errors.hpp"
#include "airlock/testing.hpp"
#include "cli/exec_flags.hpp"
#include "cli/sizes.hpp"
#include "cli/transfer.hpp"

namespace airlock::cli {
namespace {

namespace fs = std::filesystem;

TEST(Sizes, TakeDockersUnitsAsPowersOf1024) {
  EXPECT_EQ(parse_size("512m", "--memory"), std::uint64_t{512} << 20);
  EXPECT_EQ(parse_size("1g", "--memory"), std::uint64_t{1} << 30);
  EXPECT_EQ(parse_size("2G", "--memory"), std::uint64_t{2} << 30);
  EXPECT_EQ(parse_size("64k", "--memory"), std::uint64_t{64} << 10);
  EXPECT_EQ(parse_size("64KB", "--memory"), std::uint64_t{64} << 10);
  EXPECT_EQ(parse_size("1.5GiB", "--memory"), std::uint64_t{3} << 29);
  EXPECT_EQ(parse_size("4mib", "--memory"), std::uint64_t{4} << 20);
  EXPECT_EQ(parse_size("1t", "--disk"), std::uint64_t{1} << 40);
  EXPECT_EQ(parse_size("100", "--memory"), 100u);
  EXPECT_EQ(parse_size("100b", "--memory"), 100u);
  EXPECT_EQ(parse_size("0.5k", "--memory"), 512u);
}

TEST(Sizes, RefuseAnythingElseByFlagAndValue) {
  try {
    parse_size("12x", "--memory");
    FAIL() << "12x was taken as a size";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.message()).find("--memory: '12x' is not a size"), std::string::npos)
        << error.message();
    EXPECT_NE(std::string(error.message()).find("use e.g. 512m or 2g"), std::string::npos);
  }
  for (const char* bad :
       {"", "m", "-1", "+1", "1 m", " 1m", "1mm", "1ibb", "1.5", "1.g", ".5g", "1e6", "0x10",
        "1kib2", "18446744073709551616", "16777216t", "17179869184g"}) {
    EXPECT_THROW(parse_size(bad, "--disk"), InvalidArgument) << "'" << bad << "'";
  }
  EXPECT_EQ(parse_size("18446744073709551615", "--disk"), 18446744073709551615ull);
}

class Scratch : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/airlock-cli-run-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    root_ = pattern;
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string write(const std::string& name, const std::string& content) {
    const fs::path path = root_ / name;
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << content;
    return path.string();
  }
  fs::path root_;
};

using EnvFile = Scratch;

TEST_F(EnvFile, ReadsDockersFormatAndLetsEOverride) {
  ::setenv("AIRLOCK_TEST_FROM_HOST", "host value", 1);
  ::unsetenv("AIRLOCK_TEST_UNSET");
  const std::string file = write("env",
                                 "# a comment\n\n  A=1\nB=two words = ok\r\n"
                                 "AIRLOCK_TEST_FROM_HOST\nAIRLOCK_TEST_UNSET\nC=\n");
  std::vector<std::string> notes;
  const auto variables =
      exec_environment({file}, {"A=override", "D=4", "AIRLOCK_TEST_UNSET"}, notes);
  const std::vector<std::pair<std::string, std::string>> expected{
      {"A", "override"},
      {"B", "two words = ok"},
      {"AIRLOCK_TEST_FROM_HOST", "host value"},
      {"C", ""},
      {"D", "4"}};
  EXPECT_EQ(variables, expected);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("AIRLOCK_TEST_UNSET"), std::string::npos);
}

TEST_F(EnvFile, NamesTheLineThatIsNoVariable) {
  const std::string file = write("env", "A=1\n# fine\nBAD NAME=1\n");
  std::vector<std::string> notes;
  try {
    exec_environment({file}, {}, notes);
    FAIL() << "a name with a space was taken";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.message()).find(file + ":3:"), std::string::npos)
        << error.message();
  }
  const std::string empty_name = write("env2", "=value\n");
  EXPECT_THROW(exec_environment({empty_name}, {}, notes), InvalidArgument);
  EXPECT_THROW(exec_environment({(root_ / "missing").string()}, {}, notes), InvalidArgument);
  EXPECT_THROW(exec_environment({}, {"=x"}, notes), InvalidArgument);
}

TEST(Workdir, IsConfinedToTheWorkDirAndNeverEntersALink) {
  auto sandbox = std::make_shared<testing::InProcessSandbox>();
  const std::string work = "/maf-sandbox/work";
  sandbox->seed_directory(work + "/existing");
  sandbox->seed_symlink(work + "/escape", "/etc");
  EXPECT_EQ(resolve_workdir(*sandbox, work, ""), work);
  EXPECT_EQ(resolve_workdir(*sandbox, work, "existing"), work + "/existing");
  EXPECT_EQ(resolve_workdir(*sandbox, work, work + "/existing"), work + "/existing");
  // Missing: created.
  EXPECT_EQ(resolve_workdir(*sandbox, work, "made/deep"), work + "/made/deep");
  ASSERT_TRUE(sandbox->stat_file("made/deep", work));
  EXPECT_EQ(sandbox->stat_file("made/deep", work)->kind, EntryKind::directory);
  EXPECT_THROW(resolve_workdir(*sandbox, work, "/etc"), ConfinementError);
  EXPECT_THROW(resolve_workdir(*sandbox, work, "../x"), ConfinementError);
  EXPECT_THROW(resolve_workdir(*sandbox, work, "/maf-sandbox/work-outside"), ConfinementError);
  EXPECT_THROW(resolve_workdir(*sandbox, work, "escape"), Error);
  EXPECT_THROW(resolve_workdir(*sandbox, work, "escape/sub"), ConfinementError);
}

using Puts = Scratch;

TEST_F(Puts, CarryATreeUnderItsGuestName) {
  write("tree/a.txt", "A");
  write("tree/sub/b.txt", "BB");
  const auto files = read_puts({(root_ / "tree").string() + "=in", write("one", "1") + "=x/one"},
                               kDefaultTransferLimits);
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0].guest_path, "in/a.txt");
  EXPECT_EQ(files[0].content, "A");
  EXPECT_EQ(files[1].guest_path, "in/sub/b.txt");
  EXPECT_EQ(files[1].content, "BB");
  EXPECT_EQ(files[2].guest_path, "x/one");
}

TEST_F(Puts, NeverFollowALinkInsideATree) {
  const std::string secret = write("secret", "not for the guest");
  write("tree/a.txt", "A");
  fs::create_symlink(secret, root_ / "tree/link");
  try {
    read_puts({(root_ / "tree").string() + "=in"}, kDefaultTransferLimits);
    FAIL() << "a link inside the tree was followed";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.message()).find("tree/link' is a link"), std::string::npos)
        << error.message();
  }
  fs::remove(root_ / "tree/link");
  fs::create_directory_symlink("/etc", root_ / "tree/dirlink");
  EXPECT_THROW(read_puts({(root_ / "tree").string() + "=in"}, kDefaultTransferLimits),
               InvalidArgument);
}

TEST_F(Puts, RefuseAFifoRatherThanBlockOnIt) {
  write("tree/a.txt", "A");
  ASSERT_EQ(::mkfifo((root_ / "tree/fifo").c_str(), 0600), 0);
  EXPECT_THROW(read_puts({(root_ / "tree").string() + "=in"}, kDefaultTransferLimits),
               InvalidArgument);
  EXPECT_THROW(read_puts({(root_ / "tree/fifo").string() + "=in"}, kDefaultTransferLimits),
               InvalidArgument);
}

TEST_F(Puts, StopAtTheCapsTheyPass) {
  for (int i = 0; i < 5; ++i) write("tree/f" + std::to_string(i), "12345");
  EXPECT_THROW(read_puts({(root_ / "tree").string() + "=in"}, TransferLimits{100, 100, 4}),
               TransferCapExceeded);
  EXPECT_THROW(read_puts({(root_ / "tree").string() + "=in"}, TransferLimits{100, 20, 10}),
               TransferCapExceeded);
  EXPECT_THROW(read_puts({(root_ / "tree").string() + "=in"}, TransferLimits{4, 100, 10}),
               TransferCapExceeded);
  EXPECT_EQ(read_puts({(root_ / "tree").string() + "=in"}, TransferLimits{5, 25, 5}).size(), 5u);
  EXPECT_THROW(read_puts({"no-equals"}, kDefaultTransferLimits), InvalidArgument);
  EXPECT_THROW(read_puts({(root_ / "missing").string() + "=x"}, kDefaultTransferLimits),
               InvalidArgument);
}

TEST(Gets, ExpandATreeToItsFilesAndSkipLinks) {
  auto sandbox = std::make_shared<testing::InProcessSandbox>();
  const std::string work = "/maf-sandbox/work";
  sandbox->seed_file(work + "/out/a.txt", "A");
  sandbox->seed_file(work + "/out/sub/b.txt", "B");
  sandbox->seed_symlink(work + "/out/link", "/etc/shadow");
  sandbox->seed_symlink(work + "/out/dirlink", "/etc");
  sandbox->seed_other(work + "/out/fifo");
  sandbox->seed_file(work + "/single", "S");
  std::vector<std::string> notes;
  const auto outputs =
      expand_gets(*sandbox, {"out", "single", "missing"}, work, kDefaultTransferLimits, notes);
  std::vector<std::string> paths;
  for (const auto& output : outputs) paths.push_back(output.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"out/a.txt", "out/sub/b.txt", "single", "missing"}));
  ASSERT_EQ(notes.size(), 3u);
  for (const auto& line : notes) EXPECT_NE(line.find("skipped"), std::string::npos) << line;
  EXPECT_THROW(expand_gets(*sandbox, {"out"}, work, TransferLimits{100, 100, 1}, notes),
               TransferCapExceeded);
}

}  // namespace
}  // namespace airlock::cli
