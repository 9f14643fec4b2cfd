// The file plane, through the guest helper: round trips, and links planted by the guest —
// never followed, never read, also when swapped in while the read runs.
#include <atomic>
#include <thread>

#include "airlock/errors.hpp"
#include "gvisor/fixture.hpp"

namespace airlock::gvisor_backend::testing {
namespace {

using Files = GvisorBackendTest;

TEST_F(Files, FilesRoundTripThroughTheGuest) {
  AIRLOCK_REQUIRE_GVISOR();
  auto sandbox = acquire(spec());
  std::string every_byte;
  for (int value = 0; value < 256; ++value) every_byte.push_back(static_cast<char>(value));
  sandbox->write_file("dir/bytes.bin", every_byte, kWork);
  EXPECT_EQ(sandbox->read_file("dir/bytes.bin", kWork, 256), every_byte);
  EXPECT_THROW(sandbox->read_file("dir/bytes.bin", kWork, 255), TransferCapExceeded);
  // What the host wrote, the guest sees (and the other way round).
  EXPECT_EQ(sh(*sandbox, "wc -c < dir/bytes.bin").stdout_bytes, "256\n");
  sh(*sandbox, "printf guest > dir/made-inside");
  EXPECT_EQ(sandbox->read_file("dir/made-inside", kWork, 100), "guest");
  const auto entry = sandbox->stat_file("dir/bytes.bin", kWork);
  ASSERT_TRUE(entry);
  EXPECT_EQ(entry->kind, EntryKind::file);
  EXPECT_EQ(entry->size_bytes, std::optional<std::uint64_t>(256));
  EXPECT_EQ(sandbox->list_dir("dir", kWork).size(), 2u);
  sandbox->remove("dir", kWork, true);
  EXPECT_FALSE(sandbox->stat_file("dir", kWork));
}

TEST_F(Files, LinksPlantedByTheGuestAreNeverFollowed) {
  AIRLOCK_REQUIRE_GVISOR();
  auto sandbox = acquire(spec());
  ASSERT_EQ(sh(*sandbox,
               "ln -s /etc link-etc && ln -s /etc/passwd link-passwd && "
               "ln /etc/passwd hard-passwd")
                .exit_code,
            0);
  EXPECT_THROW(sandbox->read_file("link-etc/passwd", kWork, 4096), ConfinementError);
  EXPECT_THROW(sandbox->read_file("link-passwd", kWork, 4096), SystemError);
  EXPECT_THROW(sandbox->read_file("hard-passwd", kWork, 4096), SystemError);
  EXPECT_THROW(sandbox->write_file("link-etc/planted", "x", kWork), ConfinementError);
  EXPECT_THROW(sandbox->write_file("link-passwd", "x", kWork), ConfinementError);
  EXPECT_EQ(sandbox->stat_file("link-passwd", kWork)->kind, EntryKind::symlink);
  EXPECT_EQ(sandbox->stat_file("hard-passwd", kWork)->kind, EntryKind::other);
  sandbox->remove("link-etc", kWork, true);
  EXPECT_EQ(
      sh(*sandbox, "test -f /etc/passwd && test ! -e /etc/planted && echo intact").stdout_bytes,
      "intact\n");
}

TEST_F(Files, AReadRacedAgainstALinkSwapNeverReadsThroughTheLink) {
  AIRLOCK_REQUIRE_GVISOR();
  auto sandbox = acquire(spec());
  // The guest flips `target` between a plain file and a link to /etc/passwd as fast as it can,
  // for as long as the host keeps reading it.
  ExecOptions background;
  background.working_directory = kWork;
  background.timeout = std::chrono::seconds(5);
  sandbox->exec(Command::argv({"sh", "-c",
                               "(while [ ! -e stop ]; do echo safe > t.new; mv -f t.new target; "
                               "ln -sf /etc/passwd l.new; mv -f l.new target; done) "
                               ">/dev/null 2>&1 &"}),
                background);
  int plain = 0;
  int refused = 0;
  for (int attempt = 0; attempt < 40; ++attempt) {
    try {
      const std::string got = sandbox->read_file("target", kWork, 4096);
      EXPECT_EQ(got, "safe\n") << "read through a link raced in";
      ++plain;
    } catch (const Error&) {
      ++refused;  // a link (refused), or the name briefly missing
    }
  }
  sandbox->write_file("stop", "", kWork);
  RecordProperty("plain_reads", plain);
  RecordProperty("refused_reads", refused);
  EXPECT_GT(plain + refused, 0);
  std::cout << "read race: " << plain << " plain reads, " << refused << " refused\n";
}

}  // namespace
}  // namespace airlock::gvisor_backend::testing
