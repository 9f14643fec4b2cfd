// The conformance suites: green on the in-process emulator, and — the part that matters — red
// on sandboxes that break the properties, so no probe is one that cannot fail.
#include "airlock/conformance.hpp"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <thread>

#include "airlock/errors.hpp"
#include "airlock/paths.hpp"
#include "airlock/testing.hpp"
#include "core/sandbox_doubles.hpp"
#include "support/host_sandbox.hpp"

namespace airlock::conformance {
namespace {

constexpr const char* kWork = "/srv/conformance/work";
constexpr CapabilitySet kEverything{Capability::exec, Capability::files_in, Capability::files_out,
                                    Capability::files_list, Capability::files_delete};

std::map<std::string, ProbeResult> by_name(const std::vector<ProbeResult>& results) {
  std::map<std::string, ProbeResult> out;
  for (const auto& result : results) out[result.probe] = result;
  return out;
}

std::string failures_of(const std::vector<ProbeResult>& results) {
  std::string out;
  for (const auto& result : results) {
    if (result.outcome == ProbeOutcome::failed) out += result.probe + ": " + result.detail + "\n";
  }
  return out;
}

void expect_all_passed(const std::vector<ProbeResult>& results) {
  EXPECT_EQ(failures_of(results), "");
  for (const auto& result : results) {
    EXPECT_EQ(result.outcome, ProbeOutcome::passed) << result.probe << ": " << result.detail;
  }
}

struct Fixture {
  explicit Fixture(CapabilitySet capabilities = kEverything)
      : subject(sandbox, kWork, capabilities) {}
  std::shared_ptr<testing::InProcessSandbox> memory = std::make_shared<testing::InProcessSandbox>();
  test::ForwardingSandbox sandbox{memory};
  PosixGuestSubject subject;
};

TEST(Conformance, FilesOutPassesOnTheInProcessEmulator) {
  Fixture f;
  const auto results = run_files_out_conformance(f.subject);
  EXPECT_EQ(results.size(), 20u);
  expect_all_passed(results);
  EXPECT_NO_THROW(assert_passed(results));
}

TEST(Conformance, FilesInPassesOnTheInProcessEmulator) {
  Fixture f;
  const auto results = run_files_in_conformance(f.subject);
  EXPECT_EQ(results.size(), 16u);
  expect_all_passed(results);
}

TEST(Conformance, FilesDeletePassesOnTheInProcessEmulator) {
  Fixture f;
  const auto results = run_files_delete_conformance(f.subject);
  EXPECT_EQ(results.size(), 12u);
  expect_all_passed(results);
}

TEST(Conformance, ExecPassesOnTheInProcessEmulator) {
  Fixture f;
  const auto results = run_exec_conformance(f.subject);
  EXPECT_EQ(results.size(), 9u);
  expect_all_passed(results);
}

TEST(Conformance, ReferenceProbesComeFirstInTheReferencesOrder) {
  const auto probes = describe_probes();
  std::vector<std::string> files_out;
  for (const auto& probe : probes) {
    if (probe.suite == "files_out" && probe.reference) files_out.push_back(probe.probe);
  }
  EXPECT_EQ(files_out,
            (std::vector<std::string>{
                "a-legitimate-read-still-works", "a-link-is-named-a-link", "a-link-is-never-read",
                "stat-through-a-linked-parent", "read-through-a-linked-parent",
                "a-linked-working-directory", "a-linked-ancestor-of-the-working-directory",
                "a-plain-parent-is-not-an-escape", "listing-a-linked-directory",
                "listing-through-a-linked-parent", "listing-under-a-linked-ancestor",
                "a-listing-names-its-links"}));
  for (const auto& probe : probes) {
    EXPECT_FALSE(probe.why.empty()) << probe.probe;
    EXPECT_TRUE(probe.needs.contains(probe.suite == "files_out"      ? Capability::files_out
                                     : probe.suite == "files_in"     ? Capability::files_in
                                     : probe.suite == "files_delete" ? Capability::files_delete
                                                                     : Capability::exec))
        << probe.probe;
  }
}

TEST(Conformance, ASuiteWithoutItsGateIsRefused) {
  Fixture f(CapabilitySet{Capability::exec, Capability::files_in});
  EXPECT_THROW(run_files_out_conformance(f.subject), InvalidArgument);
  EXPECT_THROW(run_files_delete_conformance(f.subject), InvalidArgument);
  EXPECT_THROW(assert_files_out_conformance(f.subject), InvalidArgument);
  EXPECT_EQ(f.sandbox.execs, 0) << "a refused suite touched the sandbox";
  EXPECT_EQ(f.memory->commands().size(), 0u);
}

TEST(Conformance, AProbeNeedingAnUndeclaredCapabilityIsSkippedAndReported) {
  Fixture f(CapabilitySet{Capability::exec, Capability::files_in, Capability::files_out});
  const auto results = by_name(assert_files_out_conformance(f.subject));
  for (const char* listing : {"listing-a-linked-directory", "listing-through-a-linked-parent",
                              "listing-under-a-linked-ancestor", "a-listing-names-its-links"}) {
    EXPECT_EQ(results.at(listing).outcome, ProbeOutcome::skipped) << listing;
    EXPECT_EQ(results.at(listing).detail, "backend does not declare [files_list]");
  }
  EXPECT_EQ(results.at("a-link-is-never-read").outcome, ProbeOutcome::passed);
}

TEST(Conformance, MeasuringDeleteProbesNeedsNoGateAndGivesNoVerdict) {
  Fixture f(CapabilitySet{Capability::exec, Capability::files_in});
  const auto results = measure_files_delete_probes(f.subject);
  EXPECT_EQ(results.size(), 12u);
  expect_all_passed(results);
  // A mechanism that fails is reported, never thrown.
  testing::InProcessSandboxOptions scripted;
  scripted.emulate_commands = false;
  testing::InProcessSandbox broken(scripted);
  PosixGuestSubject broken_subject(broken, kWork, CapabilitySet{Capability::exec});
  std::vector<ProbeResult> measured;
  EXPECT_NO_THROW(measured = measure_files_delete_probes(broken_subject));
  EXPECT_NE(failures_of(measured), "");
}

TEST(Conformance, AMeasurementReadsNoGateSkipsNothingAndCarriesNoVerdict) {
  // Declares neither files_out nor files_list: a verdict run is refused; a measurement runs
  // every probe — the listing ones included — against what the sandbox really does.
  Fixture f(CapabilitySet{Capability::exec, Capability::files_in});
  EXPECT_THROW(run_files_out_conformance(f.subject), InvalidArgument);
  const auto results = run_conformance(f.subject, "files_out", RunOptions{.measure = true});
  EXPECT_EQ(results.size(), 20u);
  for (const auto& result : results) {
    EXPECT_TRUE(result.measured) << result.probe;
    EXPECT_NE(result.outcome, ProbeOutcome::skipped) << result.probe << ": " << result.detail;
  }
  EXPECT_EQ(by_name(results).at("a-listing-names-its-links").outcome, ProbeOutcome::passed);
  // A measurement is evidence, not a verdict: nothing asserts it.
  EXPECT_THROW(assert_passed(results), InvalidArgument);
  for (const char* suite : {"files_in", "exec", "files_delete"}) {
    const auto measured = run_conformance(f.subject, suite, {.measure = true});
    ASSERT_FALSE(measured.empty()) << suite;
    for (const auto& result : measured) EXPECT_TRUE(result.measured) << result.probe;
  }
  EXPECT_THROW(run_conformance(f.subject, "files_up"), InvalidArgument);
  EXPECT_THROW(run_conformance(f.subject, "egress", {.measure = true}), InvalidArgument);
}

TEST(Conformance, ASuiteByNameIsThatSuitesVerdictRun) {
  Fixture f(CapabilitySet{Capability::exec, Capability::files_in, Capability::files_out});
  const auto named = run_conformance(f.subject, "files_out");
  ASSERT_EQ(named.size(), 20u);
  EXPECT_EQ(by_name(named).at("a-listing-names-its-links").outcome, ProbeOutcome::skipped);
  for (const auto& result : named) EXPECT_FALSE(result.measured) << result.probe;
  Fixture ungated(CapabilitySet{Capability::exec});
  EXPECT_THROW(run_conformance(ungated.subject, "files_delete"), InvalidArgument);
}

TEST(Conformance, AMeasurementOfABrokenMechanismReportsWithoutRaising) {
  // No files_delete declared, and remove is not implemented: each probe fails with what the
  // sandbox raised, and nothing is thrown.
  class NoRemove : public test::ForwardingSandbox {
   public:
    using ForwardingSandbox::ForwardingSandbox;
    void remove(std::string_view, std::string_view, bool) override {
      throw NotSupported("this backend does not remove");
    }
  };
  NoRemove sandbox(std::make_shared<testing::InProcessSandbox>());
  PosixGuestSubject subject(sandbox, kWork, CapabilitySet{Capability::exec});
  std::vector<ProbeResult> results;
  ASSERT_NO_THROW(results = measure_files_delete_probes(subject));
  const auto named = by_name(results);
  EXPECT_EQ(named.at("a-removal-removes").outcome, ProbeOutcome::failed);
  EXPECT_EQ(named.at("a-removal-removes").detail,
            "raised NotSupported: this backend does not remove");
}

TEST(Conformance, TheFailureSummarySaysHowManyOfHowManyFailedAndWhatEachProves) {
  Fixture f;
  f.sandbox.on_stat = [&](std::string_view path, std::string_view wd) {
    if (path == "link-file") return std::optional(SandboxEntry{"link-file", EntryKind::file, 3});
    return f.memory->stat_file(path, wd);
  };
  const auto results = run_files_out_conformance(f.subject);
  try {
    assert_passed(results);
    FAIL() << "a stat that calls a link a file passed";
  } catch (const ConformanceFailure& failure) {
    EXPECT_EQ(failure.total(), results.size());
    ASSERT_EQ(failure.failures().size(), 1u);
    EXPECT_EQ(failure.message().rfind("1 of 20 conformance probes failed:", 0), 0u)
        << failure.message();
    EXPECT_NE(failure.message().find("files_out/a-link-is-named-a-link (stat of a link says "
                                     "symlink, with no size): "),
              std::string::npos)
        << failure.message();
  }
  // Built without a total, the failures are the whole run.
  const ConformanceFailure bare({{"a-probe", "what it proves", "what happened"}});
  EXPECT_EQ(bare.total(), 1u);
  EXPECT_EQ(bare.message(),
            "1 of 1 conformance probe failed:\n  - a-probe (what it proves): what happened");
}

TEST(Conformance, AProbeThatRaisesFailsWithTheTypeAndMessageAndTheRestStillRun) {
  Fixture f;
  f.sandbox.on_stat = [&](std::string_view path,
                          std::string_view wd) -> std::optional<SandboxEntry> {
    if (path == "real/inside.txt") throw BackendError("the provider went away");
    return f.memory->stat_file(path, wd);
  };
  const auto results = by_name(run_files_out_conformance(f.subject));
  EXPECT_EQ(results.size(), 20u);
  const auto& raised = results.at("a-legitimate-read-still-works");
  EXPECT_EQ(raised.outcome, ProbeOutcome::failed);
  EXPECT_EQ(raised.detail, "raised BackendError: the provider went away");
  EXPECT_EQ(results.at("a-link-is-never-read").outcome, ProbeOutcome::passed);
  EXPECT_EQ(results.at("a-listing-names-its-links").outcome, ProbeOutcome::passed);
}

TEST(Conformance, APlainParentMustBeNotADirectoryNotAnEscape) {
  Fixture f;
  f.sandbox.on_stat = [&](std::string_view path,
                          std::string_view wd) -> std::optional<SandboxEntry> {
    if (path == "plain.txt/deeper.txt") throw ConfinementError("called an escape");
    return f.memory->stat_file(path, wd);
  };
  const auto results = by_name(run_files_out_conformance(f.subject));
  const auto& plain = results.at("a-plain-parent-is-not-an-escape");
  EXPECT_EQ(plain.outcome, ProbeOutcome::failed);
  EXPECT_NE(plain.detail.find("expected NotADirectory"), std::string::npos) << plain.detail;
}

TEST(Conformance, ATimeoutMustArriveBetweenHalfASecondAndFourSeconds) {
  Fixture f;
  f.sandbox.on_exec = [&](const Command& command, const ExecOptions& options) {
    if (command.arguments() == std::vector<std::string>{"sleep", "30"}) {
      throw Timeout("gave up at once");  // long before the 1 s the caller allowed
    }
    return f.memory->exec(command, options);
  };
  const auto early_run = by_name(run_exec_conformance(f.subject));
  const auto& early = early_run.at("a-timeout-raises-timeout-error");
  EXPECT_EQ(early.outcome, ProbeOutcome::failed);
  EXPECT_NE(early.detail.find("expected 0.5–4.0 s"), std::string::npos) << early.detail;

  f.sandbox.on_exec = [&](const Command& command, const ExecOptions& options) {
    if (command.arguments() == std::vector<std::string>{"sleep", "30"}) {
      throw BackendError("the provider's own ceiling");  // not the caller's timeout
    }
    return f.memory->exec(command, options);
  };
  const auto other_run = by_name(run_exec_conformance(f.subject));
  const auto& other = other_run.at("a-timeout-raises-timeout-error");
  EXPECT_EQ(other.outcome, ProbeOutcome::failed);
  EXPECT_NE(other.detail.find("raised BackendError: the provider's own ceiling; expected Timeout"),
            std::string::npos)
      << other.detail;
}

// ---- the probes can fail ------------------------------------------------------------------------

// Follows links wherever the real sandbox refuses them: the escape every probe exists to catch.
class LinkFollowingSandbox : public test::ForwardingSandbox {
 public:
  using ForwardingSandbox::ForwardingSandbox;
  std::string read_file(std::string_view path, std::string_view working_directory,
                        std::uint64_t max_bytes) override {
    const std::string absolute =
        normalize_guest_path(std::string(working_directory) + "/" + std::string(path));
    ExecOptions options;
    options.working_directory = "/";
    options.timeout = Milliseconds(1000);  // a FIFO blocks `cat` until then
    const ExecResult cat = inner().exec(Command::argv({"cat", absolute}), options);
    if (cat.exit_code != 0) throw NotFound("cat failed", absolute);
    if (cat.stdout_bytes.size() > max_bytes) {
      throw TransferCapExceeded("max_bytes", absolute, max_bytes, cat.stdout_bytes.size());
    }
    return cat.stdout_bytes;
  }
  std::optional<SandboxEntry> stat_file(std::string_view path,
                                        std::string_view working_directory) override {
    try {
      return inner().stat_file(path, working_directory);
    } catch (const ConfinementError&) {
      return SandboxEntry{std::string(path), EntryKind::file, 1};  // "it's fine"
    }
  }
};

TEST(Conformance, FilesOutCatchesASandboxThatFollowsLinks) {
  auto memory = std::make_shared<testing::InProcessSandbox>();
  LinkFollowingSandbox leaky(memory);
  PosixGuestSubject subject(leaky, kWork, kEverything);
  const auto results = by_name(run_files_out_conformance(subject));
  for (const char* caught :
       {"a-link-is-never-read", "stat-through-a-linked-parent", "read-through-a-linked-parent",
        "a-linked-working-directory", "a-linked-ancestor-of-the-working-directory",
        "a-fifo-planted-as-an-output-is-never-read", "a-hard-link-to-a-file-outside-is-never-read",
        "a-link-raced-in-for-the-file-never-yields-outside-bytes",
        "a-link-raced-in-for-a-parent-never-yields-outside-bytes"}) {
    EXPECT_EQ(results.at(caught).outcome, ProbeOutcome::failed) << caught;
  }
  EXPECT_EQ(results.at("a-legitimate-read-still-works").outcome, ProbeOutcome::passed);
  try {
    assert_files_out_conformance(subject);
    FAIL() << "assert passed a sandbox that follows links";
  } catch (const ConformanceFailure& failure) {
    const std::string message = failure.message();
    EXPECT_NE(message.find("files_out/a-link-is-never-read"), std::string::npos);
    EXPECT_NE(message.find("files_out/read-through-a-linked-parent"), std::string::npos);
    EXPECT_GE(failure.failures().size(), 9u);
  }
}

// Checks the path, then reads it a moment later: correct when nothing moves, escapable when
// the guest swaps a link in between — exactly the race the race probes attack.
class CheckThenReadSandbox : public test::ForwardingSandbox {
 public:
  using ForwardingSandbox::ForwardingSandbox;
  std::string read_file(std::string_view path, std::string_view working_directory,
                        std::uint64_t max_bytes) override {
    const auto entry = inner().stat_file(path, working_directory);  // walks and refuses links
    if (!entry) throw NotFound("missing");
    if (entry->kind != EntryKind::file) throw SystemError("not a regular file");
    std::this_thread::sleep_for(std::chrono::microseconds(500));
    const std::string absolute =
        normalize_guest_path(std::string(working_directory) + "/" + std::string(path));
    ExecOptions options;
    options.working_directory = "/";
    const ExecResult cat = inner().exec(Command::argv({"cat", absolute}), options);
    if (cat.exit_code != 0) throw NotFound("vanished", absolute);
    if (cat.stdout_bytes.size() > max_bytes)
      throw TransferCapExceeded("max_bytes", absolute, max_bytes);
    return cat.stdout_bytes;
  }
};

TEST(Conformance, RaceProbesCatchACheckThenReadSandbox) {
  auto memory = std::make_shared<testing::InProcessSandbox>();
  CheckThenReadSandbox racy(memory);
  PosixGuestSubject subject(racy, kWork, kEverything);
  const auto results = by_name(run_files_out_conformance(subject));
  // Everything a single-threaded attack can see passes…
  EXPECT_EQ(results.at("a-link-is-never-read").outcome, ProbeOutcome::passed);
  EXPECT_EQ(results.at("read-through-a-linked-parent").outcome, ProbeOutcome::passed);
  // …and the races find the window.
  const auto& file_race = results.at("a-link-raced-in-for-the-file-never-yields-outside-bytes");
  const auto& parent_race = results.at("a-link-raced-in-for-a-parent-never-yields-outside-bytes");
  EXPECT_EQ(file_race.outcome, ProbeOutcome::failed) << file_race.detail;
  EXPECT_EQ(parent_race.outcome, ProbeOutcome::failed) << parent_race.detail;
  EXPECT_NE(parent_race.detail.find("secret"), std::string::npos) << parent_race.detail;
}

TEST(Conformance, AFifoDescribedAsAFileFails) {
  Fixture f;
  f.sandbox.on_stat = [&](std::string_view path, std::string_view wd) {
    auto entry = f.memory->stat_file(path, wd);
    if (entry && entry->kind == EntryKind::other) entry->kind = EntryKind::file;
    return entry;
  };
  const auto results = by_name(run_files_out_conformance(f.subject));
  EXPECT_EQ(results.at("a-fifo-planted-as-an-output-is-never-read").outcome, ProbeOutcome::failed);
  EXPECT_EQ(results.at("a-hard-link-to-a-file-outside-is-never-read").outcome,
            ProbeOutcome::failed);
}

TEST(Conformance, FilesInCatchesAWriteThatFollowsLinks) {
  Fixture f;
  f.sandbox.on_write = [&](std::string_view path, std::string_view content, std::string_view wd) {
    // Writes with the guest's semantics: through links, wherever they point.
    const std::string absolute =
        path.front() == '/' ? std::string(path)
                            : normalize_guest_path(std::string(wd) + "/" + std::string(path));
    ExecOptions options;
    options.working_directory = "/";
    options.stdin_bytes = std::string(content);
    f.memory->exec(Command::argv({"mkdir", "-p", absolute.substr(0, absolute.rfind('/'))}),
                   options);
    f.memory->exec(Command::argv({"sh", "-c", "cat > \"$1\"", "w", absolute}), options);
  };
  const auto results = by_name(run_files_in_conformance(f.subject));
  EXPECT_EQ(results.at("a-path-through-a-linked-parent-is-refused").outcome, ProbeOutcome::failed);
  EXPECT_EQ(results.at("a-linked-destination-is-refused-not-followed").outcome,
            ProbeOutcome::failed);
  EXPECT_EQ(results.at("a-write-raced-through-a-linked-parent-never-lands-outside").outcome,
            ProbeOutcome::failed);
}

TEST(Conformance, FilesDeleteCatchesARemovalThatFollowsLinks) {
  // A remove that resolves the path like a guest `rm -rf` of "path/." would: through links.
  class FollowingRemove : public test::ForwardingSandbox {
   public:
    using ForwardingSandbox::ForwardingSandbox;
    void remove(std::string_view path, std::string_view wd, bool) override {
      const std::string absolute = normalize_guest_path(std::string(wd) + "/" + std::string(path));
      ExecOptions options;
      options.working_directory = "/";
      // Follows a link to a file: removes the target, then the link.
      inner().exec(
          Command::argv({"sh", "-c", "cat \"$1\" > /dev/null && rm -f \"$1\"", "r", absolute}),
          options);
    }
  };
  auto memory = std::make_shared<testing::InProcessSandbox>();
  FollowingRemove remover(memory);
  PosixGuestSubject subject(remover, kWork, kEverything);
  const auto results = by_name(run_files_delete_conformance(subject));
  EXPECT_EQ(results.at("a-directory-needs-recursive").outcome, ProbeOutcome::failed);
  EXPECT_EQ(results.at("the-working-directory-is-refused").outcome, ProbeOutcome::failed);
  EXPECT_EQ(results.at("a-path-through-a-linked-parent-is-refused").outcome, ProbeOutcome::failed);
  EXPECT_EQ(results.at("a-path-outside-is-refused").outcome, ProbeOutcome::failed);
}

TEST(Conformance, ExecCatchesLostExitCodesAndSwallowedTimeouts) {
  Fixture f;
  f.sandbox.on_exec = [&](const Command& command, const ExecOptions& options) {
    if (command.arguments() == std::vector<std::string>{"sleep", "30"} ||
        command.line() == "exit 7") {
      return ExecResult{};
    }
    return f.memory->exec(command, options);
  };
  const auto results = by_name(run_exec_conformance(f.subject));
  EXPECT_EQ(results.at("exit-code-fidelity").outcome, ProbeOutcome::failed);
  EXPECT_EQ(results.at("a-timeout-raises-timeout-error").outcome, ProbeOutcome::failed);
  EXPECT_NE(results.at("a-timeout-raises-timeout-error").detail.find("returned normally"),
            std::string::npos);
  EXPECT_EQ(results.at("an-argv-sequence-runs").outcome, ProbeOutcome::passed);
  EXPECT_EQ(results.size(), 9u) << "the exec suite skipped something";
}

TEST(Conformance, ExecCatchesAnUnboundedFlood) {
  Fixture f;
  f.sandbox.on_exec = [&](const Command& command, const ExecOptions& options) {
    ExecOptions unbounded = options;
    unbounded.max_output_bytes.reset();
    return f.memory->exec(command, unbounded);
  };
  const auto results = by_name(run_exec_conformance(f.subject));
  EXPECT_EQ(results.at("an-output-flood-is-refused-whole").outcome, ProbeOutcome::failed);
}

TEST(Conformance, APlantingFailureIsReportedAsAFailedPremise) {
  class NoLinks : public PosixGuestSubject {
   public:
    using PosixGuestSubject::PosixGuestSubject;
    void plant_symlink(const std::string&, const std::string&) override {
      throw SystemError("ln: not installed");
    }
  };
  auto memory = std::make_shared<testing::InProcessSandbox>();
  NoLinks subject(*memory, kWork, kEverything);
  const auto results = run_files_out_conformance(subject);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].probe, "plant-the-hostile-layout");
  EXPECT_EQ(results[0].outcome, ProbeOutcome::failed);
  EXPECT_THROW(assert_passed(results), ConformanceFailure);
}

TEST(Conformance, AnImpossiblePremiseSkipsItsProbeWithTheReason) {
  class NoHardLinks : public PosixGuestSubject {
   public:
    using PosixGuestSubject::PosixGuestSubject;
    void plant_hard_link(const std::string&, const std::string&) override {
      throw PremiseImpossible("the work directory is its own filesystem");
    }
  };
  auto memory = std::make_shared<testing::InProcessSandbox>();
  NoHardLinks subject(*memory, kWork, kEverything);
  const auto results = by_name(run_files_out_conformance(subject));
  const auto& hard = results.at("a-hard-link-to-a-file-outside-is-never-read");
  EXPECT_EQ(hard.outcome, ProbeOutcome::skipped);
  EXPECT_EQ(hard.detail, "the work directory is its own filesystem");
}

TEST(Conformance, TheEgressSuiteNeedsItsPositiveControl) {
  // The in-process fake has no network (curl is not emulated): the allowed host is never
  // reached, so the suite must fail rather than pass on the deny probe alone.
  Fixture f;
  const auto results = by_name(
      run_egress_conformance(f.subject, "https://allowed.example/", "https://denied.example/"));
  EXPECT_EQ(results.at("an-allowed-host-is-reachable").outcome, ProbeOutcome::failed);
  EXPECT_EQ(results.at("a-denied-host-is-refused").outcome, ProbeOutcome::passed);
}

// The probes' own guest commands — `ln -sfn`, `ln`, `mkfifo`, the race flips built from `rm`,
// `ln`, `mkdir`, `mv` and redirections — run here on a real dash, coreutils and kernel, so a
// planting mistake is found without any backend. The host double is no sandbox (it checks, then
// reads; it cannot tell a hard link), so some properties may fail on it; the harness itself must
// never be what failed, and whatever a plain lstat walk guarantees must hold.
TEST(Conformance, TheProbesOwnGuestCommandsWorkOnARealShell) {
  test_support::TempDir scratch;
  test_support::HostSandbox host;
  PosixGuestSubject subject(
      host, scratch.path() + "/work",
      CapabilitySet{Capability::exec, Capability::files_in, Capability::files_out});
  std::vector<ProbeResult> results = run_files_out_conformance(subject);
  const auto files_in = run_files_in_conformance(subject);
  results.insert(results.end(), files_in.begin(), files_in.end());
  for (const auto& result : results) {
    if (result.outcome != ProbeOutcome::failed) continue;
    for (const char* harness :
         {"could not flip", "could not be driven", "never interleaved", "planting",
          "the guest could not", "` in the guest exited", "positive control"}) {
      EXPECT_EQ(result.detail.find(harness), std::string::npos)
          << result.probe << " failed in the harness: " << result.detail;
    }
  }
  const auto named = by_name(results);
  for (const char* walked :
       {"a-legitimate-read-still-works", "a-link-is-named-a-link", "a-link-is-never-read",
        "stat-through-a-linked-parent", "read-through-a-linked-parent",
        "a-linked-working-directory", "a-linked-ancestor-of-the-working-directory",
        "a-plain-parent-is-not-an-escape", "a-dangling-link-is-named-a-link",
        "a-fifo-planted-as-an-output-is-never-read", "a-path-with-a-nul-byte-is-refused",
        "a-path-through-a-linked-parent-is-refused", "a-linked-destination-is-refused-not-followed",
        "every-byte-value-survives-the-round-trip"}) {
    ASSERT_TRUE(named.contains(walked)) << walked;
    EXPECT_EQ(named.at(walked).outcome, ProbeOutcome::passed)
        << walked << ": " << named.at(walked).detail;
  }
  // Exec runs real processes here: every exec probe must hold, the kill included.
  expect_all_passed(run_exec_conformance(subject));
}

TEST(Conformance, PathsShareAStringPrefixWithTheWorkDirectory) {
  const auto paths = ConformancePaths::under("/a/work/");
  EXPECT_EQ(paths.work, "/a/work");
  EXPECT_EQ(paths.outside, "/a/work-outside");
  EXPECT_EQ(paths.beyond("x.txt"), "../work-outside/x.txt");
  EXPECT_EQ(normalize_guest_path(paths.work + "/" + paths.beyond("x.txt")),
            "/a/work-outside/x.txt");
}

}  // namespace
}  // namespace airlock::conformance
