// The allowlist's wildcard semantics: the seeds' case-insensitive fnmatch, with `*` crossing dots.
#include "egress/host_pattern.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "airlock/errors.hpp"

namespace airlock::egress {
namespace {

bool matches(const std::string& pattern, const std::string& host) {
  return host_matches(normalise_host_pattern(pattern, "test"), host);
}

TEST(EgressHostPattern, ExactPatternMatchesOnlyThatHost) {
  EXPECT_TRUE(matches("pypi.org", "pypi.org"));
  EXPECT_FALSE(matches("pypi.org", "pypi.org.evil.example"));
  EXPECT_FALSE(matches("pypi.org", "evilpypi.org"));
  EXPECT_FALSE(matches("pypi.org", "a.pypi.org"));
}

TEST(EgressHostPattern, StarMatchesAcrossDots) {
  EXPECT_TRUE(matches("*.x.com", "a.x.com"));
  EXPECT_TRUE(matches("*.x.com", "a.b.c.x.com"));
  EXPECT_TRUE(matches("files.*.example", "files.eu.west.example"));
}

TEST(EgressHostPattern, LeadingStarDotDoesNotMatchTheApex) {
  EXPECT_FALSE(matches("*.x.com", "x.com"));
  EXPECT_FALSE(matches("*.x.com", "evilx.com"));
  EXPECT_FALSE(matches("*.x.com", "x.com.evil.example"));
}

TEST(EgressHostPattern, StarWithoutADotMatchesLookalikesAsFnmatchDoes) {
  // Documented consequence of general wildcards: "*x.com" is not "x.com and its subdomains".
  EXPECT_TRUE(matches("*x.com", "evilx.com"));
  EXPECT_TRUE(matches("*x.com", "x.com"));
}

TEST(EgressHostPattern, MatchingIgnoresCase) {
  EXPECT_TRUE(matches("*.PyPI.ORG", "files.pypi.org"));
  EXPECT_EQ(normalise_host_pattern("Files.PYPI.org", "test"), "files.pypi.org");
}

TEST(EgressHostPattern, TrailingDotIsDropped) {
  EXPECT_EQ(normalise_host_pattern("pypi.org.", "test"), "pypi.org");
}

TEST(EgressHostPattern, QuestionMarkMatchesExactlyOneCharacter) {
  EXPECT_TRUE(matches("a?.x.com", "ab.x.com"));
  EXPECT_FALSE(matches("a?.x.com", "a.x.com"));
  EXPECT_FALSE(matches("a?.x.com", "abc.x.com"));
  EXPECT_TRUE(matches("a?.x.com", "a..x.com"));  // '?' matches a dot too, like fnmatch
}

TEST(EgressHostPattern, CharacterSetsMatchOneCharacterOfTheSet) {
  EXPECT_TRUE(matches("[ab].x.com", "a.x.com"));
  EXPECT_TRUE(matches("[ab].x.com", "b.x.com"));
  EXPECT_FALSE(matches("[ab].x.com", "c.x.com"));
  EXPECT_TRUE(matches("[a-c]1.x.com", "b1.x.com"));
  EXPECT_FALSE(matches("[a-c]1.x.com", "d1.x.com"));
  EXPECT_TRUE(matches("[!a].x.com", "b.x.com"));
  EXPECT_FALSE(matches("[!a].x.com", "a.x.com"));
  EXPECT_FALSE(matches("[ab].x.com", "ab.x.com"));
}

TEST(EgressHostPattern, UnclosedBracketIsALiteralCharacter) {
  EXPECT_FALSE(matches("[ab.x.com", "a.x.com"));
  EXPECT_TRUE(host_matches("[ab.x.com", "[ab.x.com"));
}

TEST(EgressHostPattern, EmptyStarRunsAndAllStarsWork) {
  EXPECT_TRUE(matches("*", "anything.example"));
  EXPECT_TRUE(matches("**.x.com", "a.x.com"));
  EXPECT_TRUE(matches("a*", "a"));
  EXPECT_FALSE(matches("a*b", "a"));
}

TEST(EgressHostPattern, PathologicalPatternsEndWithoutBacktrackingBlowUp) {
  const std::string host(253, 'a');
  EXPECT_FALSE(matches("*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b", host));
  EXPECT_TRUE(matches("*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a", host));
}

TEST(EgressHostPattern, IPv6LiteralPatternsMatchTheUnbracketedHost) {
  EXPECT_TRUE(matches("2001:db8::1", "2001:db8::1"));
  EXPECT_TRUE(matches("2001:db8::*", "2001:db8::abcd"));
}

TEST(EgressHostPattern, PatternsThatCannotNameAHostAreRefused) {
  const std::vector<std::string> cases = {
      "",       "a b.com", "a/b.com",      "user@x.com", "x.com:443",
      "x\tcom", "x.com%",  "http://x.com", ".",          std::string(1025, 'a')};
  for (const auto& bad : cases) {
    EXPECT_THROW(normalise_host_pattern(bad, "allowed_hosts"), InvalidArgument) << bad;
  }
  try {
    normalise_host_pattern("x.com:443", "allowed_hosts");
    FAIL() << "a pattern with a port was accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_EQ(error.check(), "allowed_hosts");
    EXPECT_NE(std::string(error.what()).find("port"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace airlock::egress
