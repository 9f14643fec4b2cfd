// The CONNECT request head: strict parsing, early refusal, and a ceiling on its size.
#include "egress/request_head.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace airlock::egress {
namespace {

RequestHead parse(const std::string& head) {
  return parse_request_head(head);
}

RequestHead parse_target(const std::string& target) {
  return parse("CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n");
}

TEST(EgressRequestHead, AcceptsAWellFormedConnect) {
  const auto head = parse(
      "CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n"
      "User-Agent: curl/7.88.1\r\nProxy-Connection: Keep-Alive\r\n\r\n");
  ASSERT_EQ(head.problem, HeadProblem::none) << head.why;
  EXPECT_EQ(head.target.host, "pypi.org");
  EXPECT_EQ(head.target.port, 443);
  EXPECT_FALSE(head.target.literal);
}

TEST(EgressRequestHead, AcceptsHttp10AndAnAbsentHostHeader) {
  const auto head = parse("CONNECT pypi.org:8443 HTTP/1.0\r\n\r\n");
  ASSERT_EQ(head.problem, HeadProblem::none) << head.why;
  EXPECT_EQ(head.target.port, 8443);
}

TEST(EgressRequestHead, FoldsCaseAndDropsOneTrailingDot) {
  const auto head = parse_target("Files.PyPI.ORG.:443");
  ASSERT_EQ(head.problem, HeadProblem::none) << head.why;
  EXPECT_EQ(head.target.host, "files.pypi.org");
}

TEST(EgressRequestHead, RecognisesIpLiterals) {
  const auto v4 = parse_target("192.0.2.7:443");
  ASSERT_EQ(v4.problem, HeadProblem::none) << v4.why;
  ASSERT_TRUE(v4.target.literal);
  EXPECT_EQ(v4.target.literal->to_string(), "192.0.2.7");

  const auto v6 = parse_target("[2001:DB8:0::1]:443");
  ASSERT_EQ(v6.problem, HeadProblem::none) << v6.why;
  ASSERT_TRUE(v6.target.literal);
  EXPECT_EQ(v6.target.host, "2001:db8::1");
  EXPECT_EQ(v6.target.port, 443);
}

TEST(EgressRequestHead, RefusesEveryMalformedTarget) {
  const std::vector<std::string> cases = {"pypi.org",
                                          "pypi.org:",
                                          "pypi.org:0",
                                          "pypi.org:65536",
                                          "pypi.org:99999",
                                          "pypi.org:0443",
                                          "pypi.org:+443",
                                          "pypi.org:44a",
                                          "pypi.org:-1",
                                          ":443",
                                          "user@pypi.org:443",
                                          "user:secret@pypi.org:443",
                                          "pypi.org:443@evil.example:443",
                                          "2001:db8::1:443",
                                          "[2001:db8::1]",
                                          "[2001:db8::1]443",
                                          "[2001:db8::1]:",
                                          "[fe80::1%25eth0]:443",
                                          "[fe80::1%eth0]:443",
                                          "[127.0.0.1]:443",
                                          "[not-an-address]:443",
                                          "pypi.org:443:443",
                                          "pypi.org/simple:443",
                                          "-pypi.org:443",
                                          "pypi-.org:443",
                                          "pypi..org:443",
                                          ".pypi.org:443",
                                          "pypi.org..:443",
                                          "py%70i.org:443",
                                          "py*.org:443",
                                          "py\"pi.org:443",
                                          std::string(254, 'a') + ":443",
                                          std::string(64, 'a') + ".org:443",
                                          "127.1:443",
                                          "0x7f.0.0.1:443",
                                          "0x7f000001:443",
                                          "2130706433:443",
                                          "0177.0.0.1:443",
                                          "127.0.0.01:443",
                                          "1.2.3.04:443"};
  for (const auto& target : cases) {
    const auto head = parse_target(target);
    EXPECT_EQ(head.problem, HeadProblem::malformed) << "accepted: " << target;
    EXPECT_FALSE(head.why.empty()) << target;
  }
}

TEST(EgressRequestHead, AcceptsTheLongestLegalHost) {
  std::string host;
  while (host.size() + 64 <= 253) host += std::string(63, 'a') + ".";
  host += std::string(253 - host.size(), 'b');
  ASSERT_EQ(host.size(), 253u);
  const auto head = parse_target(host + ":443");
  EXPECT_EQ(head.problem, HeadProblem::none) << head.why;
}

TEST(EgressRequestHead, RefusesOtherMethodsAsNotAllowed) {
  for (const char* line : {"GET http://pypi.org/ HTTP/1.1", "POST / HTTP/1.1",
                           "connect pypi.org:443 HTTP/1.1", "PRI * HTTP/1.1"}) {
    const auto head = parse(std::string(line) + "\r\n\r\n");
    EXPECT_EQ(head.problem, HeadProblem::method_not_allowed) << line << ": " << head.why;
  }
}

TEST(EgressRequestHead, RefusesMalformedRequestLines) {
  for (const char* line : {"CONNECT  pypi.org:443 HTTP/1.1", "CONNECT pypi.org:443",
                           "CONNECT pypi.org:443 HTTP/2.0", "CONNECT pypi.org:443 HTTP/1.1 extra",
                           "CONNECT\tpypi.org:443\tHTTP/1.1", " CONNECT pypi.org:443 HTTP/1.1",
                           "CONNECT pypi.org:443 HTTP/1.1 ", "CONNECT pypi.org:443 http/1.1", "",
                           "CONNECT pypi.org:443 HTTP/1.1\x01", "C(NNECT pypi.org:443 HTTP/1.1"}) {
    const auto head = parse(std::string(line) + "\r\n\r\n");
    EXPECT_EQ(head.problem, HeadProblem::malformed) << "accepted: " << line;
  }
}

TEST(EgressRequestHead, RefusesMalformedHeaderLines) {
  const std::vector<std::string> cases = {" folded: continuation\r\n",
                                          "Host: a\r\n\tfolded\r\n",
                                          "Host : pypi.org\r\n",
                                          "NoColon\r\n",
                                          ": empty-name\r\n",
                                          "Bad\x01Name: x\r\n",
                                          "X: value\x7f\r\n",
                                          "X: a\rb\r\n",
                                          "X: a\nb\r\n",
                                          std::string("X: \0\r\n", 6),
                                          "Host: a\r\n\r\nSmuggled: b\r\n"};
  for (const auto& fields : cases) {
    const std::string head = "CONNECT pypi.org:443 HTTP/1.1\r\n" + fields + "\r\n";
    const auto parsed = parse(head);
    EXPECT_EQ(parsed.problem, HeadProblem::malformed) << "accepted: " << fields;
  }
}

TEST(EgressRequestHead, HeaderValuesMayCarryTabsAndHighBytes) {
  const auto head = parse("CONNECT pypi.org:443 HTTP/1.1\r\nX-A:\tv\xc3\xa9 w \r\nX-B:\r\n\r\n");
  EXPECT_EQ(head.problem, HeadProblem::none) << head.why;
}

// ---- the incremental reader ----------------------------------------------------------------

TEST(EgressRequestHeadReader, CompletesAndKeepsTheBytesAfterTheHead) {
  RequestHeadReader reader(8192);
  const std::string tunnel_bytes("\x16\x03\x01\x00\x00 binary\r\n\r\n", 17);
  EXPECT_EQ(reader.feed("CONNECT pypi.org:443 HTTP/1.1\r\n\r\n" + tunnel_bytes),
            RequestHeadReader::State::complete);
  EXPECT_EQ(reader.result().target.host, "pypi.org");
  EXPECT_EQ(reader.leftover(), tunnel_bytes);
}

TEST(EgressRequestHeadReader, ChunkingDoesNotChangeTheOutcome) {
  const std::string head = "CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n";
  const std::string stream = head + "EARLY";
  for (std::size_t chunk = 1; chunk <= stream.size(); ++chunk) {
    RequestHeadReader reader(8192);
    std::size_t fed = 0;
    while (fed < stream.size() && reader.state() == RequestHeadReader::State::need_more) {
      reader.feed(std::string_view(stream).substr(fed, chunk));
      fed = std::min(fed + chunk, stream.size());
    }
    ASSERT_EQ(reader.state(), RequestHeadReader::State::complete) << "chunk " << chunk;
    EXPECT_EQ(reader.result().target.port, 443);
    // What arrived with the completing chunk is kept; later bytes belong to the tunnel reader.
    EXPECT_EQ(reader.leftover(), stream.substr(head.size(), fed - head.size())) << chunk;
  }
}

TEST(EgressRequestHeadReader, RefusesABareLineFeedAsSoonAsItArrives) {
  RequestHeadReader reader(8192);
  EXPECT_EQ(reader.feed("CONNECT pypi.org:443 HTTP/1.1\n"), RequestHeadReader::State::refused);
  EXPECT_EQ(reader.result().problem, HeadProblem::malformed);
}

TEST(EgressRequestHeadReader, RefusesABareCarriageReturnOnceTheNextByteArrives) {
  RequestHeadReader reader(8192);
  EXPECT_EQ(reader.feed("CONNECT pypi.org:443 HTTP/1.1\r"), RequestHeadReader::State::need_more);
  EXPECT_EQ(reader.feed("X"), RequestHeadReader::State::refused);
}

TEST(EgressRequestHeadReader, RefusesANulByteAtOnce) {
  RequestHeadReader reader(8192);
  EXPECT_EQ(reader.feed(std::string("CONN\0", 5)), RequestHeadReader::State::refused);
}

TEST(EgressRequestHeadReader, JudgesTheRequestLineBeforeTheHeadersArrive) {
  RequestHeadReader wrong_method(8192);
  EXPECT_EQ(wrong_method.feed("GET http://pypi.org/ HTTP/1.1\r\n"),
            RequestHeadReader::State::refused);
  EXPECT_EQ(wrong_method.result().problem, HeadProblem::method_not_allowed);

  RequestHeadReader bad_target(8192);
  EXPECT_EQ(bad_target.feed("CONNECT user@pypi.org:443 HTTP/1.1\r\nHost: x"),
            RequestHeadReader::State::refused);
  EXPECT_EQ(bad_target.result().problem, HeadProblem::malformed);
}

TEST(EgressRequestHeadReader, RefusesAHeadLongerThanTheCeiling) {
  const std::string start = "CONNECT pypi.org:443 HTTP/1.1\r\n";
  RequestHeadReader endless(128);
  std::string filler = "X-Pad: " + std::string(200, 'p');
  EXPECT_EQ(endless.feed(start + filler), RequestHeadReader::State::refused);
  EXPECT_EQ(endless.result().problem, HeadProblem::too_large);

  // Exactly at the ceiling is accepted; one byte more is not.
  std::string exact = start + "X: ";
  exact += std::string(128 - exact.size() - 4, 'v') + "\r\n\r\n";
  ASSERT_EQ(exact.size(), 128u);
  RequestHeadReader at_limit(128);
  EXPECT_EQ(at_limit.feed(exact), RequestHeadReader::State::complete);
  RequestHeadReader over_limit(127);
  EXPECT_EQ(over_limit.feed(exact), RequestHeadReader::State::refused);
  EXPECT_EQ(over_limit.result().problem, HeadProblem::too_large);
}

TEST(EgressRequestHeadReader, IgnoresBytesAfterADecision) {
  RequestHeadReader reader(8192);
  ASSERT_EQ(reader.feed("GET / HTTP/1.1\r\n"), RequestHeadReader::State::refused);
  EXPECT_EQ(reader.feed("CONNECT pypi.org:443 HTTP/1.1\r\n\r\n"),
            RequestHeadReader::State::refused);
}

// Every seed of the fuzz corpus, fed whole and byte by byte, ends in the same state: the
// incremental reader never decides differently from one-shot reading.
TEST(EgressRequestHeadReader, FuzzCorpusSeedsDecideTheSameWhateverTheChunking) {
  const std::filesystem::path corpus = AIRLOCK_EGRESS_CORPUS_DIR;
  std::size_t seeds = 0;
  for (const auto& entry : std::filesystem::directory_iterator(corpus)) {
    std::string bytes(std::filesystem::file_size(entry.path()), '\0');
    std::ifstream(entry.path(), std::ios::binary)
        .read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    RequestHeadReader whole(8192);
    const auto whole_state = whole.feed(bytes);
    RequestHeadReader dribbled(8192);
    auto dribbled_state = RequestHeadReader::State::need_more;
    for (const char c : bytes) dribbled_state = dribbled.feed(std::string_view(&c, 1));
    EXPECT_EQ(whole_state, dribbled_state) << entry.path();
    EXPECT_EQ(whole.result().problem, dribbled.result().problem) << entry.path();
    EXPECT_EQ(whole.result().target.host, dribbled.result().target.host) << entry.path();
    ++seeds;
  }
  EXPECT_GE(seeds, 10u) << "the seed corpus at " << corpus << " is missing";
}

}  // namespace
}  // namespace airlock::egress
