// The router and the ladder: a spec asking for hardened_container is served on gvisor and
// refused on linux (a plain container), both configured by their factories.
#include "airlock/router.hpp"

#include "airlock/backend_factory.hpp"
#include "airlock/errors.hpp"
#include "gvisor/fixture.hpp"

namespace airlock::gvisor_backend::testing {
namespace {

using Routing = GvisorBackendTest;

SandboxSpec hardened_spec() {
  SandboxSpec::Fields fields;
  fields.kind = "hardened";
  fields.image = "busybox";
  fields.min_isolation = airlock::Isolation::hardened_container;
  return SandboxSpec(fields);
}

TEST_F(Routing, HardenedContainerIsServedOnGvisorAndRefusedOnLinux) {
  AIRLOCK_REQUIRE_GVISOR();
  RouterOptions options;
  options.min_isolation = airlock::Isolation::container;  // the host's floor; the spec raises it

  SandboxRouter on_gvisor({backend_}, options);
  const RoutingDecision decision = on_gvisor.ensure_can_serve(hardened_spec());
  EXPECT_EQ(decision.backend, "gvisor");
  EXPECT_EQ(decision.effective_floor, airlock::Isolation::hardened_container);
  auto sandbox = on_gvisor.acquire(key_, hardened_spec());
  EXPECT_EQ(sh(*sandbox, "uname -r").stdout_bytes, "4.4.0\n");

  TemporaryDirectory linux_state("airlock-gvisor-router-linux");
  auto linux_backend =
      airlock::make_backend("linux", json::Json{{"state_dir", linux_state.path().string()}});
  SandboxRouter on_linux(std::vector<std::shared_ptr<SandboxBackend>>{linux_backend}, options);
  EXPECT_THROW(on_linux.ensure_can_serve(hardened_spec()), BackendNotPermitted);
  EXPECT_THROW(on_linux.acquire(key_, hardened_spec()), BackendNotPermitted);
  EXPECT_TRUE(linux_backend->list_sandboxes().empty()) << "linux ran something it refused";
  // Without the raise, linux serves the same kind: the refusal is the rung, nothing else.
  EXPECT_EQ(on_linux.ensure_can_serve(spec("plain")).backend, "linux");
}

}  // namespace
}  // namespace airlock::gvisor_backend::testing
