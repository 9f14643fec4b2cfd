// collect_outputs: the phase order and every refusal, attacked through an in-memory sandbox
// and doubles that lie, time out or grow files between phases.
#include "airlock/outputs.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "airlock/errors.hpp"
#include "airlock/testing.hpp"
#include "core/sandbox_doubles.hpp"

namespace airlock {
namespace {

constexpr const char* kWork = "/w/work";

struct Harness {
  std::shared_ptr<testing::InProcessSandbox> memory = std::make_shared<testing::InProcessSandbox>();
  test::ForwardingSandbox sandbox{memory};
  std::vector<Artifact> delivered;
  OutputSink sink{[this](const Artifact& artifact) {
                    delivered.push_back(artifact);
                    return LandedArtifact{artifact.name, artifact.name + " landed", "handle"};
                  },
                  NameNormalization::nfc};

  void file(const std::string& relative, std::string content) {
    memory->seed_file(std::string(kWork) + "/" + relative, std::move(content));
  }
};

DeclaredOutput land(std::string path, bool required = true) {
  DeclaredOutput output;
  output.path = std::move(path);
  output.required = required;
  return output;
}

DeclaredOutput consume(std::string path) {
  DeclaredOutput output = land(std::move(path));
  output.disposition = OutputDisposition::consume;
  return output;
}

SandboxSpec spec_with(std::vector<DeclaredOutput> outputs,
                      TransferLimits limits = kDefaultTransferLimits,
                      bool named_at_call_time = false) {
  SandboxSpec::Fields fields;
  fields.kind = "codeact";
  fields.work_dir = kWork;
  fields.declared_outputs = std::move(outputs);
  fields.files_out = limits;
  fields.outputs_named_at_call_time = named_at_call_time;
  return SandboxSpec(fields);
}

template <typename Refusal>
Refusal refusal_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Refusal& refusal) {
    return refusal;
  }
  ADD_FAILURE() << "expected a refusal; the call returned or raised something else";
  throw std::runtime_error("no refusal");
}

TEST(CollectOutputs, LandsEveryOutputWithKindMediaTypeAndDeliveredName) {
  Harness h;
  h.file("out/report.txt", "hello");
  h.file("chart.png", std::string("\x89PNG\0\x01", 6));
  DeclaredOutput chart = land("chart.png");
  chart.media_type = "image/png";
  chart.name = "figures/chart.png";
  const auto landed =
      collect_outputs(h.sandbox, spec_with({land("out/report.txt"), chart}), &h.sink);
  ASSERT_EQ(landed.size(), 2u);
  ASSERT_EQ(h.delivered.size(), 2u);
  EXPECT_EQ(h.delivered[0].name, "out/report.txt");
  EXPECT_EQ(h.delivered[0].content, "hello");
  EXPECT_EQ(h.delivered[0].kind, "codeact");
  EXPECT_EQ(h.delivered[1].name, "figures/chart.png");
  EXPECT_EQ(h.delivered[1].content, std::string("\x89PNG\0\x01", 6));
  EXPECT_EQ(h.delivered[1].media_type, "image/png");
  EXPECT_EQ(landed[1].display, "figures/chart.png landed");
}

TEST(CollectOutputs, CallTimeOutputsAreRefusedUnlessTheSpecNamesThemAtCallTime) {
  Harness h;
  h.file("late.txt", "x");
  EXPECT_THROW(collect_outputs(h.sandbox, spec_with({}), &h.sink, {land("late.txt")}),
               InvalidArgument);
  EXPECT_EQ(h.sandbox.stats, 0);
  const auto landed = collect_outputs(h.sandbox, spec_with({}, kDefaultTransferLimits, true),
                                      &h.sink, {land("late.txt")});
  EXPECT_EQ(landed.size(), 1u);
}

TEST(CollectOutputs, CallTimeOutputsShareTheSpecsCaps) {
  Harness h;
  h.file("a.txt", "a");
  h.file("b.txt", "b");
  const auto spec = spec_with({land("a.txt")}, {100, 100, 1}, true);
  const auto refused = refusal_of<TransferCapExceeded>(
      [&] { collect_outputs(h.sandbox, spec, &h.sink, {land("b.txt")}); });
  EXPECT_EQ(refused.cap(), "files_out.max_files");
  EXPECT_TRUE(h.delivered.empty());
}

TEST(CollectOutputs, LandingWithoutASinkIsRefusedBeforeTheSandboxIsTouched) {
  Harness h;
  h.file("a.txt", "a");
  EXPECT_THROW(collect_outputs(h.sandbox, spec_with({land("a.txt")}), nullptr), OutputSinkRequired);
  OutputSink empty_sink;
  EXPECT_THROW(collect_outputs(h.sandbox, spec_with({land("a.txt")}), &empty_sink),
               OutputSinkRequired);
  EXPECT_EQ(h.sandbox.stats, 0);
  EXPECT_EQ(h.sandbox.reads, 0);
}

TEST(CollectOutputs, ConsumeOutputsNeedNoSinkAndAreStatedButNeverRead) {
  Harness h;
  h.file("result.json", "{}");
  const auto landed = collect_outputs(h.sandbox, spec_with({consume("result.json")}), nullptr);
  EXPECT_TRUE(landed.empty());
  EXPECT_EQ(h.sandbox.stats, 1);
  EXPECT_EQ(h.sandbox.reads, 0);
  // …and a missing required consume output is still refused.
  EXPECT_THROW(collect_outputs(h.sandbox, spec_with({consume("absent.json")}), nullptr),
               OutputMissing);
}

TEST(CollectOutputs, InvalidNamesAreRefusedBeforeTheSandboxIsTouched) {
  Harness h;
  for (const std::string path : {"../escape.txt", "/etc/passwd", "a//b", "a\\b", ""}) {
    EXPECT_THROW(collect_outputs(h.sandbox, spec_with({land(path)}), &h.sink), ArtifactNameInvalid)
        << path;
    EXPECT_THROW(collect_outputs(h.sandbox, spec_with({consume(path)}), &h.sink),
                 ArtifactNameInvalid)
        << path;
  }
  DeclaredOutput renamed = land("fine.txt");
  renamed.name = "../not-fine.txt";
  EXPECT_THROW(collect_outputs(h.sandbox, spec_with({renamed}), &h.sink), ArtifactNameInvalid);
  EXPECT_EQ(h.sandbox.stats, 0);
}

TEST(CollectOutputs, TheLengthLimitAppliesToTheDeliveredSpelling) {
  Harness h;
  h.file("out.txt", "x");
  DeclaredOutput output = land("out.txt");
  std::string name;
  for (int i = 0; i < 85; ++i) name += "\xe0\xa5\x98";  // 255 bytes; NFC makes 510
  output.name = name;
  const auto refused = refusal_of<ArtifactNameInvalid>(
      [&] { collect_outputs(h.sandbox, spec_with({output}), &h.sink); });
  EXPECT_EQ(refused.check(), "length");
  // A byte-exact sink delivers the name as written, which is within the limit.
  h.sink.normalization = NameNormalization::none;
  const auto landed = collect_outputs(h.sandbox, spec_with({output}), &h.sink);
  ASSERT_EQ(h.delivered.size(), 1u);
  EXPECT_EQ(h.delivered[0].name, name);
}

TEST(CollectOutputs, DeliveredNamesAreNfcComposedUnlessTheSinkIsByteExact) {
  Harness h;
  h.file("cafe\xcc\x81.txt", "x");  // café, decomposed
  collect_outputs(h.sandbox, spec_with({land("cafe\xcc\x81.txt")}), &h.sink);
  ASSERT_EQ(h.delivered.size(), 1u);
  EXPECT_EQ(h.delivered[0].name, "caf\xc3\xa9.txt");
  h.delivered.clear();
  h.sink.normalization = NameNormalization::none;
  collect_outputs(h.sandbox, spec_with({land("cafe\xcc\x81.txt")}), &h.sink);
  EXPECT_EQ(h.delivered[0].name, "cafe\xcc\x81.txt");
}

TEST(CollectOutputs, NamesDifferingOnlyByCaseOrUnicodeFormCollide) {
  Harness h;
  auto collision = [&](std::vector<DeclaredOutput> outputs) {
    return refusal_of<ArtifactNameCollision>(
        [&] { collect_outputs(h.sandbox, spec_with(std::move(outputs)), &h.sink); });
  };
  EXPECT_EQ(collision({land("Report.txt"), land("report.txt")}).check(), "case-or-unicode-form");
  DeclaredOutput decomposed = land("b.txt");
  decomposed.name = "e\xcc\x81.txt";
  DeclaredOutput composed = land("c.txt");
  composed.name = "\xc3\x89.TXT";
  EXPECT_EQ(collision({decomposed, composed}).check(), "case-or-unicode-form");
  DeclaredOutput same = land("d.txt");
  same.name = "a.txt";
  EXPECT_EQ(collision({land("a.txt"), same}).check(), "identical");
  EXPECT_EQ(h.sandbox.stats, 0);
  // Even a byte-exact sink judges collisions on the normalised key.
  h.sink.normalization = NameNormalization::none;
  EXPECT_EQ(collision({decomposed, composed}).check(), "case-or-unicode-form");
}

TEST(CollectOutputs, ACollisionNamesBothDeclaredPathsAndHowTheNamesMatch) {
  Harness h;
  // Two paths renamed to one landing name: the delivered name alone would be the same string
  // twice; the refusal names both guest paths.
  DeclaredOutput first = land("run-1/report.txt");
  first.name = "report.txt";
  DeclaredOutput second = land("run-2/report.txt");
  second.name = "report.txt";
  const auto identical = refusal_of<ArtifactNameCollision>([&] {
    collect_outputs(h.sandbox, spec_with({first, second}), &h.sink);
  });
  EXPECT_NE(identical.message().find("\"run-1/report.txt\""), std::string::npos)
      << identical.message();
  EXPECT_NE(identical.message().find("\"run-2/report.txt\""), std::string::npos)
      << identical.message();
  EXPECT_NE(identical.message().find("both are delivered as \"report.txt\""), std::string::npos)
      << identical.message();

  const auto by_case = refusal_of<ArtifactNameCollision>([&] {
    collect_outputs(h.sandbox, spec_with({land("Report.txt"), land("report.txt")}), &h.sink);
  });
  EXPECT_NE(by_case.message().find("\"Report.txt\" and \"report.txt\" would land as one file"),
            std::string::npos)
      << by_case.message();
  EXPECT_NE(by_case.message().find("differ only by case or Unicode form"), std::string::npos)
      << by_case.message();
}

TEST(CollectOutputs, SharpSAndSsDoNotCollideBecauseLowercaseIsNotCaseFolding) {
  Harness h;
  h.file(
      "stra\xc3\x9f"
      "e.txt",
      "1");
  h.file("strasse.txt", "2");
  h.file("\xef\xac\x81le.txt", "3");
  h.file("file.txt", "4");
  const auto landed = collect_outputs(
      h.sandbox,
      spec_with({land("stra\xc3\x9f"
                      "e.txt"),
                 land("strasse.txt"), land("\xef\xac\x81le.txt"), land("file.txt")}),
      &h.sink);
  EXPECT_EQ(landed.size(), 4u);
}

TEST(CollectOutputs, ConsumeOutputsDoNotTakePartInCollisions) {
  Harness h;
  h.file("data.json", "{}");
  h.file("DATA.JSON", "{}");
  EXPECT_NO_THROW(
      collect_outputs(h.sandbox, spec_with({consume("data.json"), land("DATA.JSON")}), &h.sink));
}

TEST(CollectOutputs, AMissingRequiredOutputIsRefusedAndNothingLands) {
  Harness h;
  h.file("present.txt", "x");
  EXPECT_THROW(
      collect_outputs(h.sandbox, spec_with({land("present.txt"), land("absent.txt")}), &h.sink),
      OutputMissing);
  EXPECT_TRUE(h.delivered.empty());
}

TEST(CollectOutputs, AMissingOptionalOutputIsSkippedAndNotCounted) {
  Harness h;
  h.file("present.txt", "x");
  const auto landed = collect_outputs(
      h.sandbox, spec_with({land("absent.txt", false), land("present.txt")}, {10, 10, 1}), &h.sink);
  ASSERT_EQ(landed.size(), 1u);
  EXPECT_EQ(h.delivered[0].name, "present.txt");
}

TEST(CollectOutputs, ALinkIsNotRegularAndNeverRead) {
  Harness h;
  h.memory->seed_file("/w/secret.txt", "secret");
  h.memory->seed_symlink(std::string(kWork) + "/link.txt", "/w/secret.txt");
  const auto refused = refusal_of<OutputNotRegular>(
      [&] { collect_outputs(h.sandbox, spec_with({land("link.txt")}), &h.sink); });
  EXPECT_EQ(refused.check(), "symlink");
  EXPECT_EQ(h.sandbox.reads, 0);
}

TEST(CollectOutputs, DirectoriesAndFifosAreNotRegular) {
  Harness h;
  h.memory->seed_directory(std::string(kWork) + "/dir");
  h.memory->seed_other(std::string(kWork) + "/fifo");
  EXPECT_THROW(collect_outputs(h.sandbox, spec_with({land("dir")}), &h.sink), OutputNotRegular);
  EXPECT_THROW(collect_outputs(h.sandbox, spec_with({consume("fifo")}), nullptr), OutputNotRegular);
}

TEST(CollectOutputs, AnOutputThroughALinkedParentIsNotConfined) {
  Harness h;
  h.memory->seed_file("/w/outside/secret.txt", "secret");
  h.memory->seed_symlink(std::string(kWork) + "/linked", "/w/outside");
  EXPECT_THROW(collect_outputs(h.sandbox, spec_with({land("linked/secret.txt")}), &h.sink),
               OutputNotConfined);
  EXPECT_TRUE(h.delivered.empty());
}

TEST(CollectOutputs, ALinkedWorkDirectoryIsNotConfined) {
  Harness h;
  h.memory->seed_file("/w/real/out.txt", "x");
  h.memory->seed_symlink(kWork, "/w/real");
  EXPECT_THROW(collect_outputs(h.sandbox, spec_with({land("out.txt")}), &h.sink),
               OutputNotConfined);
}

TEST(CollectOutputs, AFileStandingAsAParentIsUnreachableNotAnEscape) {
  Harness h;
  h.file("plain.txt", "x");
  const auto refused = refusal_of<OutputUnreachable>(
      [&] { collect_outputs(h.sandbox, spec_with({land("plain.txt/deeper.txt")}), &h.sink); });
  EXPECT_EQ(refused.check(), "NotADirectory");
}

TEST(CollectOutputs, ATimeoutIsUnreachable) {
  Harness h;
  h.file("slow.txt", "x");
  h.sandbox.on_stat = [](std::string_view, std::string_view) -> std::optional<SandboxEntry> {
    throw Timeout("the stat did not finish");
  };
  EXPECT_THROW(collect_outputs(h.sandbox, spec_with({land("slow.txt")}), &h.sink),
               OutputUnreachable);
  h.sandbox.on_stat = nullptr;
  h.sandbox.on_read = [](std::string_view, std::string_view, std::uint64_t) -> std::string {
    throw Timeout("the read did not finish");
  };
  EXPECT_THROW(collect_outputs(h.sandbox, spec_with({land("slow.txt")}), &h.sink),
               OutputUnreachable);
  EXPECT_TRUE(h.delivered.empty());
}

TEST(CollectOutputs, ABackendsOwnFailureIsNotTranslated) {
  Harness h;
  h.file("x.txt", "x");
  h.sandbox.on_stat = [](std::string_view, std::string_view) -> std::optional<SandboxEntry> {
    throw BackendError("the provider failed", "HTTP 500 from https://internal.example");
  };
  EXPECT_THROW(collect_outputs(h.sandbox, spec_with({land("x.txt")}), &h.sink), BackendError);
}

TEST(CollectOutputs, AnUnknownSizeIsRefusedNeverReadAsFree) {
  Harness h;
  h.file("x.txt", "x");
  h.sandbox.on_stat = [](std::string_view path, std::string_view) {
    return std::optional(SandboxEntry{std::string(path), EntryKind::file, std::nullopt});
  };
  EXPECT_THROW(collect_outputs(h.sandbox, spec_with({land("x.txt")}), &h.sink), OutputSizeUnknown);
  EXPECT_EQ(h.sandbox.reads, 0);
}

TEST(CollectOutputs, EachCapNamesItselfAndTheFile) {
  Harness h;
  h.file("big.txt", std::string(11, 'x'));
  h.file("a.txt", std::string(6, 'a'));
  h.file("b.txt", std::string(6, 'b'));
  auto cap_of = [&](std::vector<DeclaredOutput> outputs, TransferLimits limits) {
    return refusal_of<TransferCapExceeded>(
        [&] { collect_outputs(h.sandbox, spec_with(std::move(outputs), limits), &h.sink); });
  };
  const auto per_file = cap_of({land("big.txt")}, {10, 100, 10});
  EXPECT_EQ(per_file.cap(), "files_out.max_bytes_per_file");
  EXPECT_EQ(per_file.file(), "big.txt");
  EXPECT_EQ(per_file.limit(), 10u);
  EXPECT_NE(per_file.message().find("big.txt"), std::string::npos);
  const auto count = cap_of({land("a.txt"), land("b.txt")}, {10, 100, 1});
  EXPECT_EQ(count.cap(), "files_out.max_files");
  EXPECT_EQ(count.file(), "b.txt");
  const auto total = cap_of({land("a.txt"), land("b.txt")}, {10, 11, 10});
  EXPECT_EQ(total.cap(), "files_out.max_total_bytes");
  EXPECT_EQ(total.file(), "b.txt");
  EXPECT_EQ(h.sandbox.reads, 0) << "a collection over its caps was read";
  EXPECT_TRUE(h.delivered.empty());
}

TEST(CollectOutputs, ConsumeOutputsCountAgainstTheCaps) {
  Harness h;
  h.file("parsed.json", std::string(8, 'j'));
  h.file("a.txt", std::string(6, 'a'));
  EXPECT_THROW(
      collect_outputs(h.sandbox, spec_with({consume("parsed.json"), land("a.txt")}, {10, 10, 10}),
                      &h.sink),
      TransferCapExceeded);
  EXPECT_THROW(
      collect_outputs(h.sandbox, spec_with({consume("parsed.json"), land("a.txt")}, {10, 100, 1}),
                      &h.sink),
      TransferCapExceeded);
  EXPECT_TRUE(h.delivered.empty());
}

TEST(CollectOutputs, EachReadIsBoundedByItsStatSizeAndTheRemainingTotal) {
  Harness h;
  h.file("a.txt", std::string(4, 'a'));
  h.file("b.txt", std::string(3, 'b'));
  std::vector<std::uint64_t> bounds;
  h.sandbox.on_read = [&](std::string_view path, std::string_view wd, std::uint64_t max_bytes) {
    bounds.push_back(max_bytes);
    return h.memory->read_file(path, wd, max_bytes);
  };
  collect_outputs(h.sandbox, spec_with({land("a.txt"), land("b.txt")}, {10, 100, 10}), &h.sink);
  EXPECT_EQ(bounds, (std::vector<std::uint64_t>{4, 3}));
}

TEST(CollectOutputs, TheReadPhaseCountsTheBytesThatActuallyArrived) {
  Harness h;
  h.file("a.txt", "a");
  h.file("b.txt", "b");
  // A backend that reports one byte at the stat and hands back far more at the read.
  h.sandbox.on_read = [](std::string_view, std::string_view, std::uint64_t) {
    return std::string(64, 'x');
  };
  const auto refused = refusal_of<TransferCapExceeded>([&] {
    collect_outputs(h.sandbox, spec_with({land("a.txt"), land("b.txt")}, {100, 100, 10}), &h.sink);
  });
  EXPECT_EQ(refused.cap(), "files_out.max_total_bytes");
  EXPECT_TRUE(h.delivered.empty()) << "bytes over the cap reached the sink";
}

TEST(CollectOutputs, AFileThatGrewAfterItsStatIsRefusedByTheBackendsReadCap) {
  Harness h;
  h.file("growing.txt", "1234");
  h.sandbox.on_stat = [&](std::string_view path, std::string_view wd) {
    auto entry = h.memory->stat_file(path, wd);
    h.file("growing.txt", std::string(1000, 'g'));  // grows right after the stat
    return entry;
  };
  EXPECT_THROW(collect_outputs(h.sandbox, spec_with({land("growing.txt")}), &h.sink),
               TransferCapExceeded);
  EXPECT_TRUE(h.delivered.empty());
}

TEST(CollectOutputs, NothingIsDeliveredUntilEveryOutputIsRead) {
  Harness h;
  h.file("first.txt", "1");
  h.file("second.txt", "2");
  int reads = 0;
  h.sandbox.on_read = [&](std::string_view path, std::string_view wd, std::uint64_t max_bytes) {
    if (++reads == 2) throw NotFound("vanished between stat and read");
    EXPECT_TRUE(h.delivered.empty()) << "delivered before the read phase ended";
    return h.memory->read_file(path, wd, max_bytes);
  };
  EXPECT_THROW(
      collect_outputs(h.sandbox, spec_with({land("first.txt"), land("second.txt")}), &h.sink),
      OutputUnreachable);
  EXPECT_TRUE(h.delivered.empty());
}

TEST(CollectOutputs, ASinkRefusingPartWayLeavesTheEarlierDeliveries) {
  Harness h;
  h.file("one.txt", "1");
  h.file("two.txt", "2");
  h.file("three.txt", "3");
  int calls = 0;
  OutputSink refusing{[&](const Artifact& artifact) {
                        if (++calls == 2) throw LandingNotConfined("refused by the test sink");
                        h.delivered.push_back(artifact);
                        return LandedArtifact{artifact.name, artifact.name, std::nullopt};
                      },
                      NameNormalization::nfc};
  EXPECT_THROW(
      collect_outputs(h.sandbox, spec_with({land("one.txt"), land("two.txt"), land("three.txt")}),
                      &refusing),
      LandingNotConfined);
  ASSERT_EQ(h.delivered.size(), 1u);
  EXPECT_EQ(h.delivered[0].name, "one.txt");
}

TEST(TransferTally, ChecksPerFileThenCountThenTotal) {
  TransferTally tally({10, 15, 2}, "files_in");
  tally.add("a", 10);
  EXPECT_EQ(tally.remaining_bytes(), 5u);
  try {
    tally.add("b", 11);  // breaks per-file; would also break the total
    FAIL();
  } catch (const TransferCapExceeded& refused) {
    EXPECT_EQ(refused.cap(), "files_in.max_bytes_per_file");
  }
  TransferTally count({10, 100, 1});
  count.add("a", 1);
  try {
    count.add("b", 200);  // per-file first
    FAIL();
  } catch (const TransferCapExceeded& refused) {
    EXPECT_EQ(refused.cap(), "files_out.max_bytes_per_file");
  }
  TransferTally order({100, 5, 1});
  order.add("a", 1);
  try {
    order.add("b", 10);  // count before total
    FAIL();
  } catch (const TransferCapExceeded& refused) {
    EXPECT_EQ(refused.cap(), "files_out.max_files");
  }
}

TEST(TransferTally, RemainingNeverGoesNegative) {
  TransferTally tally({100, 10, 10});
  tally.add("a", 10);
  EXPECT_EQ(tally.remaining_bytes(), 0u);
  EXPECT_THROW(tally.add("b", 1), TransferCapExceeded);
  EXPECT_EQ(tally.remaining_bytes(), 0u);
}

TEST(OutputHelpers, LandingSubsetAndSinkRefusal) {
  const auto spec = spec_with({land("a.txt"), consume("b.json")});
  EXPECT_EQ(landing_outputs(spec).size(), 1u);
  EXPECT_TRUE(spec_lands_artifacts(spec));
  EXPECT_FALSE(spec_lands_artifacts(spec_with({consume("b.json")})));
  EXPECT_TRUE(spec_lands_artifacts(spec_with({}, kDefaultTransferLimits, true)));
  const auto refusal = missing_sink_refusal(spec, landing_outputs(spec), "the test");
  EXPECT_NE(refusal.message().find("a.txt"), std::string::npos);
  EXPECT_EQ(refusal.type(), "SandboxOutputSinkRequired");
}

TEST(OutputHelpers, TheSinkRefusalNamesTheLandingOutputsBoundedAndCallTimeNames) {
  DeclaredOutput renamed = land("run/1/chart.png");
  renamed.name = "chart.png";
  const auto named = missing_sink_refusal(spec_with({land("a.txt"), renamed}),
                                          {land("a.txt"), renamed}, "collect_outputs");
  EXPECT_NE(named.message().find("lands \"a.txt\", \"run/1/chart.png\" (as \"chart.png\")"),
            std::string::npos)
      << named.message();
  EXPECT_NE(named.message().find("collect_outputs has no output sink"), std::string::npos);

  std::vector<DeclaredOutput> many;
  for (int i = 0; i < 8; ++i) many.push_back(land("f" + std::to_string(i) + ".txt"));
  const auto bounded = missing_sink_refusal(spec_with(many), many, "collect_outputs");
  EXPECT_NE(bounded.message().find("\"f4.txt\" and 3 more"), std::string::npos)
      << bounded.message();
  EXPECT_EQ(bounded.message().find("f5.txt"), std::string::npos) << bounded.message();

  const auto late =
      missing_sink_refusal(spec_with({}, kDefaultTransferLimits, true), {}, "the attach gate");
  EXPECT_NE(late.message().find("lands outputs named at call time"), std::string::npos)
      << late.message();
}

TEST(CollectOutputs, TheSinkRequiredRefusalNamesTheLandingOutput) {
  Harness h;
  const auto refusal = refusal_of<OutputSinkRequired>([&] {
    collect_outputs(h.sandbox, spec_with({land("report.txt"), consume("x.json")}), nullptr);
  });
  EXPECT_NE(refusal.message().find("\"report.txt\""), std::string::npos) << refusal.message();
  EXPECT_EQ(refusal.message().find("x.json"), std::string::npos) << refusal.message();
  EXPECT_EQ(h.sandbox.stats, 0);
}

}  // namespace
}  // namespace airlock
