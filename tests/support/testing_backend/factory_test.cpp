// The `testing` backend from configuration: declarations read as the router reads a backend's
// (a rung off the ladder and unreadable limits are the router's refusals, not parse errors), and
// the faults a host's tests script, each doing what it says.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "airlock/backend_factory.hpp"
#include "airlock/errors.hpp"
#include "airlock/outputs.hpp"
#include "airlock/router.hpp"
#include "airlock/testing.hpp"

namespace airlock::testing {
namespace {

using json::Json;

const SandboxKey kKey{"tenant", "thread", "agent"};
constexpr const char* kWork = "/maf-sandbox/work";

SandboxSpec spec(SandboxSpec::Fields fields = {}) {
  if (fields.kind.empty()) fields.kind = "k";
  return SandboxSpec(std::move(fields));
}

std::shared_ptr<InProcessSandboxBackend> testing_backend(Json config) {
  if (!config.contains("isolation")) config["isolation"] = "container";
  auto backend = std::dynamic_pointer_cast<InProcessSandboxBackend>(
      make_backend("testing", config, "backend"));
  EXPECT_NE(backend, nullptr);
  return backend;
}

std::shared_ptr<InProcessSandbox> acquired(const std::shared_ptr<InProcessSandboxBackend>& backend,
                                           const SandboxSpec& s = spec()) {
  return std::dynamic_pointer_cast<InProcessSandbox>(backend->acquire(kKey, s));
}

const RouterOptions kContainerFloor{.min_isolation = Isolation::container};

TEST(TestingBackendConfig, ARungOffTheLadderIsRefusedByTheRouterOnlyWhenSelected) {
  const auto bogus = make_backend("testing", Json{{"name", "odd"}, {"isolation", "bogus"}});
  EXPECT_FALSE(is_known_rung(bogus->isolation()));
  try {
    SandboxRouter router({bogus}, {.min_isolation = Isolation::none});
    FAIL() << "a router selected a backend declaring isolation \"bogus\"";
  } catch (const BackendNotPermitted& refused) {
    EXPECT_EQ(refused.check(), "isolation-floor");
    EXPECT_NE(refused.message().find("sandbox backend 'odd'"), std::string::npos)
        << refused.message();
  }
  // Registered beside the selected backend, it is never floor-checked (the reference checks
  // only the selected one); it is reached by disposal alone.
  const auto good = testing_backend({{"name", "good"}});
  SandboxRouter router({good, bogus}, kContainerFloor);
  EXPECT_EQ(router.backend()->name(), "good");
  EXPECT_NO_THROW(router.ensure_can_serve(spec()));
}

TEST(TestingBackendConfig, UnreadableLimitsAreRefusedAtTheLimitsCheckNamingTheBackend) {
  const Json bare_caps = {{"max_bytes_per_file", 10}, {"max_total_bytes", 10}, {"max_files", 1}};
  for (const Json& limits : {bare_caps, Json("8MiB"), Json{{"files_out", {{"max_files", -1}}}}}) {
    const auto backend = make_backend(
        "testing", Json{{"name", "odd"}, {"isolation", "container"}, {"limits", limits}});
    SandboxRouter router({backend}, kContainerFloor);  // construction reads no limits
    try {
      router.acquire(kKey, spec());
      FAIL() << "acquired from a backend declaring limits " << limits.dump();
    } catch (const TransferLimitsNotPermitted& refused) {
      EXPECT_EQ(refused.check(), "transfer-limits");
      EXPECT_NE(refused.message().find("sandbox backend 'odd'"), std::string::npos)
          << refused.message();
    }
  }
  // A readable declaration is as before.
  const Json one_file = {{"max_bytes_per_file", 1}, {"max_total_bytes", 1}, {"max_files", 1}};
  const auto readable = testing_backend(Json{{"limits", Json{{"files_in", one_file}}}});
  EXPECT_EQ(readable->limits()->files_in.max_files, 1u);
}

TEST(TestingBackendConfig, EveryOtherWrongShapeIsAParseErrorNamingTheField) {
  auto refusal = [](Json config) {
    try {
      make_backend("testing", config, "backend");
    } catch (const InvalidArgument& refused) {
      return refused.check();
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refusal({{"os_families", {"beos"}}}), "backend.os_families[0]");
  EXPECT_EQ(refusal({{"egress_modes", "closed"}}), "backend.egress_modes");
  EXPECT_EQ(refusal({{"raises", {{"type", "NoSuchError"}}}}), "backend.raises.type");
  EXPECT_EQ(refusal({{"acquire_error", "Timeout"}}), "backend.acquire_error");
  EXPECT_EQ(refusal({{"stat_sizes", {{"relative.txt", 3}}}}), "backend.stat_sizes.relative.txt");
  EXPECT_EQ(refusal({{"stat_sizes", {{"/a.txt", -3}}}}), "backend.stat_sizes./a.txt");
  EXPECT_EQ(refusal({{"seed_files", {{"/d", {{"kind", "directory"}, {"content", "x"}}}}}}),
            "backend.seed_files./d.content");
  EXPECT_EQ(refusal({{"outputs", {{{"stdout", "no marker"}}}}}), "backend.outputs[0]");
  EXPECT_EQ(refusal({{"read_hang_seconds", 0}}), "backend.read_hang_seconds");
  EXPECT_EQ(refusal({{"colour", "blue"}}), "backend.colour");
}

TEST(TestingBackendConfig, ExecRecordsThenRaisesThenAnswersFromTheScript) {
  const auto backend = testing_backend(
      {{"outputs", Json::array({{{"marker", "python3"}, {"stdout", "first"}},
                                {{"marker", "python3 -c"}, {"stdout", "second"}, {"exit_code", 3}},
                                {{"marker", "printf"}, {"stdout", "scripted, not emulated"}}})},
       {"default_stdout", "nothing matched"}});
  const auto sandbox = acquired(backend);
  ExecOptions options;
  options.working_directory = "/";
  options.timeout = Milliseconds(7000);
  // The first marker that matches answers, in the order given; a scripted marker answers
  // before the emulator would run the command.
  EXPECT_EQ(sandbox->exec(Command::shell("python3 -c 1"), options).stdout_bytes, "first");
  EXPECT_EQ(sandbox->exec(Command::argv({"printf", "x"}), options).stdout_bytes,
            "scripted, not emulated");
  EXPECT_EQ(sandbox->exec(Command::shell("node x.js"), options).stdout_bytes, "nothing matched");
  EXPECT_EQ(sandbox->run_code("import python3", Milliseconds(2000)).stdout_bytes, "first");

  sandbox->set_exec_error(std::make_exception_ptr(BackendError("the provider went away")));
  EXPECT_THROW(sandbox->exec(Command::argv({"printf", "it ran"}), options), BackendError);
  const auto commands = sandbox->commands();
  ASSERT_EQ(commands.size(), 4u) << "a raising exec must still be recorded";
  EXPECT_EQ(commands.back().command, "'printf' 'it ran'");  // an argv, POSIX-quoted
  EXPECT_EQ(commands.back().working_directory, "/");
  EXPECT_EQ(commands.back().timeout, Milliseconds(7000));
}

TEST(TestingBackendConfig, RaisesAndAcquireErrorsAreTheNamedKinds) {
  const auto backend = testing_backend({{"raises", {{"type", "Timeout"}, {"message", "hung"}}},
                                        {"acquire_error", {{"type", "BackendError"}}}});
  EXPECT_THROW(backend->acquire(kKey, spec()), BackendError);
  EXPECT_TRUE(backend->keys().empty()) << "a failed acquire must record nothing";
  backend->set_acquire_error(nullptr);
  const auto sandbox = acquired(backend);
  ExecOptions options;
  options.working_directory = "/";
  try {
    sandbox->exec(Command::argv({"true"}), options);
    FAIL() << "the scripted Timeout was not raised";
  } catch (const Timeout& timeout) {
    EXPECT_EQ(timeout.message(), "hung");
  }
  EXPECT_EQ(backend->keys().size(), 1u);
}

TEST(TestingBackendConfig, SeedsPlantFilesDirectoriesLinksAndOtherEntries) {
  const auto backend = testing_backend(
      {{"seed_files",
        {{"/maf-sandbox/work/a.txt", "alpha"},
         {"/maf-sandbox/work/d", {{"kind", "directory"}}},
         {"/maf-sandbox/work/link", {{"kind", "symlink"}, {"target", "/etc/passwd"}}},
         {"/maf-sandbox/work/fifo", {{"kind", "other"}}}}}});
  const auto sandbox = acquired(backend);
  EXPECT_EQ(sandbox->read_file("a.txt", kWork, 100), "alpha");
  EXPECT_EQ(sandbox->stat_file("d", kWork)->kind, EntryKind::directory);
  EXPECT_EQ(sandbox->stat_file("link", kWork)->kind, EntryKind::symlink);
  EXPECT_EQ(sandbox->stat_file("fifo", kWork)->kind, EntryKind::other);
  EXPECT_THROW(sandbox->read_file("link", kWork, 100), SystemError);
}

TEST(TestingBackendConfig, AMisreportedSizeIsWhatStatAndListSay) {
  const auto backend = testing_backend(
      {{"stat_sizes", {{"/maf-sandbox/work/a.txt", 2}, {"/maf-sandbox/work/b.txt", nullptr}}}});
  const auto sandbox = acquired(backend);
  sandbox->write_file("a.txt", "abcdef", kWork);
  sandbox->write_file("b.txt", "abc", kWork);
  EXPECT_EQ(sandbox->stat_file("a.txt", kWork)->size_bytes, 2u);
  EXPECT_EQ(sandbox->stat_file("b.txt", kWork)->size_bytes, std::nullopt);
  const auto entries = sandbox->list_dir(".", kWork);
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].size_bytes, 2u);
  EXPECT_EQ(entries[1].size_bytes, std::nullopt);
  sandbox->report_true_sizes();
  EXPECT_EQ(sandbox->stat_file("a.txt", kWork)->size_bytes, 6u);
}

TEST(TestingBackendConfig, AHungReadEndsAtItsBoundOrWhenReleased) {
  const auto backend = testing_backend(
      {{"hanging_reads", {"/maf-sandbox/work/slow.txt"}}, {"read_hang_seconds", 0.2}});
  const auto sandbox = acquired(backend);
  sandbox->write_file("slow.txt", "finally", kWork);
  const auto started = std::chrono::steady_clock::now();
  EXPECT_THROW(sandbox->read_file("slow.txt", kWork, 100), Timeout);
  EXPECT_GE(std::chrono::steady_clock::now() - started, Milliseconds(200));

  sandbox->hang_reads("/maf-sandbox/work/slow.txt", Milliseconds(20'000));
  auto read =
      std::async(std::launch::async, [&] { return sandbox->read_file("slow.txt", kWork, 100); });
  while (sandbox->hanging_reads() == 0) std::this_thread::sleep_for(Milliseconds(5));
  // Other calls go on while a read hangs.
  EXPECT_EQ(sandbox->stat_file("slow.txt", kWork)->size_bytes, 7u);
  sandbox->release_reads();
  EXPECT_EQ(read.get(), "finally");
  EXPECT_EQ(sandbox->read_file("slow.txt", kWork, 100), "finally") << "released reads hang again";
}

TEST(TestingBackendConfig, AFailingDisposalRemovesNothingAndSaysSo) {
  const auto backend = testing_backend({{"dispose_fails", true}});
  const auto sandbox = acquired(backend);
  SandboxRouter router({backend}, kContainerFloor);
  EXPECT_FALSE(router.dispose_kind(kKey, "k", sandbox->instance_id()));
  EXPECT_EQ(router.dispose_scope("tenant", "thread"), 0);
  router.dispose(kKey);
  EXPECT_EQ(backend->live_sandboxes().size(), 1u) << "a failed disposal removed the sandbox";
  EXPECT_EQ(backend->disposed().size(), 1u);
  EXPECT_EQ(backend->disposed_kinds().size(), 1u);
  EXPECT_EQ(backend->purged().size(), 1u);
  backend->set_dispose_fails(false);
  EXPECT_TRUE(router.dispose_kind(kKey, "k", sandbox->instance_id()));
  EXPECT_TRUE(backend->live_sandboxes().empty());
}

TEST(TestingBackendConfig, TheSharedSandboxAndThePurgeCountAreTheReferenceFakes) {
  const auto backend = testing_backend({{"shared_sandbox", true}, {"purge_count", 3}});
  const auto first = backend->acquire(kKey, spec({.kind = "a"}));
  const auto second = backend->acquire({"other", "thread", "agent"}, spec({.kind = "b"}));
  EXPECT_EQ(first, second) << "the reference fake hands out one sandbox for every key and kind";
  EXPECT_EQ(backend->dispose_scope("tenant", std::nullopt), 3);
}

}  // namespace
}  // namespace airlock::testing
