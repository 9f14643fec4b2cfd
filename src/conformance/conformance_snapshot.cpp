// The snapshot suite: a backend's snapshots attacked through routers built over it — what a
// resume keeps, what forks share, who may reach a snapshot, which checks a resume meets, and
// what is left once its conversation is gone.
#include <unistd.h>

#include <chrono>
#include <random>
#include <set>
#include <thread>

#include "airlock/encoding.hpp"
#include "airlock/router.hpp"
#include "conformance/conformance_internal.hpp"

namespace airlock::conformance {
namespace {

using Clock = std::chrono::steady_clock;
using detail::describe;
using detail::ProbeFailed;
using detail::ProbeSkipped;

[[noreturn]] void fail(const std::string& what) { throw ProbeFailed(what); }
void check(bool condition, const std::string& what) {
  if (!condition) fail(what);
}

std::string random_suffix() {
  std::random_device device;
  std::uniform_int_distribution<unsigned> digit(0, 15);
  std::string out;
  for (int i = 0; i < 12; ++i) out.push_back("0123456789abcdef"[digit(device)]);
  return out;
}

// A backend seen through a narrower declaration: every call is the real backend's, but it
// declares only `closed` egress. A resume routed over it must meet the router's egress check.
class ClosedOnly final : public SandboxBackend {
 public:
  explicit ClosedOnly(std::shared_ptr<SandboxBackend> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  Isolation isolation() const override { return inner_->isolation(); }
  std::optional<EgressSet> egress_modes() const override { return EgressSet{Egress::closed}; }
  std::optional<CapabilitySet> capabilities() const override { return inner_->capabilities(); }
  std::optional<SandboxLimits> limits() const override { return inner_->limits(); }
  std::optional<OsFamilySet> os_families() const override { return inner_->os_families(); }
  std::shared_ptr<Sandbox> acquire(const SandboxKey& key, const SandboxSpec& spec) override {
    return inner_->acquire(key, spec);
  }
  void dispose(const SandboxKey& key) noexcept override { inner_->dispose(key); }
  bool dispose_kind(const SandboxKey& key, std::string_view kind,
                    std::optional<std::string_view> instance_id) noexcept override {
    return inner_->dispose_kind(key, kind, instance_id);
  }
  int dispose_scope(std::string_view scope,
                    std::optional<std::string_view> thread_id) noexcept override {
    return inner_->dispose_scope(scope, thread_id);
  }
  std::optional<SnapshotContent> snapshot_content() const override {
    return inner_->snapshot_content();
  }
  std::shared_ptr<Sandbox> acquire_from_snapshot(const SandboxKey& key, const SandboxSpec& spec,
                                                 const SnapshotRecord& snapshot) override {
    return inner_->acquire_from_snapshot(key, spec, snapshot);
  }
  std::optional<SnapshotRecord> find_snapshot(std::string_view id) override {
    return inner_->find_snapshot(id);
  }
  std::vector<SnapshotRecord> list_snapshots() override { return inner_->list_snapshots(); }
  bool delete_snapshot(std::string_view id) noexcept override {
    return inner_->delete_snapshot(id);
  }

 private:
  std::shared_ptr<SandboxBackend> inner_;
};

struct Suite {
  const SnapshotSuiteOptions& options;
  SandboxRouter router;
  std::string scope;
  SandboxKey key(const std::string& thread, const std::string& agent) const {
    return SandboxKey{scope, thread, agent};
  }
  SandboxSpec spec(Egress egress = Egress::closed) const { return options.spec(egress); }
  const std::string& work() const { return options.work_dir; }

  ExecResult shell(Sandbox& sandbox, const std::string& line) const {
    ExecOptions exec;
    exec.working_directory = work();
    exec.timeout = options.exec_timeout;
    return sandbox.exec(Command::shell(line), exec);
  }
  std::string read(Sandbox& sandbox, const std::string& path) const {
    return sandbox.read_file(path, work(), 1 << 20);
  }
  // The conversation's sandboxes and snapshots as the backend's durable state lists them.
  std::size_t sandboxes_of(const std::string& thread) const {
    std::size_t count = 0;
    for (const auto& record : options.backend->list_sandboxes()) {
      const auto scope_label = record.labels.find("airlock.scope");
      const auto thread_label = record.labels.find("airlock.thread");
      if (scope_label != record.labels.end() && scope_label->second == map_label_value(scope) &&
          thread_label != record.labels.end() && thread_label->second == map_label_value(thread)) {
        ++count;
      }
    }
    return count;
  }
};

using SnapshotProbe = std::function<void(Suite&, std::string& note)>;

void files_survive_a_resume(Suite& s, std::string& note) {
  const SandboxKey key = s.key("t1", "/agent-a");
  auto sandbox = s.router.acquire(key, s.spec());
  sandbox->write_file("kept/state.txt", "written before the snapshot\n", s.work());
  check(s.shell(*sandbox, "printf made-by-a-command > kept/by-exec.txt").exit_code == 0,
        "the guest could not write its file");
  const SnapshotRecord record = s.router.snapshot(key, s.spec());
  check(record.id.rfind("snap-", 0) == 0, "the snapshot's id is \"" + record.id + "\"");
  check(record.kind == s.spec().kind(), "the snapshot records kind \"" + record.kind + "\"");
  // Written after the snapshot: a resume must not have it.
  sandbox->write_file("kept/later.txt", "written after the snapshot\n", s.work());
  const std::string source_instance = sandbox->instance_id();
  sandbox.reset();
  s.router.dispose(key);
  auto resumed = s.router.resume(key, s.spec(), record.id);
  check(resumed->instance_id() != source_instance,
        "the resume handed back the instance it was taken from");
  check(s.read(*resumed, "kept/state.txt") == "written before the snapshot\n",
        "the file written through the file plane did not survive");
  check(s.read(*resumed, "kept/by-exec.txt") == "made-by-a-command",
        "the file written by a command did not survive");
  check(!resumed->stat_file("kept/later.txt", s.work()),
        "a file written after the snapshot is in the resumed sandbox");
  note = std::string(to_string(record.content)) + ", " + std::to_string(record.bytes >> 10) +
         " KiB";
  s.router.delete_snapshot(key, record.id);
}

void processes_survive_a_resume(Suite& s, std::string& note) {
  if (s.options.backend->snapshot_content() != SnapshotContent::filesystem_and_memory) {
    throw ProbeSkipped("the backend's snapshots hold its files only (" +
                       std::string(to_string(SnapshotContent::filesystem)) + ")");
  }
  const SandboxKey key = s.key("t1", "/agent-memory");
  auto sandbox = s.router.acquire(key, s.spec());
  // A process started by one exec that outlives it, counting in memory only: its count keeps
  // climbing after a resume only if the process itself came back. Each count replaces the file
  // whole (a read never meets it truncated and not yet written).
  const ExecResult started = s.shell(
      *sandbox,
      "sh -c 'n=0; while :; do n=$((n+1)); echo $n > counter.new; mv counter.new counter; "
      "sleep 0.2; done' </dev/null >/dev/null 2>&1 & echo $!");
  check(started.exit_code == 0, "the background process did not start");
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  const std::string pid = started.stdout_text().substr(0, started.stdout_text().find('\n'));
  const SnapshotRecord record = s.router.snapshot(key, s.spec());
  s.router.dispose(key);
  sandbox.reset();
  auto resumed = s.router.resume(key, s.spec(), record.id);
  // A slow guest (under load, fork+exec in gVisor costs tens of milliseconds) may take a while
  // for its next count: the count is read until it moves, for up to 15 s.
  const std::string before = s.read(*resumed, "counter");
  std::string after = before;
  for (const auto until = Clock::now() + std::chrono::seconds(15);
       after == before && Clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    after = s.read(*resumed, "counter");
  }
  check(s.shell(*resumed, "kill -0 " + pid).exit_code == 0,
        "the process " + pid + " started before the snapshot is not running after the resume");
  check(std::stol(after) > std::stol(before),
        "the process's counter did not move after the resume (" + before + " then " + after +
            ")");
  note = "pid " + pid + " counted " + before.substr(0, before.size() - 1) + " → " +
         after.substr(0, after.size() - 1) + " after the resume";
  s.shell(*resumed, "kill " + pid);
  s.router.delete_snapshot(key, record.id);
}

void forks_diverge(Suite& s, std::string& note) {
  const SandboxKey source = s.key("t1", "/agent-source");
  auto sandbox = s.router.acquire(source, s.spec());
  sandbox->write_file("shared.txt", "from the source\n", s.work());
  const SnapshotRecord record = s.router.snapshot(source, s.spec());
  const SandboxKey left = s.key("t1", "/fork-left");
  const SandboxKey right = s.key("t1", "/fork-right");
  auto a = s.router.resume(left, s.spec(), record.id);
  auto b = s.router.resume(right, s.spec(), record.id);
  check(a->instance_id() != b->instance_id(), "two forks are one instance");
  check(s.read(*a, "shared.txt") == "from the source\n" &&
            s.read(*b, "shared.txt") == "from the source\n",
        "a fork does not hold the snapshot's file");
  a->write_file("shared.txt", "left's own\n", s.work());
  a->write_file("only-left.txt", "left\n", s.work());
  b->write_file("only-right.txt", "right\n", s.work());
  check(s.read(*b, "shared.txt") == "from the source\n",
        "the right fork sees the left fork's write to a shared file");
  check(!b->stat_file("only-left.txt", s.work()), "the right fork sees a file the left one made");
  check(!a->stat_file("only-right.txt", s.work()), "the left fork sees a file the right one made");
  check(s.read(*sandbox, "shared.txt") == "from the source\n" &&
            !sandbox->stat_file("only-left.txt", s.work()),
        "the source sandbox sees a fork's writes");
  // A third fork after the others wrote starts from the snapshot, not from them.
  auto c = s.router.resume(s.key("t1", "/fork-third"), s.spec(), record.id);
  check(s.read(*c, "shared.txt") == "from the source\n" && !c->stat_file("only-left.txt", s.work()),
        "a later fork holds an earlier fork's writes");
  note = "3 forks of " + record.id;
  s.router.delete_snapshot(source, record.id);
}

void another_conversation_cannot_reach_it(Suite& s, std::string& note) {
  const SandboxKey owner = s.key("t1", "/agent-owner");
  auto sandbox = s.router.acquire(owner, s.spec());
  sandbox->write_file("secret.txt", "conversation one's\n", s.work());
  const SnapshotRecord record = s.router.snapshot(owner, s.spec());
  const SandboxKey stranger = s.key("t2", "/agent-owner");
  const SandboxKey other_scope{s.scope + "-other", "t1", "/agent-owner"};
  for (const SandboxKey& key : {stranger, other_scope}) {
    const std::string who = "scope " + key.scope + " thread " + key.thread_id;
    try {
      s.router.resume(key, s.spec(), record.id);
      fail(who + " resumed another conversation's snapshot");
    } catch (const NotFound&) {
    } catch (const ProbeFailed&) {
      throw;
    } catch (const std::exception& error) {
      fail(who + "'s resume raised " + describe(error) + "; expected NotFound");
    }
    try {
      s.router.delete_snapshot(key, record.id);
      fail(who + " deleted another conversation's snapshot");
    } catch (const NotFound&) {
    } catch (const ProbeFailed&) {
      throw;
    } catch (const std::exception& error) {
      fail(who + "'s delete raised " + describe(error) + "; expected NotFound");
    }
    for (const auto& listed : s.router.list_snapshots(key.scope, key.thread_id)) {
      check(listed.id != record.id, who + " lists another conversation's snapshot");
    }
  }
  check(s.sandboxes_of("t2") == 0, "the refused resume left a sandbox of the other conversation");
  check(s.options.backend->find_snapshot(record.id).has_value(),
        "a refused delete removed the snapshot");
  bool listed = false;
  for (const auto& mine : s.router.list_snapshots(s.scope, std::string_view("t1"))) {
    listed = listed || mine.id == record.id;
  }
  check(listed, "the owner's own listing does not have its snapshot");
  note = "resume, delete and list refused to another thread and another scope";
  s.router.delete_snapshot(owner, record.id);
}

void another_posture_meets_the_routers_checks(Suite& s, std::string& note) {
  const SandboxKey key = s.key("t1", "/agent-posture");
  auto sandbox = s.router.acquire(key, s.spec(Egress::closed));
  const SnapshotRecord record = s.router.snapshot(key, s.spec(Egress::closed));
  check(record.egress_posture == "closed",
        "a closed sandbox's snapshot records posture \"" + record.egress_posture + "\"");
  // Over a declaration that cannot enforce an allowlist, the resume is refused before the
  // backend is reached, and nothing is made.
  SandboxRouter narrow({std::make_shared<ClosedOnly>(s.options.backend)},
                       RouterOptions{s.options.floor, std::nullopt, {}, {}});
  const std::size_t before = s.sandboxes_of("t1");
  try {
    narrow.resume(key, s.spec(Egress::allowlist), record.id);
    fail("a closed snapshot was resumed with allowlist egress where allowlist is not enforced");
  } catch (const EgressNotEnforced&) {
  } catch (const ProbeFailed&) {
    throw;
  } catch (const std::exception& error) {
    fail("the allowlist resume raised " + describe(error) + "; expected EgressNotEnforced");
  }
  check(s.sandboxes_of("t1") == before, "the refused resume made a sandbox");
  // A host that denies snapshots outright refuses the resume whatever the backend declares.
  RouterOptions denying{s.options.floor, std::nullopt, {Capability::snapshot}, {}};
  SandboxRouter denied({s.options.backend}, denying);
  try {
    denied.resume(key, s.spec(Egress::closed), record.id);
    fail("a host denying the snapshot capability resumed a snapshot");
  } catch (const CapabilityDenied&) {
  } catch (const ProbeFailed&) {
    throw;
  } catch (const std::exception& error) {
    fail("the denied resume raised " + describe(error) + "; expected CapabilityDenied");
  }
  std::string posture = "closed only";
  if (s.options.backend->egress_modes().value_or(EgressSet{}).contains(Egress::allowlist)) {
    // Where allowlist is enforced, the resumed sandbox runs under the spec's posture.
    sandbox.reset();
    s.router.dispose(key);
    auto resumed = s.router.resume(key, s.spec(Egress::allowlist), record.id);
    bool found = false;
    for (const auto& listed : s.options.backend->list_sandboxes()) {
      if (listed.instance_id == resumed->instance_id()) {
        found = true;
        check(listed.egress_posture.rfind("allowlist", 0) == 0,
              "the sandbox resumed under an allowlist spec runs under \"" +
                  listed.egress_posture + "\"");
      }
    }
    check(found, "the resumed sandbox is not in the backend's durable state");
    posture = "closed → allowlist resumed under the spec's posture";
  }
  note = "refused: allowlist where undeclared (EgressNotEnforced), snapshot denied "
         "(CapabilityDenied); " +
         posture;
  s.router.delete_snapshot(key, record.id);
}

void ids_never_name_paths(Suite& s, std::string& note) {
  const SandboxKey key = s.key("t1", "/agent-ids");
  const std::size_t before = s.sandboxes_of("t1");
  for (const std::string& id :
       {std::string("../../../etc"), std::string("/etc/passwd"), std::string("snap-"),
        std::string("snap-../../x"), std::string(".."), std::string(""),
        std::string("snap-000000000000000000000000")}) {
    try {
      s.router.resume(key, s.spec(), id);
      fail("the id \"" + id + "\" was resumed");
    } catch (const NotFound&) {
    } catch (const ProbeFailed&) {
      throw;
    } catch (const std::exception& error) {
      fail("the id \"" + id + "\" raised " + describe(error) + "; expected NotFound");
    }
  }
  check(s.sandboxes_of("t1") == before, "a refused id made a sandbox");
  note = "7 ids that are no snapshot: NotFound, nothing made";
}

void nothing_is_left_once_the_conversation_is_gone(Suite& s, std::string& note) {
  const SandboxKey key = s.key("t3", "/agent-gone");
  auto sandbox = s.router.acquire(key, s.spec());
  sandbox->write_file("x.txt", "x\n", s.work());
  const SnapshotRecord first = s.router.snapshot(key, s.spec());
  const SnapshotRecord second = s.router.snapshot(key, s.spec());
  auto fork = s.router.resume(s.key("t3", "/agent-fork"), s.spec(), first.id);
  sandbox.reset();
  fork.reset();
  s.router.dispose_scope(s.scope, std::string_view("t3"));
  check(s.router.list_snapshots(s.scope, std::string_view("t3")).empty(),
        "the conversation's snapshots are listed after its disposal");
  check(!s.options.backend->find_snapshot(first.id) && !s.options.backend->find_snapshot(second.id),
        "a snapshot is still found after its conversation's disposal");
  check(s.sandboxes_of("t3") == 0, "a sandbox of the conversation is left after its disposal");
  note = "2 snapshots and 2 sandboxes gone with dispose_scope";
}

}  // namespace

std::vector<ProbeResult> run_snapshot_conformance(const SnapshotSuiteOptions& options) {
  if (!options.backend) throw InvalidArgument("the snapshot suite needs a backend", "backend");
  if (!options.backend->capabilities().value_or(kDefaultCapabilities).contains(
          Capability::snapshot) ||
      !options.backend->snapshot_content()) {
    throw InvalidArgument("backend '" + options.backend->name() +
                              "' does not declare snapshot: the snapshot suite would attack "
                              "nothing",
                          "snapshot");
  }
  RouterOptions routing;
  routing.min_isolation = options.floor;
  routing.selected = options.backend->name();
  Suite suite{options, SandboxRouter({options.backend}, routing),
              "conformance-snapshot-" + random_suffix()};
  const std::vector<std::tuple<std::string, std::string, SnapshotProbe>> probes = {
      {"files-survive-a-resume",
       "what the guest wrote before the snapshot is there after a resume, and nothing written "
       "after it",
       files_survive_a_resume},
      {"processes-survive-a-resume",
       "a process running at the snapshot runs on after a resume (filesystem+memory only)",
       processes_survive_a_resume},
      {"forks-diverge",
       "forks of one snapshot start from it and never see each other's or the source's writes",
       forks_diverge},
      {"another-conversation-cannot-reach-it",
       "a key of another thread or scope can neither resume, delete nor list a snapshot",
       another_conversation_cannot_reach_it},
      {"a-resume-meets-the-routers-checks",
       "a closed snapshot resumed with allowlist egress is judged as any acquire: refused where "
       "allowlist is not enforced or snapshots are denied, and run under the spec's posture",
       another_posture_meets_the_routers_checks},
      {"ids-never-name-paths", "an id that is no snapshot (a path, a guess) is NotFound",
       ids_never_name_paths},
      {"nothing-is-left-once-the-conversation-is-gone",
       "dispose_scope removes the conversation's sandboxes and every snapshot it took",
       nothing_is_left_once_the_conversation_is_gone},
  };
  std::vector<ProbeResult> results;
  for (const auto& [name, why, run] : probes) {
    ProbeResult result;
    result.suite = "snapshot";
    result.probe = name;
    result.why = why;
    result.reference = false;
    const auto started = Clock::now();
    try {
      run(suite, result.note);
      result.outcome = ProbeOutcome::passed;
    } catch (const ProbeSkipped& skipped) {
      result.outcome = ProbeOutcome::skipped;
      result.detail = skipped.what();
    } catch (const ProbeFailed& failed) {
      result.outcome = ProbeOutcome::failed;
      result.detail = failed.what();
    } catch (const std::exception& error) {
      result.outcome = ProbeOutcome::failed;
      result.detail = "raised " + describe(error);
    }
    result.milliseconds =
        std::chrono::duration<double, std::milli>(Clock::now() - started).count();
    results.push_back(std::move(result));
  }
  // Whatever a probe left, the suite's conversations go (their snapshots with them).
  suite.router.dispose_scope(suite.scope, std::nullopt);
  suite.router.dispose_scope(suite.scope + "-other", std::nullopt);
  return results;
}

}  // namespace airlock::conformance
