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
  EXPECT_EQ(refusal({{"name", "x"}, {"isolation", "process"}}), "declared.isolation");
  EXPECT_EQ(refusal({{"name", "x"}, {"isolation", "vm"}, {"type", "linux"}}), "declared.type");
  EXPECT_EQ(refusal({{"name", "x"}, {"isolation", "vm"}, {"egress_modes", "closed"}}),
            "declared.egress_modes");
  EXPECT_EQ(refusal({{"name", "x"}, {"isolation", "vm"}, {"limits", {{"files_up", {}}}}}),
            "declared.limits.files_up");
  EXPECT_EQ(refusal(json::Json::array()), "declared");
  EXPECT_EQ(refusal({{"name", "x"}, {"isolation", "vm"}}), "accepted");
}

}  // namespace
}  // namespace airlock::cli
