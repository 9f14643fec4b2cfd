#include "airlock/vocabulary.hpp"

#include <gtest/gtest.h>

#include "airlock/errors.hpp"

namespace airlock {
namespace {

TEST(Vocabulary, EveryMemberRoundTripsThroughItsWireString) {
  for (Isolation rung : {Isolation::none, Isolation::runtime, Isolation::os_process,
                         Isolation::container, Isolation::hardened_container, Isolation::microvm,
                         Isolation::vm}) {
    EXPECT_EQ(parse_isolation(to_string(rung)), rung);
  }
  for (Egress mode : {Egress::unrestricted, Egress::allowlist, Egress::closed}) {
    EXPECT_EQ(parse_egress(to_string(mode)), mode);
  }
  for (Capability capability :
       {Capability::exec, Capability::run_code, Capability::host_tools, Capability::files_in,
        Capability::files_out, Capability::files_list, Capability::files_delete,
        Capability::snapshot, Capability::attached_identity}) {
    EXPECT_EQ(parse_capability(to_string(capability)), capability);
  }
  EXPECT_EQ(parse_os_family("posix"), OsFamily::posix);
  EXPECT_EQ(parse_os_family("windows"), OsFamily::windows);
  EXPECT_EQ(parse_identity("app"), Identity::app);
  EXPECT_EQ(parse_identity("user"), Identity::user);
  EXPECT_EQ(parse_source_integrity("untrusted"), SourceIntegrity::untrusted);
  EXPECT_EQ(parse_entry_kind("symlink"), EntryKind::symlink);
  EXPECT_EQ(parse_output_disposition("consume"), OutputDisposition::consume);
  EXPECT_EQ(parse_signal_outcome("unrecorded"), SignalOutcome::unrecorded);
  EXPECT_EQ(parse_signal_reach("group"), SignalReach::group);
}

TEST(Vocabulary, TheSeedsStringValuesAreExactlyTheWireValues) {
  EXPECT_EQ(to_string(Isolation::os_process), "os_process");
  EXPECT_EQ(to_string(Isolation::hardened_container), "hardened_container");
  EXPECT_EQ(to_string(Capability::files_delete), "files_delete");
  EXPECT_EQ(to_string(Capability::attached_identity), "attached_identity");
  EXPECT_EQ(to_string(Egress::unrestricted), "unrestricted");
}

TEST(Vocabulary, ProcessIsRefusedAsARungForever) {
  try {
    parse_isolation("process", "spec.min_isolation");
    FAIL() << "\"process\" was accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(error.message().find("os_process"), std::string::npos) << error.message();
    EXPECT_EQ(error.check(), "spec.min_isolation");
  }
}

TEST(Vocabulary, AnUnknownValueIsRefusedNamingTheAllowedOnes) {
  try {
    parse_egress("open", "spec.egress");
    FAIL();
  } catch (const InvalidArgument& error) {
    EXPECT_NE(error.message().find("spec.egress"), std::string::npos);
    EXPECT_NE(error.message().find("unrestricted, allowlist, closed"), std::string::npos)
        << error.message();
  }
  EXPECT_THROW(parse_capability("network"), InvalidArgument);  // removed in 0.20
  EXPECT_THROW(parse_capability("EXEC"), InvalidArgument);     // values are case-sensitive
  EXPECT_THROW(parse_os_family(""), InvalidArgument);
}

TEST(Vocabulary, TheLadderOrdersRungsWeakestFirst) {
  EXPECT_TRUE(meets_floor(Isolation::microvm, Isolation::microvm));
  EXPECT_TRUE(meets_floor(Isolation::vm, Isolation::microvm));
  EXPECT_FALSE(meets_floor(Isolation::container, Isolation::microvm));
  EXPECT_FALSE(meets_floor(Isolation::os_process, Isolation::container));
  EXPECT_TRUE(meets_floor(Isolation::runtime, Isolation::none));
  EXPECT_LT(isolation_rank(Isolation::hardened_container), isolation_rank(Isolation::microvm));
}

TEST(Vocabulary, ARungOutsideTheLadderMeetsNoFloor) {
  const auto stray = static_cast<Isolation>(42);
  EXPECT_FALSE(is_known_rung(stray));
  EXPECT_FALSE(meets_floor(stray, Isolation::none));
}

TEST(Vocabulary, SetsNameMembersSortedByStringValue) {
  CapabilitySet set{Capability::files_out, Capability::exec, Capability::files_delete};
  EXPECT_EQ(to_string(set), "[exec, files_delete, files_out]");
  EXPECT_EQ(to_string(kDefaultCapabilities), "[exec, files_in]");
  EXPECT_EQ(set.minus(kDefaultCapabilities), (CapabilitySet{Capability::files_out,
                                                            Capability::files_delete}));
  EXPECT_TRUE(CapabilitySet{}.empty());
}

}  // namespace
}  // namespace airlock
