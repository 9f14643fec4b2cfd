// `airlock bench` group "router": what the router adds to a warm acquire (SPEC §7: ≤ 10 µs).
//
// The same in-process backend is asked for the same warm sandbox directly and through the
// router, interleaved batch by batch so both meet the same machine state; the overhead is the
// difference of each pair (every check of the policy, the floor, the capability match, the
// transfer limits and the egress posture, run on every acquire).
#include <chrono>

#include "airlock/router.hpp"
#include "airlock/testing.hpp"
#include "bench.hpp"

namespace airlock::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kBatch = 2000;  // acquires per sample: one acquire is too short to time alone

template <typename Acquire>
double microseconds_per_acquire(Acquire&& acquire) {
  const auto start = Clock::now();
  for (int i = 0; i < kBatch; ++i) {
    if (!acquire()) throw std::runtime_error("acquire returned no sandbox");
  }
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count() / kBatch;
}

void run_router_group(BenchRun& run) {
  testing::InProcessBackendOptions options;
  options.name = "bench";
  options.isolation = Isolation::container;
  options.capabilities =
      CapabilitySet{Capability::exec, Capability::files_in, Capability::files_out};
  options.sandbox_per_key = true;
  auto backend = std::make_shared<testing::InProcessSandboxBackend>(options);
  SandboxRouter router({backend}, {.min_isolation = Isolation::container});
  SandboxSpec::Fields fields;
  fields.kind = "bench";
  fields.required_capabilities = CapabilitySet{Capability::exec, Capability::files_in};
  const SandboxSpec spec(fields);
  const SandboxKey key{"bench-router", "t", "a"};
  backend->acquire(key, spec);  // warm from here on

  Stats direct;
  direct.subject = "backend warm acquire (direct)";
  direct.unit = "µs";
  Stats routed;
  routed.subject = "router warm acquire";
  routed.unit = "µs";
  Stats overhead;
  overhead.subject = "router overhead per warm acquire";
  overhead.unit = "µs";
  for (int i = -3; i < run.iterations(200); ++i) {
    const double through_backend =
        microseconds_per_acquire([&] { return backend->acquire(key, spec); });
    const double through_router =
        microseconds_per_acquire([&] { return router.acquire(key, spec); });
    if (i < 0) continue;  // warm-up batches
    direct.samples.push_back(through_backend);
    routed.samples.push_back(through_router);
    overhead.samples.push_back(through_router - through_backend);
  }
  run.record(direct);
  run.record(routed);
  const Stats measured = run.record(overhead);
  Stats target;
  target.subject = "10 µs (target)";
  target.unit = "µs";
  target.samples = {10.0};
  const Stats ten = run.record(target);
  run.ratio("router overhead per warm acquire / 10 µs", measured, ten, 1.0);
  backend->purge_all();
}

const bool kRouterBenchGroup = register_bench_group(
    "router", "what the router's checks add to a warm acquire, vs the backend asked directly",
    run_router_group);

}  // namespace
}  // namespace airlock::bench
