// A declaration (`airlock check --declared`) routes exactly as a backend with the same
// declarations, and can never acquire: not directly, not through the router, not through an
// admitted call.
#include "cli/declared_backend.hpp"

#include <gtest/gtest.h>

#include "airlock/backend_factory.hpp"
#include "airlock/errors.hpp"
#include "airlock/router.hpp"
#include "airlock/testing.hpp"

namespace airlock::cli {
namespace {

const json::Json kDeclarations = {
    {"name", "planned"},
    {"isolation", "container"},
    {"egress_modes", {"closed"}},
    {"capabilities", {"exec", "files_in", "files_out"}},
    {"os_families", {"posix"}},
    {"limits",
     {{"files_in",
       {{"max_bytes_per_file", 16 << 20}, {"max_total_bytes", 64 << 20}, {"max_files", 128}}}}}};

// The in-process fake declaring the same: a backend, for comparison.
std::shared_ptr<testing::InProcessSandboxBackend> same_as_a_backend() {
  testing::InProcessBackendOptions options;
  options.name = "planned";
  options.isolation = Isolation::container;
  options.egress_modes = EgressSet{Egress::closed};
  options.capabilities =
      CapabilitySet{Capability::exec, Capability::files_in, Capability::files_out};
  options.os_families = OsFamilySet{OsFamily::posix};
  SandboxLimits limits;
  limits.files_in = TransferLimits{16 << 20, 64 << 20, 128};
  options.limits = limits;
  return std::make_shared<testing::InProcessSandboxBackend>(options);
}

SandboxSpec spec(SandboxSpec::Fields fields) {
  if (fields.kind.empty()) fields.kind = "probe";
  return SandboxSpec(std::move(fields));
}

// "accepted: <every passed check>" or "<type> <check>: <message>".
std::string outcome(const SandboxRouter& router, const SandboxSpec& s) {
  try {
    std::string passed = "accepted:";
    for (const auto& check : router.ensure_can_serve(s).passed) {
      passed += " " + check.check + "=" + check.detail;
    }
    return passed;
  } catch (const RouterRefusal& refusal) {
    return refusal.type() + " " + refusal.check() + ": " + refusal.message();
  }
}

TEST(DeclaredBackend, RoutesExactlyAsABackendWithTheSameDeclarations) {
  const RouterOptions options{.min_isolation = Isolation::container};
  SandboxRouter declared({std::make_shared<DeclaredBackend>(kDeclarations, "test")}, options);
  SandboxRouter backend({same_as_a_backend()}, options);

  std::vector<SandboxSpec> specs;
  specs.push_back(spec({}));
  specs.push_back(spec({.min_isolation = Isolation::microvm}));
  specs.push_back(spec({.required_capabilities = CapabilitySet{Capability::run_code}}));
  specs.push_back(spec({.requires_os_family = OsFamily::windows}));
  specs.push_back(spec({.egress_allow = {"pypi.org"}, .egress = Egress::allowlist}));
  specs.push_back(spec({.files_in = TransferLimits{32 << 20, 64 << 20, 128}}));
  for (const auto& s : specs) EXPECT_EQ(outcome(declared, s), outcome(backend, s));
  EXPECT_EQ(outcome(declared, specs[0]).rfind("accepted:", 0), 0u) << outcome(declared, specs[0]);
  EXPECT_NE(outcome(declared, specs[4]).find("egress"), std::string::npos);

  // The host's floor holds against a declaration as against a backend.
  EXPECT_THROW(SandboxRouter({std::make_shared<DeclaredBackend>(kDeclarations, "test")}),
               BackendNotPermitted);
}

TEST(DeclaredBackend, SilenceReadsAsABackendsSilence) {
  const DeclaredBackend bare(json::Json{{"name", "bare"}, {"isolation", "microvm"}}, "test");
  EXPECT_EQ(bare.capabilities(), std::nullopt);
  EXPECT_EQ(bare.egress_modes(), std::nullopt);
  EXPECT_EQ(bare.limits(), std::nullopt);
  EXPECT_EQ(bare.os_families(), std::nullopt);
  SandboxRouter router({std::make_shared<DeclaredBackend>(
      json::Json{{"name", "bare"}, {"isolation", "microvm"}}, "test")});
  // Egress never declared is egress refused, closed included.
  EXPECT_THROW(router.ensure_can_serve(spec({})), EgressNotEnforced);
}

TEST(DeclaredBackend, ADeclarationNeverAcquires) {
  auto declared = std::make_shared<DeclaredBackend>(kDeclarations, "planned.json");
  SandboxRouter router({declared}, {.min_isolation = Isolation::container});
  const SandboxKey key{"tenant", "thread", "agent"};
  const SandboxSpec accepted = spec({});
  ASSERT_NO_THROW(router.ensure_can_serve(accepted));

  try {
    router.acquire(key, accepted);
    FAIL() << "a declaration acquired a sandbox through the router";
  } catch (const NoSandboxBackend& refused) {
    EXPECT_NE(refused.message().find("'planned' is a declaration (planned.json), not a backend"),
              std::string::npos)
        << refused.message();
  }
  EXPECT_THROW(declared->acquire(key, accepted), NoSandboxBackend);
  auto call = router.enter_call(key, accepted);
  EXPECT_THROW(call.acquire(), NoSandboxBackend);
  EXPECT_EQ(call.sandbox(), nullptr);
}

TEST(DeclaredBackend, NoRouterDocumentCanNameOne) {
  for (const char* type : {"declared", "declaration"}) {
    EXPECT_THROW(make_backend(type, json::Json::object()), InvalidArgument) << type;
  }
  for (const auto& registered : backend_types()) {
    EXPECT_EQ(registered.type.find("declar"), std::string::npos) << registered.type;
  }
}

TEST(DeclaredBackend, EveryFieldIsCheckedAndNamed) {
  auto refusal = [](json::Json declarations) {
    try {
      DeclaredBackend(declarations, "test");
    } catch (const InvalidArgument& refused) {
      return refused.check();
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refusal({{"isolation", "container"}}), "declared.name");
  EXPECT_EQ(refusal({{"name", "x"}}), "declared.isolation");
  EXPECT_EQ(refusal({{"name", "x"}, {"isolation", "vm"}, {"type", "linux"}}), "declared.type");
  EXPECT_EQ(refusal({{"name", "x"}, {"isolation", "vm"}, {"egress_modes", "closed"}}),
            "declared.egress_modes");
  EXPECT_EQ(refusal({{"name", "x"}, {"isolation", "vm"}, {"os_families", {"beos"}}}),
            "declared.os_families[0]");
  EXPECT_EQ(refusal(json::Json::array()), "declared");
  EXPECT_EQ(refusal({{"name", "x"}, {"isolation", "vm"}}), "accepted");
}

// The reference refuses a backend declaring a rung off the ladder with the router's refusal,
// not a parse error: the router over the declaration is refused, naming the backend.
TEST(DeclaredBackend, ARungOffTheLadderIsRefusedByTheRouterNamingTheBackend) {
  for (const json::Json& rung : {json::Json("bogus"), json::Json("process"), json::Json(5)}) {
    const auto declared = std::make_shared<DeclaredBackend>(
        json::Json{{"name", "planned"}, {"isolation", rung}}, "planned.json");
    EXPECT_FALSE(is_known_rung(declared->isolation())) << rung.dump();
    try {
      SandboxRouter router({declared}, {.min_isolation = Isolation::none});
      FAIL() << "a router was built over a declaration of isolation " << rung.dump();
    } catch (const BackendNotPermitted& refused) {
      EXPECT_EQ(refused.check(), "isolation-floor");
      EXPECT_NE(refused.message().find("sandbox backend 'planned'"), std::string::npos)
          << refused.message();
      EXPECT_NE(refused.message().find("not a rung of the ladder"), std::string::npos)
          << refused.message();
    }
  }
}

// Limits that are not a SandboxLimits (a bare TransferLimits, a number) are refused where the
// reference refuses them — when a spec is checked — as TransferLimitsNotPermitted.
TEST(DeclaredBackend, UnreadableLimitsAreRefusedAtTheLimitsCheckNamingTheBackend) {
  const json::Json bare_caps = {
      {"max_bytes_per_file", 1024}, {"max_total_bytes", 4096}, {"max_files", 4}};
  for (const json::Json& limits :
       {bare_caps, json::Json(64), json::Json{{"files_in", {{"max_files", -1}}}}}) {
    auto declared = std::make_shared<DeclaredBackend>(json::Json{{"name", "planned"},
                                                                 {"isolation", "microvm"},
                                                                 {"egress_modes", {"closed"}},
                                                                 {"limits", limits}},
                                                      "planned.json");
    SandboxRouter router({declared});  // construction reads no limits
    try {
      router.ensure_can_serve(spec({}));
      FAIL() << "a spec was served by a declaration of limits " << limits.dump();
    } catch (const TransferLimitsNotPermitted& refused) {
      EXPECT_EQ(refused.check(), "transfer-limits");
      EXPECT_NE(refused.message().find("sandbox backend 'planned'"), std::string::npos)
          << refused.message();
      EXPECT_NE(refused.message().find("not a SandboxLimits"), std::string::npos)
          << refused.message();
    }
    // The checks before it still come first: a capability the declaration lacks is named.
    EXPECT_THROW(router.ensure_can_serve(
                     spec({.required_capabilities = CapabilitySet{Capability::run_code}})),
                 CapabilityNotSupported);
  }
}

}  // namespace
}  // namespace airlock::cli
