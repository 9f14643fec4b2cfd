// Records: construction rules, identity, labels, text views.
#include <gtest/gtest.h>

#include "airlock/encoding.hpp"
#include "airlock/errors.hpp"
#include "airlock/json.hpp"
#include "airlock/records.hpp"
#include "airlock/router.hpp"
#include "airlock/sandbox.hpp"
#include "airlock/testing.hpp"

namespace airlock {
namespace {

TEST(SandboxSpec, AHostListWithoutAllowlistIsRefusedAtConstruction) {
  try {
    SandboxSpec spec({.kind = "bicep", .egress_allow = {"mcr.microsoft.com"}});
    FAIL();
  } catch (const InvalidArgument& error) {
    EXPECT_NE(error.message().find("mcr.microsoft.com"), std::string::npos);
    EXPECT_EQ(error.check(), "spec.egress_allow");
  }
  EXPECT_THROW(
      SandboxSpec({.kind = "x", .egress_allow = {"a.example"}, .egress = Egress::unrestricted}),
      InvalidArgument);
  EXPECT_NO_THROW(
      SandboxSpec({.kind = "x", .egress_allow = {"a.example"}, .egress = Egress::allowlist}));
}

TEST(SandboxSpec, AnAllowlistWithNoHostsIsStillAnAllowlist) {
  // The mode is what the workload runs in; an empty list denies everything, and is not closed.
  SandboxSpec spec({.kind = "x", .egress = Egress::allowlist});
  EXPECT_EQ(spec.egress(), Egress::allowlist);
  EXPECT_EQ(spec.egress_posture(), "allowlist:");
}

TEST(SandboxSpec, BlankOrCompositeHostEntriesAreRefused) {
  for (const char* bad : {"", " ", "a.example b.example", "a.example,b.example", "a\texample"}) {
    EXPECT_THROW(SandboxSpec({.kind = "x", .egress_allow = {bad}, .egress = Egress::allowlist}),
                 InvalidArgument)
        << "'" << bad << "'";
  }
}

TEST(SandboxSpec, TheEgressPostureIsOrderAndCaseInsensitive) {
  SandboxSpec a(
      {.kind = "x", .egress_allow = {"B.example", "a.example"}, .egress = Egress::allowlist});
  SandboxSpec b({.kind = "x",
                 .egress_allow = {"a.example", "b.example", "a.example"},
                 .egress = Egress::allowlist});
  EXPECT_EQ(a.egress_posture(), b.egress_posture());
  EXPECT_EQ(SandboxSpec({.kind = "x"}).egress_posture(), "closed");
}

TEST(SandboxSpec, TheWorkDirMustBeAnAbsoluteGuestPath) {
  EXPECT_THROW(SandboxSpec({.kind = "x", .work_dir = "work"}), InvalidArgument);
  EXPECT_THROW(SandboxSpec({.kind = "x", .work_dir = "C:\\work"}), InvalidArgument);
  EXPECT_THROW(SandboxSpec({.kind = "x", .work_dir = std::string("/w\0x", 4)}), InvalidArgument);
}

TEST(SandboxSpec, AWindowsWorkDirIsAcceptedOnlyWhenTheSpecAsksForTheWindowsFamily) {
  for (const char* drive_path : {"C:/work", "D:\\work", "c:\\", "Z:/a/../b"}) {
    const SandboxSpec spec(
        {.kind = "x", .work_dir = drive_path, .requires_os_family = OsFamily::windows});
    EXPECT_EQ(spec.work_dir(), drive_path) << "a Windows path is kept exactly as written";
    EXPECT_THROW(SandboxSpec({.kind = "x", .work_dir = drive_path}), InvalidArgument) << drive_path;
    EXPECT_THROW(
        SandboxSpec({.kind = "x", .work_dir = drive_path, .requires_os_family = OsFamily::posix}),
        InvalidArgument)
        << drive_path;
  }
  // Still refused for the windows family: relative and drive-relative paths, a NUL.
  for (const std::string& bad : {std::string("work"), std::string("C:work"), std::string("C:"),
                                 std::string("\\\\server\\share"), std::string("C:/w\0x", 6)}) {
    EXPECT_THROW(
        SandboxSpec({.kind = "x", .work_dir = bad, .requires_os_family = OsFamily::windows}),
        InvalidArgument)
        << bad;
  }
  // A POSIX work dir keeps the POSIX rules whatever family is asked for.
  EXPECT_EQ(
      SandboxSpec({.kind = "x", .work_dir = "/w/./x/", .requires_os_family = OsFamily::windows})
          .work_dir(),
      "/w/x");
}

TEST(SandboxSpec, AWindowsDrivePathWithoutTheFamilySaysWhatWouldAllowIt) {
  try {
    SandboxSpec spec({.kind = "x", .work_dir = "C:/work"});
    FAIL() << "a drive path was accepted for a spec asking no family";
  } catch (const InvalidArgument& error) {
    EXPECT_EQ(error.check(), "spec.work_dir");
    EXPECT_NE(error.message().find("requires_os_family"), std::string::npos) << error.message();
  }
}

TEST(SandboxSpec, AWindowsSpecReachesTheRoutersOsFamilyCheck) {
  testing::InProcessBackendOptions options;
  options.name = "box";
  options.isolation = Isolation::container;
  options.capabilities = CapabilitySet{Capability::exec, Capability::files_in};
  options.egress_modes = EgressSet{Egress::closed};
  SandboxRouter router({std::make_shared<testing::InProcessSandboxBackend>(options)},
                       {.min_isolation = Isolation::container});
  const SandboxSpec spec(
      {.kind = "x", .work_dir = "D:\\work", .requires_os_family = OsFamily::windows});
  // The JSON wire form carries the path unchanged, both ways.
  EXPECT_EQ(json::parse_spec(json::to_json(spec), "spec").work_dir(), "D:\\work");
  try {
    router.ensure_can_serve(spec);
    FAIL() << "a windows spec was served by a backend declaring no windows guests";
  } catch (const OsFamilyNotSupported& refusal) {
    EXPECT_EQ(refusal.check(), "os-family");
    EXPECT_NE(refusal.message().find("windows"), std::string::npos) << refusal.message();
  }
  EXPECT_THROW(router.acquire({"s", "t", "a"}, spec), OsFamilyNotSupported);
}

TEST(TransferLimits, WithinHoldsLegByLeg) {
  TransferLimits ceiling{10, 100, 5};
  EXPECT_TRUE((TransferLimits{10, 100, 5}.within(ceiling)));
  EXPECT_FALSE((TransferLimits{11, 100, 5}.within(ceiling)));
  EXPECT_FALSE((TransferLimits{10, 101, 5}.within(ceiling)));
  EXPECT_FALSE((TransferLimits{10, 100, 6}.within(ceiling)));
  EXPECT_EQ(kDefaultTransferLimits.max_bytes_per_file, 8u << 20);
  EXPECT_EQ(kDefaultTransferLimits.max_total_bytes, 32u << 20);
  EXPECT_EQ(kDefaultTransferLimits.max_files, 64u);
  EXPECT_EQ(kDefaultSandboxLimits.files_in, kDefaultTransferLimits);
}

TEST(Labels, LongOrUnsafeValuesAreHashedNeverTruncated) {
  EXPECT_EQ(map_label_value("tenant-1"), "tenant-1");
  const std::string long_value(64, 'a');
  const std::string mapped = map_label_value(long_value);
  EXPECT_EQ(mapped.rfind("sha256-", 0), 0u);
  EXPECT_EQ(mapped.size(), 7u + 48u);
  // Two values sharing a 63-character prefix must not collide.
  EXPECT_NE(map_label_value(long_value + "x"), map_label_value(long_value + "y"));
  EXPECT_NE(map_label_value("a b"), "a b");
  // A raw value that already looks like a digest is hashed, so it cannot impersonate one.
  EXPECT_NE(map_label_value(mapped), mapped);
}

TEST(Labels, AStoredValueDigestsAlikeWhetherItWasStoredRawOrHashed) {
  // A short scope is stored raw; shown to a caller who may not learn it, it is digested.
  EXPECT_EQ(label_digest("tenant-1").rfind("sha256-", 0), 0u);
  EXPECT_EQ(label_digest("tenant-1").size(), 7u + 48u);
  EXPECT_EQ(stored_label_digest(map_label_value("tenant-1")), label_digest("tenant-1"));
  const std::string long_value(64, 'a');
  EXPECT_EQ(stored_label_digest(map_label_value(long_value)), label_digest(long_value));
  EXPECT_EQ(map_label_value(long_value), label_digest(long_value));
  // A raw value that looks like a digest was hashed when stored: its digest is of the raw value.
  const std::string lookalike = label_digest("x");
  EXPECT_EQ(stored_label_digest(map_label_value(lookalike)), label_digest(lookalike));
}

TEST(Identity, LengthPrefixingKeepsDistinctTuplesDistinct) {
  // Plain concatenation would make these two keys one name.
  EXPECT_NE(sandbox_identity({"ab", "c", "d"}, "k", "closed"),
            sandbox_identity({"a", "bc", "d"}, "k", "closed"));
  EXPECT_NE(sandbox_identity({"a", "b", "c"}, "k", "closed"),
            sandbox_identity({"a", "b", "c"}, "k", "allowlist:x"));
  EXPECT_EQ(sandbox_identity({"a", "b", "c"}, "k", "closed").size(), 24u);
}

TEST(Encoding, Base64RoundTripsAndRefusesNonCanonicalInput) {
  for (std::string bytes : {std::string(), std::string("f"), std::string("fo"), std::string("foo"),
                            std::string("\0\xff\x10", 3)}) {
    EXPECT_EQ(base64_decode(base64_encode(bytes)), bytes);
  }
  EXPECT_EQ(base64_decode("Zm9v\n"), std::nullopt);
  EXPECT_EQ(base64_decode("Zm=v"), std::nullopt);
  EXPECT_EQ(base64_decode("Zm9"), std::nullopt);
}

TEST(ExecResult, TextViewsReplaceInvalidUtf8AndKeepTheBytes) {
  ExecResult result;
  result.stdout_bytes = std::string("ok \xff\xfe ü", 8);
  EXPECT_EQ(result.stdout_text(), "ok \xEF\xBF\xBD\xEF\xBF\xBD ü");
  EXPECT_EQ(result.stdout_bytes.size(), 8u);
}

TEST(Command, AnArgvIsNeverAShellLine) {
  const Command argv = Command::argv({"printf", "%s", "$(echo injected)"});
  EXPECT_FALSE(argv.is_shell());
  EXPECT_EQ(argv.arguments().size(), 3u);
  const Command shell = Command::shell("exit 7");
  EXPECT_TRUE(shell.is_shell());
  EXPECT_EQ(shell.arguments(), (std::vector<std::string>{"sh", "-c", "exit 7"}));
  EXPECT_THROW(Command::argv({}), InvalidArgument);
  EXPECT_THROW(Command::argv({std::string("a\0b", 3)}), InvalidArgument);
}

TEST(SnapshotIds, OnlySnapPlusTwentyFourLowerCaseHexDigitsNamesASnapshot) {
  EXPECT_TRUE(is_snapshot_id("snap-0123456789abcdef01234567"));
  for (const std::string& id :
       {std::string("snap-0123456789ABCDEF01234567"), std::string("snap-0123456789abcdef0123456"),
        std::string("snap-0123456789abcdef012345678"), std::string("snap-../../../../etc/passwd"),
        std::string("../snap-0123456789abcdef01234567"),
        std::string("snap-0123456789abcdef0123456/"), std::string("SNAP-0123456789abcdef01234567"),
        std::string("snap-0123456789abcdef0123456") + '\0', std::string(), std::string("snap-")}) {
    EXPECT_FALSE(is_snapshot_id(id)) << id;
  }
}

}  // namespace
}  // namespace airlock
