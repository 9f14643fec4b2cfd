// The router's refusals, each proven, and their order proven by specs that fail several checks.
#include "airlock/router.hpp"

#include <gtest/gtest.h>

#include "airlock/errors.hpp"
#include "airlock/testing.hpp"

namespace airlock {
namespace {

using testing::InProcessBackendOptions;
using testing::InProcessSandboxBackend;

std::shared_ptr<InProcessSandboxBackend> backend(InProcessBackendOptions options = {}) {
  return std::make_shared<InProcessSandboxBackend>(std::move(options));
}

InProcessBackendOptions container_backend() {
  InProcessBackendOptions options;
  options.name = "box";
  options.isolation = Isolation::container;
  options.capabilities = CapabilitySet{Capability::exec, Capability::files_in,
                                       Capability::files_out};
  options.egress_modes = EgressSet{Egress::closed};
  return options;
}

SandboxSpec spec(SandboxSpec::Fields fields = {}) {
  if (fields.kind.empty()) fields.kind = "probe";
  return SandboxSpec(std::move(fields));
}

const SandboxKey kKey{"tenant", "thread", "agent"};

template <typename Refusal>
std::string refused_check(const SandboxRouter& router, const SandboxSpec& s) {
  try {
    router.ensure_can_serve(s);
  } catch (const Refusal& refusal) {
    return refusal.check();
  } catch (const std::exception& other) {
    return std::string("wrong refusal: ") + other.what();
  }
  return "accepted";
}

// ---- construction ---------------------------------------------------------------------------

TEST(RouterConstruction, TheDefaultFloorIsMicrovm) {
  SandboxRouter router({});
  EXPECT_EQ(router.options().min_isolation, Isolation::microvm);
  EXPECT_FALSE(router.enabled());
}

TEST(RouterConstruction, ABackendBelowTheHostFloorIsRefused) {
  try {
    SandboxRouter router({backend(container_backend())});
    FAIL() << "a container backend passed the microvm floor";
  } catch (const BackendNotPermitted& refusal) {
    EXPECT_EQ(refusal.check(), "isolation-floor");
    EXPECT_NE(refusal.message().find("below the host's floor microvm"), std::string::npos);
  }
}

TEST(RouterConstruction, AnExplicitlyLoweredFloorAdmitsTheBackend) {
  SandboxRouter router({backend(container_backend())}, {.min_isolation = Isolation::container});
  EXPECT_TRUE(router.enabled());
  EXPECT_EQ(router.backend()->name(), "box");
}

TEST(RouterConstruction, ARungNotOnTheLadderIsRefusedEvenUnderTheLowestFloor) {
  auto options = container_backend();
  options.isolation = static_cast<Isolation>(17);
  EXPECT_THROW(SandboxRouter({backend(options)}, {.min_isolation = Isolation::none}),
               BackendNotPermitted);
}

TEST(RouterConstruction, SelectionIsByNameAndAnUnknownNameNamesTheRegisteredOnes) {
  auto first = container_backend();
  first.name = "first";
  auto second = container_backend();
  second.name = "second";
  SandboxRouter by_position({backend(first), backend(second)},
                            {.min_isolation = Isolation::container});
  EXPECT_EQ(by_position.backend()->name(), "first");
  SandboxRouter by_name({backend(first), backend(second)},
                        {.min_isolation = Isolation::container, .selected = "second"});
  EXPECT_EQ(by_name.backend()->name(), "second");
  try {
    SandboxRouter missing({backend(first), backend(second)},
                          {.min_isolation = Isolation::container, .selected = "third"});
    FAIL();
  } catch (const NoSandboxBackend& error) {
    EXPECT_NE(error.message().find("registered: first, second"), std::string::npos);
  }
}

TEST(RouterConstruction, TheRegisteredNamesOfAnUnknownSelectionAreSorted) {
  auto zeta = container_backend();
  zeta.name = "zeta";
  auto alpha = container_backend();
  alpha.name = "alpha";
  try {
    SandboxRouter missing({backend(zeta), backend(alpha)},
                          {.min_isolation = Isolation::container, .selected = "mu"});
    FAIL() << "an unregistered name was selected";
  } catch (const NoSandboxBackend& error) {
    EXPECT_EQ(error.message(), "sandbox backend 'mu' is not registered (registered: alpha, zeta)");
  }
}

TEST(RouterConstruction, WithNoBackendsTheSelectionIsIgnoredAndTheRouterIsDisabled) {
  SandboxRouter router({}, {.selected = "anything"});
  EXPECT_FALSE(router.enabled());
  try {
    router.acquire(kKey, spec());
    FAIL() << "a disabled router acquired";
  } catch (const NoSandboxBackend& error) {
    EXPECT_EQ(error.message(), "no sandbox backend is configured");
  }
}

TEST(RouterConstruction, OnlyTheSelectedBackendIsFloorChecked) {
  auto weak = container_backend();
  weak.name = "weak";
  weak.isolation = Isolation::none;
  auto strong = container_backend();
  strong.name = "strong";
  strong.isolation = Isolation::microvm;
  EXPECT_NO_THROW(SandboxRouter({backend(weak), backend(strong)}, {.selected = "strong"}));
}

// ---- each check -----------------------------------------------------------------------------

TEST(RouterChecks, ADeniedCapabilityIsAHardStop) {
  SandboxRouter router({backend(container_backend())},
                       {.min_isolation = Isolation::container,
                        .denied_capabilities = {Capability::files_out}});
  auto s = spec({.required_capabilities = {Capability::exec, Capability::files_out}});
  EXPECT_EQ(refused_check<CapabilityDenied>(router, s), "denied-capabilities");
  // Only *required* capabilities count.
  EXPECT_NO_THROW(router.ensure_can_serve(spec()));
}

TEST(RouterChecks, ADeniedIdentityIsAHardStop) {
  SandboxRouter router({backend(container_backend())},
                       {.min_isolation = Isolation::container,
                        .denied_identities = {Identity::user}});
  EXPECT_EQ(refused_check<IdentityDenied>(router, spec({.identities = {Identity::user}})),
            "denied-identities");
  EXPECT_NO_THROW(router.ensure_can_serve(spec({.identities = {Identity::app}})));
}

TEST(RouterChecks, ASpecMayRaiseTheFloor) {
  SandboxRouter router({backend(container_backend())}, {.min_isolation = Isolation::container});
  auto raised = spec({.min_isolation = Isolation::hardened_container});
  EXPECT_EQ(refused_check<BackendNotPermitted>(router, raised), "isolation-floor");
}

TEST(RouterChecks, ASpecCannotLowerTheFloor) {
  auto options = container_backend();
  options.isolation = Isolation::microvm;
  SandboxRouter router({backend(options)});  // floor microvm
  // Asking for `none` changes nothing: the effective floor stays microvm, so microvm serves…
  auto lowered = spec({.min_isolation = Isolation::none});
  EXPECT_EQ(router.ensure_can_serve(lowered).effective_floor, Isolation::microvm);
  // …and a container backend is still refused under it.
  auto weaker = container_backend();
  weaker.isolation = Isolation::container;
  EXPECT_THROW(SandboxRouter({backend(weaker)}), BackendNotPermitted);
}

TEST(RouterChecks, AMissingCapabilityIsRefusedAndNamed) {
  SandboxRouter router({backend(container_backend())}, {.min_isolation = Isolation::container});
  try {
    router.ensure_can_serve(spec({.required_capabilities = {Capability::exec,
                                                            Capability::files_list}}));
    FAIL();
  } catch (const CapabilityNotSupported& refusal) {
    EXPECT_EQ(refusal.check(), "capabilities");
    EXPECT_NE(refusal.message().find("[files_list]"), std::string::npos) << refusal.message();
  }
}

TEST(RouterChecks, SilentCapabilitiesAreReadAsExecAndFilesIn) {
  auto options = container_backend();
  options.capabilities = std::nullopt;
  SandboxRouter router({backend(options)}, {.min_isolation = Isolation::container});
  EXPECT_NO_THROW(router.ensure_can_serve(spec()));
  EXPECT_EQ(refused_check<CapabilityNotSupported>(
                router, spec({.required_capabilities = {Capability::files_out}})),
            "capabilities");
}

TEST(RouterChecks, AnOsFamilyIsJudgedOnlyWhenTheSpecAsks) {
  SandboxRouter router({backend(container_backend())}, {.min_isolation = Isolation::container});
  EXPECT_NO_THROW(router.ensure_can_serve(spec()));  // asks nothing, refused by nothing
  EXPECT_EQ(refused_check<OsFamilyNotSupported>(router,
                                                spec({.requires_os_family = OsFamily::posix})),
            "os-family");  // silence is no answer
  auto posix = container_backend();
  posix.os_families = OsFamilySet{OsFamily::posix};
  SandboxRouter declared({backend(posix)}, {.min_isolation = Isolation::container});
  EXPECT_NO_THROW(declared.ensure_can_serve(spec({.requires_os_family = OsFamily::posix})));
  EXPECT_THROW(declared.ensure_can_serve(spec({.requires_os_family = OsFamily::windows})),
               OsFamilyNotSupported);
}

TEST(RouterChecks, CapsAboveTheBackendCeilingAreRefusedNotClamped) {
  auto options = container_backend();
  options.limits = SandboxLimits{{1024, 4096, 4}, {1024, 4096, 4}};
  SandboxRouter router({backend(options)}, {.min_isolation = Isolation::container});
  EXPECT_EQ(refused_check<TransferLimitsNotPermitted>(router, spec()), "transfer-limits");
  EXPECT_NO_THROW(router.ensure_can_serve(
      spec({.files_in = {1024, 4096, 4}, .files_out = {512, 4096, 4}})));
  try {
    router.ensure_can_serve(spec({.files_in = {1024, 4096, 4}, .files_out = {1024, 4096, 5}}));
    FAIL();
  } catch (const TransferLimitsNotPermitted& refusal) {
    EXPECT_NE(refusal.message().find("files_out"), std::string::npos);
  }
}

TEST(RouterChecks, SilentLimitsAreTheDefaults) {
  auto options = container_backend();
  options.limits = std::nullopt;
  SandboxRouter router({backend(options)}, {.min_isolation = Isolation::container});
  EXPECT_NO_THROW(router.ensure_can_serve(spec()));
  EXPECT_THROW(router.ensure_can_serve(spec({.files_in = {kDefaultTransferLimits.max_bytes_per_file + 1,
                                                          kDefaultTransferLimits.max_total_bytes,
                                                          kDefaultTransferLimits.max_files}})),
               TransferLimitsNotPermitted);
}

TEST(RouterChecks, EgressIsNeverDegradedEitherWay) {
  SandboxRouter router({backend(container_backend())}, {.min_isolation = Isolation::container});
  // The backend confines *more* than the allowlist asks: still refused.
  auto allowlist = spec({.egress_allow = {"pypi.org"}, .egress = Egress::allowlist});
  EXPECT_EQ(refused_check<EgressNotEnforced>(router, allowlist), "egress");
  // …and less: refused.
  EXPECT_EQ(refused_check<EgressNotEnforced>(router, spec({.egress = Egress::unrestricted})),
            "egress");
  EXPECT_NO_THROW(router.ensure_can_serve(spec({.egress = Egress::closed})));
}

TEST(RouterChecks, SilentEgressRefusesEveryModeClosedIncluded) {
  auto options = container_backend();
  options.egress_modes = std::nullopt;
  SandboxRouter router({backend(options)}, {.min_isolation = Isolation::container});
  try {
    router.ensure_can_serve(spec());
    FAIL();
  } catch (const EgressNotEnforced& refusal) {
    EXPECT_NE(refusal.message().find("enforces nothing"), std::string::npos);
  }
}

TEST(RouterChecks, TheChecksRunInTheReferenceOrder) {
  // A backend that fails every check; a spec that trips every one. Removing each cause in turn
  // must move the refusal to the next check, in order.
  auto options = container_backend();
  options.isolation = Isolation::container;
  options.capabilities = CapabilitySet{Capability::exec};
  options.limits = SandboxLimits{{1, 1, 1}, {1, 1, 1}};
  options.egress_modes = EgressSet{};
  SandboxRouter router({backend(options)},
                       {.min_isolation = Isolation::container,
                        .denied_capabilities = {Capability::snapshot},
                        .denied_identities = {Identity::user}});
  SandboxSpec::Fields fields{.kind = "ordered",
                             .required_capabilities = {Capability::exec, Capability::snapshot,
                                                       Capability::files_out},
                             .min_isolation = Isolation::microvm,
                             .identities = {Identity::user},
                             .requires_os_family = OsFamily::posix};
  EXPECT_EQ(refused_check<RouterRefusal>(router, spec(fields)), "denied-capabilities");
  fields.required_capabilities = {Capability::exec, Capability::files_out};
  EXPECT_EQ(refused_check<RouterRefusal>(router, spec(fields)), "denied-identities");
  fields.identities = {};
  EXPECT_EQ(refused_check<RouterRefusal>(router, spec(fields)), "isolation-floor");
  fields.min_isolation = std::nullopt;
  EXPECT_EQ(refused_check<RouterRefusal>(router, spec(fields)), "capabilities");
  fields.required_capabilities = {Capability::exec};
  EXPECT_EQ(refused_check<RouterRefusal>(router, spec(fields)), "os-family");
  fields.requires_os_family = std::nullopt;
  EXPECT_EQ(refused_check<RouterRefusal>(router, spec(fields)), "transfer-limits");
  fields.files_in = {1, 1, 1};
  fields.files_out = {1, 1, 1};
  EXPECT_EQ(refused_check<RouterRefusal>(router, spec(fields)), "egress");
}

TEST(RouterChecks, TheDecisionListsEveryCheckThatPassed) {
  SandboxRouter router({backend(container_backend())}, {.min_isolation = Isolation::container});
  auto decision = router.ensure_can_serve(spec());
  EXPECT_EQ(decision.backend, "box");
  EXPECT_EQ(decision.backend_isolation, Isolation::container);
  std::vector<std::string> checks;
  for (const auto& passed : decision.passed) checks.push_back(passed.check);
  EXPECT_EQ(checks, (std::vector<std::string>{"denied-capabilities", "denied-identities",
                                              "isolation-floor", "capabilities", "os-family",
                                              "transfer-limits", "egress"}));
}

TEST(RouterChecks, WithNoBackendEnsureCanServeIsSilentAndAcquireRefuses) {
  SandboxRouter router({});
  EXPECT_NO_THROW(router.ensure_can_serve(spec()));
  EXPECT_THROW(router.acquire(kKey, spec()), NoSandboxBackend);
}

// ---- acquire and disposal -------------------------------------------------------------------

TEST(RouterAcquire, AcquireRunsTheChecksBeforeTheBackendIsReached) {
  auto fake = backend(container_backend());
  SandboxRouter router({fake}, {.min_isolation = Isolation::container});
  EXPECT_THROW(router.acquire(kKey, spec({.egress = Egress::unrestricted})), EgressNotEnforced);
  EXPECT_TRUE(fake->keys().empty()) << "the backend was reached after a refusal";
  EXPECT_NE(router.acquire(kKey, spec()), nullptr);
  EXPECT_EQ(fake->keys().size(), 1u);
}

TEST(RouterAcquire, DisposalReachesEveryRegisteredBackendAndNeverThrows) {
  auto first = container_backend();
  first.name = "first";
  auto second = container_backend();
  second.name = "second";
  second.purge_count = 2;
  auto a = backend(first);
  auto b = backend(second);
  SandboxRouter router({a, b}, {.min_isolation = Isolation::container});
  router.dispose(kKey);
  EXPECT_EQ(a->disposed().size(), 1u);
  EXPECT_EQ(b->disposed().size(), 1u);
  EXPECT_EQ(router.dispose_scope("tenant", "thread"), 3);
}

TEST(RouterScope, TheCountArrivesAfterTheBlockAndAnErrorInsideIsNotMasked) {
  auto options = container_backend();
  options.purge_count = 4;
  auto fake = backend(options);
  SandboxRouter router({fake}, {.min_isolation = Isolation::container});
  ScopeDisposal reclaimed;
  try {
    auto guard = router.scope("tenant", "thread", reclaimed);
    EXPECT_EQ(reclaimed.disposed, 0) << "the count must not arrive inside the block";
    throw std::runtime_error("the turn failed");
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "the turn failed");
  }
  EXPECT_EQ(reclaimed.disposed, 4);
  ASSERT_EQ(fake->purged().size(), 1u);
  EXPECT_EQ(fake->purged()[0].first, "tenant");
}

TEST(RouterScope, ThePurgerDisposesTheConversation) {
  auto fake = backend(container_backend());
  SandboxRouter router({fake}, {.min_isolation = Isolation::container});
  SandboxPurger purger(router);
  EXPECT_EQ(purger.purge_scoped_thread("tenant", "thread"), 1);
  ASSERT_EQ(fake->purged().size(), 1u);
  EXPECT_EQ(fake->purged()[0].second, std::optional<std::string>("thread"));
}

}  // namespace
}  // namespace airlock
