// The call lifecycle under concurrency: admission, exclusive calls, and condemned instances whose
// delete runs only after the last call in flight has left.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <latch>
#include <mutex>
#include <set>
#include <thread>

#include "airlock/errors.hpp"
#include "airlock/router.hpp"
#include "airlock/testing.hpp"

namespace airlock {
namespace {

using namespace std::chrono_literals;
using testing::InProcessBackendOptions;
using testing::InProcessSandboxBackend;

// Records, in order, when each delete of the backend began — and what was in flight then.
class ObservedBackend : public InProcessSandboxBackend {
 public:
  explicit ObservedBackend(InProcessBackendOptions options)
      : InProcessSandboxBackend(std::move(options)) {}

  bool dispose_kind(const SandboxKey& key, std::string_view kind,
                    std::optional<std::string_view> instance_id) noexcept override {
    {
      std::lock_guard lock(mutex);
      deletes.emplace_back(instance_id ? std::string(*instance_id) : "", in_flight.load());
      if (instance_id) deleted.insert(std::string(*instance_id));
    }
    std::this_thread::sleep_for(delete_duration);
    {
      // A closed gate holds the delete until the test opens it (bounded, so a broken test ends).
      std::unique_lock lock(mutex);
      gate.wait_for(lock, 10s, [&] { return !gate_closed; });
    }
    const bool disposed = InProcessSandboxBackend::dispose_kind(key, kind, instance_id);
    std::lock_guard lock(mutex);
    if (instance_id) finished.insert(std::string(*instance_id));
    return disposed;
  }

  bool delete_finished(const std::string& instance) {
    std::lock_guard lock(mutex);
    return finished.contains(instance);
  }

  void open_gate() {
    {
      std::lock_guard lock(mutex);
      gate_closed = false;
    }
    gate.notify_all();
  }

  bool was_deleted(const std::string& instance) {
    std::lock_guard lock(mutex);
    return deleted.contains(instance);
  }

  std::mutex mutex;
  std::vector<std::pair<std::string, int>> deletes;  // (instance, calls in flight at the time)
  std::set<std::string> deleted;                     // deletes begun
  std::set<std::string> finished;                    // deletes whose backend call returned
  std::condition_variable gate;
  bool gate_closed = false;
  std::atomic<int> in_flight{0};
  std::chrono::milliseconds delete_duration{0};
};

InProcessBackendOptions per_key_options() {
  InProcessBackendOptions options;
  options.name = "observed";
  options.isolation = Isolation::container;
  options.egress_modes = EgressSet{Egress::closed};
  options.sandbox_per_key = true;
  return options;
}

struct Fixture {
  std::shared_ptr<ObservedBackend> backend = std::make_shared<ObservedBackend>(per_key_options());
  SandboxRouter router{{backend}, {.min_isolation = Isolation::container}};
  SandboxKey key{"tenant", "thread", "agent"};
  SandboxSpec spec{SandboxSpec::Fields{.kind = "shell"}};
};

TEST(CallLifecycle, ConcurrentCallsAreAdmittedTogether) {
  Fixture f;
  auto first = f.router.enter_call(f.key, f.spec);
  auto second = f.router.enter_call(f.key, f.spec, {.timeout = 100ms});
  EXPECT_EQ(f.router.calls_in_flight(f.key, "shell"), 2);
  first.release();
  second.release();
  EXPECT_EQ(f.router.calls_in_flight(f.key, "shell"), 0);
}

TEST(CallLifecycle, AnExclusiveCallWaitsForEveryOtherCallToLeave) {
  Fixture f;
  auto shared = std::make_unique<CallAdmission>(f.router.enter_call(f.key, f.spec));
  std::atomic<bool> admitted{false};
  std::jthread closer([&] {
    auto exclusive = f.router.enter_call(f.key, f.spec, {.exclusive = true, .timeout = 5s});
    admitted = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(admitted) << "the exclusive call was admitted beside a call in flight";
  shared.reset();
  closer.join();
  EXPECT_TRUE(admitted);
}

TEST(CallLifecycle, SharedCallsQueueBehindAWaitingExclusiveCall) {
  Fixture f;
  auto shared = std::make_unique<CallAdmission>(f.router.enter_call(f.key, f.spec));
  std::jthread closer([&] {
    auto exclusive = f.router.enter_call(f.key, f.spec, {.exclusive = true, .timeout = 5s});
    std::this_thread::sleep_for(50ms);
  });
  std::this_thread::sleep_for(50ms);  // let the exclusive call start waiting
  // A newcomer must not starve the close: it waits behind it, and times out here.
  EXPECT_THROW((void)f.router.enter_call(f.key, f.spec, {.timeout = 50ms}), QueuedTimeout);
  shared.reset();
  closer.join();
  EXPECT_NO_THROW((void)f.router.enter_call(f.key, f.spec, {.timeout = 1s}));
}

TEST(CallLifecycle, AdmissionThatCannotHappenInTimeIsAQueuedTimeout) {
  Fixture f;
  auto exclusive = f.router.enter_call(f.key, f.spec, {.exclusive = true});
  try {
    (void)f.router.enter_call(f.key, f.spec, {.timeout = 30ms});
    FAIL();
  } catch (const QueuedTimeout& timeout) {
    EXPECT_EQ(timeout.type(), "SandboxQueuedTimeout");
  }
  // A queued timeout is a timeout.
  EXPECT_THROW((void)f.router.enter_call(f.key, f.spec, {.timeout = 1ms}), Timeout);
}

TEST(CallLifecycle, AStopRequestEndsTheWait) {
  Fixture f;
  auto exclusive = f.router.enter_call(f.key, f.spec, {.exclusive = true});
  std::stop_source stop;
  std::jthread canceller([&] {
    std::this_thread::sleep_for(30ms);
    stop.request_stop();
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW((void)f.router.enter_call(f.key, f.spec, {.timeout = 10s, .stop = stop.get_token()}),
               QueuedTimeout);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(CallLifecycle, ACondemnedInstanceIsDeletedOnlyAfterTheLastCallLeaves) {
  Fixture f;
  auto condemning = f.router.enter_call(f.key, f.spec);
  auto bystander = f.router.enter_call(f.key, f.spec);
  const std::string instance = condemning.acquire()->instance_id();
  EXPECT_EQ(bystander.acquire()->instance_id(), instance);

  condemning.condemn();
  condemning.release();
  EXPECT_FALSE(f.backend->was_deleted(instance))
      << "the delete ran while a parallel call was still in flight";
  bystander.release();
  EXPECT_TRUE(f.backend->was_deleted(instance));

  auto later = f.router.enter_call(f.key, f.spec);
  EXPECT_NE(later.acquire()->instance_id(), instance) << "a later call reached the deleted one";
}

TEST(CallLifecycle, ALaterCallWaitsForTheQueuedDeleteToFinish) {
  Fixture f;
  f.backend->delete_duration = 200ms;
  auto call = f.router.enter_call(f.key, f.spec);
  const std::string instance = call.acquire()->instance_id();
  call.condemn();
  std::jthread leaver([&] { call.release(); });  // runs the 200 ms delete on this thread
  // Whether the next call arrives before, during or after the delete, it is admitted only once
  // the delete has returned.
  auto next = f.router.enter_call(f.key, f.spec, {.timeout = 5s});
  EXPECT_TRUE(f.backend->delete_finished(instance))
      << "a call was admitted while the delete was still running";
}

TEST(CallLifecycle, ABackgroundReleaseRunsTheDeleteWithoutTheCaller) {
  Fixture f;
  f.backend->gate_closed = true;  // the delete cannot finish until the test says so
  auto call = f.router.enter_call(f.key, f.spec);
  const std::string instance = call.acquire()->instance_id();
  call.condemn();
  call.release(/*in_background=*/true);
  // Had the caller waited for the delete, it would have returned only when the gate timed out,
  // with the delete finished.
  EXPECT_FALSE(f.backend->delete_finished(instance))
      << "the caller waited for the delete it handed off";
  f.backend->open_gate();
  auto next = f.router.enter_call(f.key, f.spec, {.timeout = 15s});  // waits for it
  EXPECT_TRUE(f.backend->delete_finished(instance));
}

TEST(CallLifecycle, CondemningTwiceQueuesOneDelete) {
  Fixture f;
  {
    auto a = f.router.enter_call(f.key, f.spec);
    auto b = f.router.enter_call(f.key, f.spec);
    a.acquire();
    b.acquire();
    a.condemn();
    a.condemn();
    b.condemn();
  }
  EXPECT_EQ(f.backend->deletes.size(), 1u);
}

TEST(CallLifecycle, ManyThreadsEnteringAndLeavingNeverSeeTheirInstanceDeletedUnderThem) {
  Fixture f;
  constexpr int kThreads = 16;
  constexpr int kCallsEach = 200;
  std::atomic<int> violations{0};
  std::atomic<int> condemned{0};
  std::latch start(kThreads);
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        start.arrive_and_wait();
        for (int i = 0; i < kCallsEach; ++i) {
          auto call = f.router.enter_call(f.key, f.spec, {.timeout = 30s});
          ++f.backend->in_flight;
          const std::string instance = call.acquire()->instance_id();
          if (f.backend->was_deleted(instance)) ++violations;  // handed a deleted instance
          if ((i + t) % 37 == 0) {
            call.condemn();
            ++condemned;
          }
          std::this_thread::yield();
          if (f.backend->was_deleted(instance)) ++violations;  // deleted while in flight
          --f.backend->in_flight;
          call.release(/*in_background=*/(i % 2) == 0);
        }
      });
    }
  }
  // Drain background deletes.
  { auto last = f.router.enter_call(f.key, f.spec, {.exclusive = true, .timeout = 30s}); }
  EXPECT_EQ(violations.load(), 0);
  EXPECT_GT(condemned.load(), 0);
  for (const auto& [instance, in_flight] : f.backend->deletes) {
    EXPECT_EQ(in_flight, 0) << "instance " << instance << " was deleted with calls in flight";
  }
  EXPECT_EQ(f.router.calls_in_flight(f.key, "shell"), 0);
}

TEST(CallLifecycle, DifferentKindsOfOneKeyAreIndependentLanes) {
  Fixture f;
  SandboxSpec other{SandboxSpec::Fields{.kind = "other"}};
  auto exclusive = f.router.enter_call(f.key, f.spec, {.exclusive = true});
  EXPECT_NO_THROW((void)f.router.enter_call(f.key, other, {.timeout = 50ms}));
}

}  // namespace
}  // namespace airlock
