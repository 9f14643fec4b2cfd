// The isolation suite's gating and its verdicts where it cannot, or must not, pass: a subject
// that does not declare what the suite needs is refused; below `container` every probe is
// skipped with the reason; the in-process fake cannot run the probe, so the suite fails there
// (never passes); and on the host itself — no sandbox at all — the probes that can safely run
// there fail, each with its evidence.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "airlock/conformance.hpp"
#include "airlock/errors.hpp"
#include "airlock/testing.hpp"
#include "support/host_sandbox.hpp"

namespace airlock::conformance {
namespace isolation_tests {

constexpr const char* kWork = "/srv/conformance/work";
constexpr CapabilitySet kDeclared{Capability::exec, Capability::files_in, Capability::files_out,
                                  Capability::files_list, Capability::files_delete};

std::map<std::string, ProbeResult> by_name(const std::vector<ProbeResult>& results) {
  std::map<std::string, ProbeResult> out;
  for (const auto& result : results) out[result.probe] = result;
  return out;
}

IsolationDeclarations container(EgressSet modes = EgressSet{Egress::closed},
                                Egress egress = Egress::closed) {
  return {Isolation::container, modes, egress, {}};
}

IsolationOptions with_the_built_probe() {
  IsolationOptions options;
  options.probe = AIRLOCK_ISOLATION_PROBE_PATH;
  return options;
}

TEST(IsolationConformance, IsRefusedWithoutExecAndFilesIn) {
  testing::InProcessSandbox memory;
  for (const CapabilitySet declared :
       {CapabilitySet{Capability::exec, Capability::files_out},
        CapabilitySet{Capability::files_in, Capability::files_out}}) {
    PosixGuestSubject subject(memory, kWork, declared);
    subject.declare_isolation(container());
    EXPECT_THROW(run_isolation_conformance(subject, with_the_built_probe()), InvalidArgument);
  }
  EXPECT_EQ(memory.commands().size(), 0u) << "a refused suite touched the sandbox";
}

TEST(IsolationConformance, IsRefusedWithoutTheBackendsDeclarations) {
  testing::InProcessSandbox memory;
  PosixGuestSubject subject(memory, kWork, kDeclared);
  EXPECT_THROW(run_isolation_conformance(subject, with_the_built_probe()), InvalidArgument);
  EXPECT_THROW(assert_isolation_conformance(subject, with_the_built_probe()), InvalidArgument);
  EXPECT_EQ(memory.commands().size(), 0u);
}

TEST(IsolationConformance, BelowContainerEveryProbeIsSkippedWithTheReason) {
  for (const Isolation rung : {Isolation::none, Isolation::runtime, Isolation::os_process}) {
    testing::InProcessSandbox memory;
    PosixGuestSubject subject(memory, kWork, kDeclared);
    subject.declare_isolation({rung, EgressSet{Egress::closed}, Egress::closed, {}});
    const auto results = assert_isolation_conformance(subject, with_the_built_probe());
    std::size_t listed = 0;
    for (const auto& probe : describe_probes()) listed += probe.suite == "isolation" ? 1 : 0;
    EXPECT_EQ(results.size(), listed);
    for (const auto& result : results) {
      EXPECT_EQ(result.outcome, ProbeOutcome::skipped) << result.probe;
      EXPECT_NE(result.detail.find("below container"), std::string::npos) << result.detail;
      EXPECT_FALSE(result.reference);
    }
    EXPECT_EQ(memory.commands().size(), 0u) << "a skipped suite ran something";
  }
}

// The fake's exec is an emulated shell: it cannot run a program, so the probe never runs and the
// suite must say so as a failure — whether an unknown command is "not found" (what the CLI
// configures) or a scripted success with no output.
TEST(IsolationConformance, TheInProcessFakeCannotRunTheProbeSoTheSuiteFails) {
  for (const bool not_found : {true, false}) {
    testing::InProcessSandboxOptions options;
    options.unemulated_not_found = not_found;
    testing::InProcessSandbox memory(options);
    PosixGuestSubject subject(memory, kWork, kDeclared);
    subject.declare_isolation(container());
    const auto results = run_isolation_conformance(subject, with_the_built_probe());
    ASSERT_EQ(results.size(), 1u);
    EXPECT_EQ(results[0].probe, "install-the-probe");
    EXPECT_EQ(results[0].outcome, ProbeOutcome::failed);
    EXPECT_FALSE(results[0].detail.empty());
    EXPECT_THROW(assert_isolation_conformance(subject, with_the_built_probe()), ConformanceFailure);
  }
}

TEST(IsolationConformance, AMissingProbeBinaryIsAFailedPremise) {
  testing::InProcessSandbox memory;
  PosixGuestSubject subject(memory, kWork, kDeclared);
  subject.declare_isolation(container());
  IsolationOptions options;
  options.probe = "/nonexistent/airlock-isolation-probe";
  const auto results = run_isolation_conformance(subject, options);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].probe, "install-the-probe");
  EXPECT_EQ(results[0].outcome, ProbeOutcome::failed);
  EXPECT_NE(results[0].detail.find("/nonexistent/airlock-isolation-probe"), std::string::npos);
}

// What a rung or the egress modes do not promise is skipped, with the reason — on a real guest
// (the host double), where the probe does run.
TEST(IsolationConformance, WhatTheDeclarationsDoNotPromiseIsSkipped) {
  test_support::TempDir scratch;
  test_support::HostSandbox host;
  IsolationOptions options = with_the_built_probe();
  options.only = {"the-guest-kernel-is-not-the-hosts", "closed-egress-sees-only-loopback",
                  "closed-egress-reaches-nothing", "another-sandbox-is-unreachable",
                  "tasks-are-bounded"};
  struct Case {
    IsolationDeclarations declared;
    std::string egress_reason;
  };
  for (const auto& [declared, egress_reason] :
       {Case{container(EgressSet{Egress::allowlist}, Egress::allowlist),
             "backend does not declare egress closed"},
        Case{container(EgressSet{Egress::closed, Egress::allowlist}, Egress::allowlist),
             "this sandbox's egress is allowlist, not closed"}}) {
    PosixGuestSubject subject(host, scratch.path() + "/work", kDeclared);
    subject.declare_isolation(declared);
    const auto results = by_name(run_isolation_conformance(subject, options));
    ASSERT_EQ(results.size(), options.only.size());
    EXPECT_EQ(results.at("the-guest-kernel-is-not-the-hosts").outcome, ProbeOutcome::skipped);
    EXPECT_NE(results.at("the-guest-kernel-is-not-the-hosts").detail.find("hardened_container"),
              std::string::npos);
    for (const char* egress :
         {"closed-egress-sees-only-loopback", "closed-egress-reaches-nothing"}) {
      EXPECT_EQ(results.at(egress).outcome, ProbeOutcome::skipped);
      EXPECT_EQ(results.at(egress).detail, egress_reason);
    }
    for (const char* needs_second : {"another-sandbox-is-unreachable", "tasks-are-bounded"}) {
      EXPECT_EQ(results.at(needs_second).outcome, ProbeOutcome::skipped);
      EXPECT_NE(results.at(needs_second).detail.find("no second sandbox"), std::string::npos);
    }
  }
  EXPECT_THROW(
      {
        IsolationOptions unknown = with_the_built_probe();
        unknown.only = {"no-such-probe"};
        PosixGuestSubject subject(host, scratch.path() + "/work", kDeclared);
        subject.declare_isolation(container());
        run_isolation_conformance(subject, unknown);
      },
      InvalidArgument);
}

// The host is no sandbox: every probe that can run there without harm must fail there, naming
// what got through. This is what makes the probes able to fail.
TEST(IsolationConformance, TheProbesFailOnTheHostItself) {
  test_support::TempDir scratch;
  test_support::HostSandbox host;
  test_support::HostSandbox other;
  PosixGuestSubject subject(host, scratch.path() + "/work", kDeclared);
  subject.declare_isolation(
      {Isolation::hardened_container, EgressSet{Egress::closed}, Egress::closed, {}});
  subject.offer_second_sandbox(
      [&other] { return std::shared_ptr<Sandbox>(&other, [](Sandbox*) {}); });
  IsolationOptions options = with_the_built_probe();
  options.only = {"host-processes-are-invisible",      "the-guest-holds-no-capabilities",
                  "every-command-runs-under-seccomp",  "closed-egress-sees-only-loopback",
                  "the-guest-kernel-is-not-the-hosts", "another-sandbox-is-unreachable"};
  const auto results = by_name(run_isolation_conformance(subject, options));
  ASSERT_EQ(results.size(), options.only.size());
  for (const auto& [name, result] : results) {
    EXPECT_EQ(result.outcome, ProbeOutcome::failed) << name << ": " << result.detail;
    EXPECT_EQ(result.detail.find("could not prove"), std::string::npos)
        << name << " failed on its premise, not on the host: " << result.detail;
  }
  EXPECT_NE(results.at("host-processes-are-invisible").detail.find("host-process-visible"),
            std::string::npos);
  EXPECT_NE(results.at("every-command-runs-under-seccomp").detail.find("Seccomp 0"),
            std::string::npos);
  EXPECT_NE(results.at("the-guest-kernel-is-not-the-hosts").detail.find("host's kernel"),
            std::string::npos);
  EXPECT_NE(results.at("another-sandbox-is-unreachable").detail.find("reached sandbox A's"),
            std::string::npos);
  EXPECT_THROW(assert_isolation_conformance(subject, options), ConformanceFailure);
}

TEST(IsolationConformance, EveryProbeIsListedWithWhatItNeeds) {
  std::size_t listed = 0;
  for (const auto& probe : describe_probes()) {
    if (probe.suite != "isolation") continue;
    ++listed;
    EXPECT_FALSE(probe.reference) << probe.probe;
    EXPECT_FALSE(probe.why.empty()) << probe.probe;
    EXPECT_TRUE(probe.needs.contains(Capability::exec)) << probe.probe;
    EXPECT_TRUE(probe.needs.contains(Capability::files_in)) << probe.probe;
  }
  EXPECT_EQ(listed, 21u);
}

}  // namespace isolation_tests
}  // namespace airlock::conformance
