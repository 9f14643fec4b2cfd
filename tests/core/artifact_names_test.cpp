// The artifact-name invariant, NFC, collision keys and the portable rewrite.
#include <gtest/gtest.h>

#include <string>

#include "airlock/errors.hpp"
#include "airlock/outputs.hpp"

namespace airlock {
namespace {

// The rule an invalid name is refused by, or "" when it is accepted.
std::string refused_by(std::string_view name) {
  try {
    validate_artifact_name(name);
    return "";
  } catch (const ArtifactNameInvalid& invalid) {
    return invalid.check();
  }
}

std::string repeat(std::string_view unit, int times) {
  std::string out;
  for (int i = 0; i < times; ++i) out += unit;
  return out;
}

TEST(ArtifactNames, EachRuleIsNamedWhenBroken) {
  EXPECT_EQ(refused_by(""), "empty");
  EXPECT_EQ(refused_by("a\\b"), "backslash");
  EXPECT_EQ(refused_by("/etc/passwd"), "absolute");
  EXPECT_EQ(refused_by("a/../b"), "parent-segment");
  EXPECT_EQ(refused_by(".."), "parent-segment");
  EXPECT_EQ(refused_by("a//b"), "empty-segment");
  EXPECT_EQ(refused_by("a/./b"), "empty-segment");
  EXPECT_EQ(refused_by("a/"), "empty-segment");
  EXPECT_EQ(refused_by("./a"), "empty-segment");
  EXPECT_EQ(refused_by("."), "empty-segment");
  EXPECT_EQ(refused_by(std::string("a\nb")), "control-character");
  EXPECT_EQ(refused_by(std::string("a\0b", 3)), "control-character");
  EXPECT_EQ(refused_by("\xff.txt"), "utf8");
  EXPECT_EQ(refused_by(repeat("a", 256)), "length");
}

TEST(ArtifactNames, RulesAreCheckedInTheReferenceOrder) {
  // A backslash outranks a leading slash, which outranks `..`, which outranks an empty segment.
  EXPECT_EQ(refused_by("/a\\b"), "backslash");
  EXPECT_EQ(refused_by("/../a"), "absolute");
  EXPECT_EQ(refused_by("a//../b"), "parent-segment");
  EXPECT_EQ(refused_by("a//b\n"), "empty-segment");
  EXPECT_EQ(refused_by("\x01\xff"), "control-character");
  EXPECT_EQ(refused_by(repeat("\xff", 300)), "utf8");
}

TEST(ArtifactNames, OrdinaryNamesPass) {
  EXPECT_EQ(refused_by("report.pdf"), "");
  EXPECT_EQ(refused_by("out/charts/figure 1.png"), "");
  EXPECT_EQ(refused_by("...hidden"), "");
  EXPECT_EQ(refused_by("a/.b"), "");
  EXPECT_EQ(refused_by("del\x7f"), "");  // DEL is not a control character here
  EXPECT_EQ(refused_by("ünïcödé→名前.txt"), "");
  EXPECT_EQ(refused_by(repeat("a", 255)), "");
}

TEST(ArtifactNames, TheLimitCountsBytesNotCharacters) {
  EXPECT_EQ(refused_by(repeat("é", 127)), "");        // 254 bytes
  EXPECT_EQ(refused_by(repeat("é", 128)), "length");  // 256 bytes, 128 characters
}

TEST(ArtifactNames, OverlongsAndEncodedSurrogatesAreNotUtf8) {
  EXPECT_EQ(refused_by("\xc0\xaf"), "utf8");          // overlong '/'
  EXPECT_EQ(refused_by("\xed\xa0\x80"), "utf8");      // U+D800, a lone surrogate
  EXPECT_EQ(refused_by("\xf4\x90\x80\x80"), "utf8");  // past U+10FFFF
  EXPECT_EQ(refused_by("abc\xe2\x82"), "utf8");       // truncated sequence
}

TEST(ArtifactNames, NfcCanLengthenANamePastTheLimit) {
  // U+0958 is excluded from composition: NFC rewrites it as U+0915 U+093C, doubling the bytes.
  const std::string decomposable = repeat("\xe0\xa5\x98", 85);
  ASSERT_EQ(decomposable.size(), 255u);
  EXPECT_EQ(refused_by(decomposable), "");
  const std::string composed = nfc_compose(decomposable);
  EXPECT_EQ(composed.size(), 510u);
  EXPECT_EQ(refused_by(composed), "length");
}

TEST(ArtifactNames, NfcComposesAndRefusesInvalidUtf8) {
  EXPECT_EQ(nfc_compose("e\xcc\x81"), "\xc3\xa9");  // e + combining acute → é
  EXPECT_THROW(nfc_compose("\xff"), ArtifactNameInvalid);
}

TEST(ArtifactNames, CollisionKeyLowercasesButDoesNotCaseFold) {
  EXPECT_EQ(artifact_collision_key("Report.TXT"), artifact_collision_key("report.txt"));
  EXPECT_EQ(artifact_collision_key("\xc3\x89t\xc3\xa9.md"),    // Été (NFC)
            artifact_collision_key("e\xcc\x81t\xc3\xa9.md"));  // été with a combining accent
  // ß lowercases to itself; only case folding would turn it into "ss".
  EXPECT_NE(artifact_collision_key("stra\xc3\x9f"
                                   "e"),
            artifact_collision_key("strasse"));
  // The ﬁ ligature is its own lowercase; folding would expand it.
  EXPECT_NE(artifact_collision_key("\xef\xac\x81le"), artifact_collision_key("file"));
  // The Kelvin sign composes to 'K' under NFC, so it collides with 'k'.
  EXPECT_EQ(artifact_collision_key("\xe2\x84\xaa.txt"), artifact_collision_key("k.txt"));
}

TEST(ArtifactNames, PortableNameRewritesOnlyMicrosoftsDocumentedSet) {
  EXPECT_EQ(portable_name("a<b>c:d\"e|f?g*h"), "a_b_c_d_e_f_g_h");
  EXPECT_EQ(portable_name(std::string("tab\there")), "tab_here");
  EXPECT_EQ(portable_name("trailing. . "), "trailing");
  EXPECT_EQ(portable_name("CON"), "CON_");
  EXPECT_EQ(portable_name("con.txt"), "con_.txt");
  EXPECT_EQ(portable_name("dir/aux.tar.gz"), "dir/aux_.tar.gz");
  EXPECT_EQ(portable_name("com7.log"), "com7_.log");
  EXPECT_EQ(portable_name("lpt\xc2\xb9.log"), "lpt\xc2\xb9_.log");  // LPT¹
  EXPECT_EQ(portable_name("COM\xe2\x81\xb4"), "COM\xe2\x81\xb4");   // COM⁴ is legal
  EXPECT_EQ(portable_name("console.txt"), "console.txt");
  EXPECT_EQ(portable_name("a//b"), "a/_/b");
  EXPECT_EQ(portable_name("..."), "_");
  EXPECT_EQ(portable_name(""), "_");
}

TEST(ArtifactNames, PortableNameRefusesBytesThatAreNoText) {
  // The rewrite is per character: bytes that are none are refused by the encoding rule rather
  // than handed back as a name no host string can hold.
  try {
    portable_name("a\xed\xb3\xbf");  // a lone surrogate passed through as bytes
    FAIL() << "invalid UTF-8 was rewritten";
  } catch (const ArtifactNameInvalid& invalid) {
    EXPECT_EQ(invalid.check(), "utf8");
    EXPECT_NE(invalid.message().find("not encodable as UTF-8"), std::string::npos)
        << invalid.message();
  }
}

TEST(ArtifactNames, TheEncodingRuleAloneJudgesOnlyTheEncoding) {
  // A record may carry a name the other rules refuse (collect_outputs judges those later); it
  // may not carry one that is not text.
  EXPECT_NO_THROW(validate_artifact_name_encoding("../a//b"));
  EXPECT_NO_THROW(validate_artifact_name_encoding(""));
  EXPECT_THROW(validate_artifact_name_encoding("a\xed\xb3\xbf"), ArtifactNameInvalid);
  EXPECT_THROW(validate_artifact_name_encoding("\xc0\xaf"), ArtifactNameInvalid);
}

TEST(ArtifactNames, RefusalMessagesEscapeControlBytes) {
  try {
    validate_artifact_name(std::string("evil\x1b[31m\n", 10));
    FAIL() << "a control character was accepted";
  } catch (const ArtifactNameInvalid& invalid) {
    const std::string message = invalid.message();
    EXPECT_EQ(message.find('\x1b'), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_NE(message.find("\\x1b"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace airlock
