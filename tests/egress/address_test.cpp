// Which destinations are "global": every internal, reserved and embedded-internal form refused.
#include "egress/address.hpp"

#include <gtest/gtest.h>

#include <string>

#include "airlock/egress.hpp"
#include "airlock/errors.hpp"
#include "airlock/records.hpp"
#include "egress/policy.hpp"

namespace airlock::egress {
namespace {

std::optional<std::string> reason_for(const std::string& text) {
  const auto address = IpAddress::parse(text);
  EXPECT_TRUE(address.has_value()) << text;
  return address ? nonglobal_reason(*address) : std::nullopt;
}

TEST(EgressAddress, EveryNonGlobalIPv4BlockIsRefusedAtBothEnds) {
  for (const char* text :
       {"0.0.0.0",         "0.255.255.255",   "10.0.0.0",        "10.255.255.255",
        "100.64.0.0",      "100.127.255.255", "127.0.0.1",       "127.255.255.254",
        "169.254.0.1",     "169.254.169.254", "169.254.255.255", "172.16.0.0",
        "172.31.255.255",  "192.0.0.1",       "192.0.0.255",     "192.0.2.1",
        "192.88.99.1",     "192.168.0.1",     "192.168.255.255", "198.18.0.0",
        "198.19.255.255",  "198.51.100.7",    "203.0.113.9",     "224.0.0.1",
        "239.255.255.255", "240.0.0.1",       "255.255.255.255"}) {
    EXPECT_TRUE(reason_for(text).has_value()) << text << " was judged global";
  }
}

TEST(EgressAddress, NeighboursOfTheRefusedBlocksAreGlobal) {
  for (const char* text :
       {"1.1.1.1", "8.8.8.8", "9.255.255.255", "11.0.0.0", "100.63.255.255", "100.128.0.0",
        "126.255.255.255", "128.0.0.0", "169.253.255.255", "169.255.0.0", "172.15.255.255",
        "172.32.0.0", "192.0.1.0", "192.167.255.255", "192.169.0.0", "198.17.255.255", "198.20.0.0",
        "223.255.255.255"}) {
    EXPECT_EQ(reason_for(text), std::nullopt) << text << " was refused";
  }
}

TEST(EgressAddress, TheMetadataEndpointIsNamedAsSuch) {
  const auto reason = reason_for("169.254.169.254");
  ASSERT_TRUE(reason);
  EXPECT_NE(reason->find("metadata"), std::string::npos) << *reason;
}

TEST(EgressAddress, EveryNonGlobalIPv6BlockIsRefused) {
  for (const char* text : {"::",      "::1",     "::127.0.0.1",      "::8.8.8.8",    "64:ff9b:1::1",
                           "100::1",  "2001::1", "2001:1ff:ffff::1", "2001:db8::1",  "3fff::1",
                           "5f00::1", "fc00::1", "fdff:ffff::1",     "fe80::1",      "febf::1",
                           "fec0::1", "ff02::1", "4000::1",          "1fff:ffff::1", "e000::1"}) {
    EXPECT_TRUE(reason_for(text).has_value()) << text << " was judged global";
  }
}

TEST(EgressAddress, GlobalUnicastIPv6Passes) {
  for (const char* text :
       {"2606:4700:4700::1111", "2a00:1450:4001::1", "2001:200::1", "2400:cb00::1", "3ffe::1"}) {
    EXPECT_EQ(reason_for(text), std::nullopt) << text << " was refused";
  }
}

TEST(EgressAddress, IPv6FormsEmbeddingAnInternalIPv4AddressAreRefused) {
  for (const char* text : {"::ffff:127.0.0.1", "::ffff:169.254.169.254", "::ffff:10.1.2.3",
                           "::ffff:0.0.0.0", "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe",
                           "2002:7f00:1::1", "2002:a9fe:a9fe::1", "2002:c0a8:0101::1"}) {
    EXPECT_TRUE(reason_for(text).has_value()) << text << " was judged global";
  }
  for (const char* text : {"::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1"}) {
    EXPECT_EQ(reason_for(text), std::nullopt) << text << " was refused";
  }
}

TEST(EgressAddress, MappedAddressesUnmapToTheIPv4AddressTheyName) {
  const auto mapped = IpAddress::parse("::ffff:127.0.0.1");
  ASSERT_TRUE(mapped);
  EXPECT_EQ(mapped->unmapped(), IpAddress::v4(127, 0, 0, 1));
  EXPECT_EQ(mapped->unmapped().to_string(), "127.0.0.1");
}

TEST(EgressAddress, LiteralParsingRefusesResolverShorthands) {
  for (const char* text : {"127.1", "0x7f000001", "0x7f.0.0.1", "2130706433", "127.0.0.1.",
                           " 127.0.0.1", "127.0.0.1 ", "[::1]", "fe80::1%lo", "1.2.3.4/8", ""}) {
    EXPECT_FALSE(IpAddress::parse(text).has_value()) << text;
  }
}

TEST(EgressAddress, CidrRangesParseStrictly) {
  const IpRange loopback = IpRange::parse("127.0.0.0/8", "t");
  EXPECT_TRUE(loopback.contains(IpAddress::v4(127, 9, 9, 9)));
  EXPECT_FALSE(loopback.contains(IpAddress::v4(128, 0, 0, 1)));
  EXPECT_FALSE(loopback.contains(*IpAddress::parse("::1")));
  const IpRange single = IpRange::parse("::1", "t");
  EXPECT_EQ(single.prefix_length, 128u);
  EXPECT_TRUE(single.contains(*IpAddress::parse("::1")));
  EXPECT_TRUE(IpRange::parse("0.0.0.0/0", "t").contains(IpAddress::v4(8, 8, 8, 8)));
  for (const char* bad : {"10.0.0.1/8", "1.2.3.4/33", "::/129", "x/8", "10.0.0.0/", "10.0.0.0/-1",
                          "10.0.0.0/8/8", "", "127.1/8"}) {
    EXPECT_THROW(IpRange::parse(bad, "allow_nonglobal_for_tests"), InvalidArgument) << bad;
  }
}

TEST(EgressAddress, TheTestKnobAdmitsOnlyItsOwnRanges) {
  EgressPolicy policy;
  policy.allow_nonglobal_for_tests = {"127.0.0.0/8"};
  const auto compiled = CompiledPolicy::compile(policy);
  EXPECT_EQ(compiled.address_refusal(IpAddress::v4(127, 0, 0, 1)), std::nullopt);
  EXPECT_EQ(compiled.address_refusal(*IpAddress::parse("::ffff:127.0.0.1")), std::nullopt);
  EXPECT_TRUE(compiled.address_refusal(IpAddress::v4(10, 0, 0, 1)));
  EXPECT_TRUE(compiled.address_refusal(IpAddress::v4(169, 254, 169, 254)));
  EXPECT_TRUE(compiled.address_refusal(*IpAddress::parse("::1")));

  const auto strict = CompiledPolicy::compile(EgressPolicy{});
  EXPECT_TRUE(strict.address_refusal(IpAddress::v4(127, 0, 0, 1)));
}

TEST(EgressPolicyCheck, InvalidPoliciesAreRefusedNamingTheField) {
  const auto refused_field = [](EgressPolicy policy) -> std::string {
    try {
      CompiledPolicy::compile(policy);
    } catch (const InvalidArgument& error) {
      return error.check();
    }
    return "accepted";
  };
  EgressPolicy policy;
  policy.allowed_hosts = {"ok.example", "bad host"};
  EXPECT_EQ(refused_field(policy), "allowed_hosts");
  policy = {};
  policy.allowed_ports = {};
  EXPECT_EQ(refused_field(policy), "allowed_ports");
  policy.allowed_ports = {443, 0};
  EXPECT_EQ(refused_field(policy), "allowed_ports");
  policy = {};
  policy.allow_nonglobal_for_tests = {"127.0.0.1/8"};
  EXPECT_EQ(refused_field(policy), "allow_nonglobal_for_tests");
  policy = {};
  policy.header_timeout = std::chrono::milliseconds(0);
  EXPECT_EQ(refused_field(policy), "header_timeout");
  policy = {};
  policy.max_connections = 0;
  EXPECT_EQ(refused_field(policy), "max_connections");
  policy = {};
  policy.max_header_bytes = 10;
  EXPECT_EQ(refused_field(policy), "max_header_bytes");
  EXPECT_EQ(refused_field(EgressPolicy{}), "accepted");
}

TEST(EgressPolicyCheck, PolicyForASpecTakesItsHostsAndRefusesOtherPostures) {
  SandboxSpec::Fields fields;
  fields.kind = "codeact";
  fields.egress_allow = {"pypi.org", "*.pythonhosted.org"};
  fields.egress = Egress::allowlist;
  const SandboxSpec allowlisted(fields);
  const EgressPolicy policy = EgressPolicy::for_spec(allowlisted);
  EXPECT_EQ(policy.allowed_hosts, (std::vector<std::string>{"pypi.org", "*.pythonhosted.org"}));
  EXPECT_EQ(policy.allowed_ports, (std::vector<std::uint16_t>{443}));
  EXPECT_TRUE(policy.allow_nonglobal_for_tests.empty());
  SandboxSpec::Fields closed;
  closed.kind = "codeact";
  EXPECT_THROW(EgressPolicy::for_spec(SandboxSpec(closed)), InvalidArgument);
}

}  // namespace
}  // namespace airlock::egress
