// `airlock bench` group "router": what the router adds to a warm acquire (SPEC §7: ≤ 10 µs).
//
// The same backend is asked for the same warm sandbox directly and through the router,
// interleaved batch by batch so both meet the same machine state; the overhead is the difference
// of each pair (every check of the policy, the floor, the capability match, the transfer limits
// and the egress posture, run on every acquire).
#include <chrono>
#include <map>
#include <mutex>
#include <tuple>

#include "airlock/errors.hpp"
#include "airlock/router.hpp"
#include "bench.hpp"

namespace airlock::bench {
namespace {

using Clock = std::chrono::steady_clock;

// A sandbox that only exists to be handed out: the bench never runs anything in it.
class HeldSandbox final : public Sandbox {
 public:
  HeldSandbox(SandboxKey key, std::string kind) : key_(std::move(key)), kind_(std::move(kind)) {}
  std::string instance_id() const override { return "bench-router"; }
  const SandboxKey& key() const override { return key_; }
  const std::string& kind() const override { return kind_; }
  void write_file(std::string_view, std::string_view, std::string_view) override { refuse(); }
  ExecResult exec(const Command&, const ExecOptions&) override { refuse(); }
  ExecResult run_code(std::string_view, Milliseconds) override { refuse(); }
  std::optional<SandboxEntry> stat_file(std::string_view, std::string_view) override { refuse(); }
  std::string read_file(std::string_view, std::string_view, std::uint64_t) override { refuse(); }
  std::vector<SandboxEntry> list_dir(std::string_view, std::string_view) override { refuse(); }
  void remove(std::string_view, std::string_view, bool) override { refuse(); }

 private:
  [[noreturn]] static void refuse() {
    throw NotSupported("the router bench's sandbox runs nothing: it is only acquired");
  }
  SandboxKey key_;
  std::string kind_;
};

// Get-or-create per (key, kind, egress posture) under a lock, as a real backend's warm path is,
// and nothing else. It draws no boundary, so it declares none and the bench's floor is none:
// the floor check costs the same at every rung.
class WarmBackend final : public SandboxBackend {
 public:
  std::string name() const override { return "bench"; }
  Isolation isolation() const override { return Isolation::none; }
  std::optional<EgressSet> egress_modes() const override { return EgressSet{Egress::closed}; }
  std::optional<CapabilitySet> capabilities() const override {
    return CapabilitySet{Capability::exec, Capability::files_in, Capability::files_out};
  }
  std::shared_ptr<Sandbox> acquire(const SandboxKey& key, const SandboxSpec& spec) override {
    std::lock_guard lock(mutex_);
    auto& slot = warm_[{key, spec.kind(), spec.egress_posture()}];
    if (!slot) slot = std::make_shared<HeldSandbox>(key, spec.kind());
    return slot;
  }
  void dispose(const SandboxKey& key) noexcept override {
    std::lock_guard lock(mutex_);
    std::erase_if(warm_, [&](const auto& entry) { return std::get<0>(entry.first) == key; });
  }
  bool dispose_kind(const SandboxKey& key, std::string_view kind,
                    std::optional<std::string_view>) noexcept override {
    std::lock_guard lock(mutex_);
    std::erase_if(warm_, [&](const auto& entry) {
      return std::get<0>(entry.first) == key && std::get<1>(entry.first) == kind;
    });
    return true;
  }
  int dispose_scope(std::string_view scope, std::optional<std::string_view>) noexcept override {
    std::lock_guard lock(mutex_);
    return static_cast<int>(std::erase_if(
        warm_, [&](const auto& entry) { return std::get<0>(entry.first).scope == scope; }));
  }
  int purge_all() noexcept override {
    std::lock_guard lock(mutex_);
    const int count = static_cast<int>(warm_.size());
    warm_.clear();
    return count;
  }

 private:
  std::mutex mutex_;
  std::map<std::tuple<SandboxKey, std::string, std::string>, std::shared_ptr<HeldSandbox>> warm_;
};

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
  auto backend = std::make_shared<WarmBackend>();
  SandboxRouter router({backend}, {.min_isolation = Isolation::none});
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
