// The gvisor backend's life cycle against a real runsc: acquire, exec, dispose, durable state
// another backend object (or process) can act on, get-or-create under concurrency, and a
// create made to fail on purpose leaving nothing behind.
#include <thread>

#include "airlock/backend_factory.hpp"
#include "airlock/errors.hpp"
#include "gvisor/fixture.hpp"

namespace airlock::gvisor_backend::testing {
namespace {

using Lifecycle = GvisorBackendTest;

TEST_F(Lifecycle, CommandsRunUnderGvisorsKernelWithSeparateStreams) {
  AIRLOCK_REQUIRE_GVISOR();
  auto sandbox = acquire(spec());
  // gVisor's Sentry answers uname with its own version, never the host kernel's.
  const ExecResult kernel = sh(*sandbox, "uname -r; echo to-stderr >&2; exit 7");
  EXPECT_EQ(kernel.exit_code, 7);
  EXPECT_EQ(kernel.stdout_bytes, "4.4.0\n") << kernel.stderr_bytes;
  EXPECT_EQ(kernel.stderr_bytes, "to-stderr\n");
  // The work dir exists (the keeper made it) and is the exec's working directory.
  EXPECT_EQ(sh(*sandbox, "pwd").stdout_bytes, std::string(kWork) + "\n");
  // Guest root is root inside, mapped to an unprivileged host uid outside.
  EXPECT_EQ(sh(*sandbox, "id -u").stdout_bytes, "0\n");
  // State written by one exec is seen by the next: one long-lived container.
  sh(*sandbox, "echo kept > note");
  EXPECT_EQ(sh(*sandbox, "cat note").stdout_bytes, "kept\n");
  // A process started in the background by one exec outlives it (host_tools relies on that).
  sh(*sandbox, "sleep 300 >/dev/null 2>&1 &");
  EXPECT_NE(sh(*sandbox, "pidof sleep").stdout_bytes, "");
  backend_->dispose(key_);
  EXPECT_TRUE(backend_->list_sandboxes().empty());
  EXPECT_THROW(sh(*sandbox, "true"), Error) << "a disposed sandbox must not run commands";
}

TEST_F(Lifecycle, ConcurrentAcquiresForOneKeyYieldOneContainer) {
  AIRLOCK_REQUIRE_GVISOR();
  std::vector<std::string> instances(4);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < instances.size(); ++i) {
    threads.emplace_back([&, i] { instances[i] = acquire(spec())->instance_id(); });
  }
  for (auto& thread : threads) thread.join();
  for (const auto& instance : instances) EXPECT_EQ(instance, instances.front());
  // A second backend object (as another process would) finds the same container, not a new one.
  auto other = make_backend();
  EXPECT_EQ(other->acquire(key_, spec())->instance_id(), instances.front());
  const auto listed = other->list_sandboxes();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed.front().state, "running");
}

TEST_F(Lifecycle, DurableStateLetsAnotherBackendDisposeAndPurge) {
  AIRLOCK_REQUIRE_GVISOR();
  acquire(spec("one"));
  acquire(spec("two"), SandboxKey{"other-scope", key_.thread_id, key_.agent_dir});
  // Nothing of the first backend's memory is used: a fresh object disposes by scope and purges.
  auto fresh = make_backend();
  ASSERT_EQ(fresh->list_sandboxes().size(), 2u);
  EXPECT_EQ(fresh->dispose_scope("other-scope", std::nullopt), 1);
  ASSERT_EQ(fresh->list_sandboxes().size(), 1u);
  EXPECT_EQ(fresh->list_sandboxes().front().kind, "one");
  EXPECT_EQ(fresh->purge_all(), 1);
  EXPECT_TRUE(fresh->list_sandboxes().empty());
  EXPECT_TRUE(processes_mentioning(state_->path().string()).empty());
}

TEST_F(Lifecycle, AFailedCreateLeavesNoProcessCgroupOrState) {
  AIRLOCK_REQUIRE_GVISOR();
  // A memory limit the Sentry cannot even start in makes runsc's create fail after it has
  // made cgroups and started processes.
  auto starved = make_backend([](GvisorBackendConfig& config) {
    config.default_resources.memory_bytes = std::uint64_t{1} << 20;
  });
  EXPECT_THROW(starved->acquire(key_, spec()), BackendError);
  EXPECT_TRUE(starved->list_sandboxes().empty());
  EXPECT_TRUE(processes_mentioning(state_->path().string()).empty());
  EXPECT_TRUE(cgroups_of_this_state().empty());
}

TEST(GvisorFactory, UnknownAndMalformedKeysAreRefusedByName) {
  try {
    make_backend("gvisor", json::Json{{"state_dir", "/tmp/x"}, {"colour", "blue"}});
    ADD_FAILURE() << "an unknown key was accepted";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("colour"), std::string::npos) << error.what();
  }
  EXPECT_THROW(make_backend("gvisor", json::Json{{"platform", "kvm-please"}}), InvalidArgument);
  EXPECT_THROW(make_backend("gvisor", json::Json{{"state_dir", "relative/dir"}}), InvalidArgument);
}

}  // namespace
}  // namespace airlock::gvisor_backend::testing
