// Snapshots of docker sandboxes attacked, on whichever engine DOCKER_HOST names: what a resume
// keeps (the storage places' files), what forks share (nothing after the snapshot), who may reach
// a snapshot (its own conversation; never a spec that names its image), whether the source runs
// on, and what is left once the conversation is gone (no image, reader or container).
#include <set>
#include <thread>

#include "airlock/encoding.hpp"
#include "airlock/router.hpp"
#include "backends/docker/snapshots.hpp"
#include "engine_fixture.hpp"

namespace airlock::docker::test {
namespace {

class DockerSnapshot : public EngineTest {
 protected:
  SandboxRouter router() {
    RouterOptions options;
    options.min_isolation = Isolation::os_process;
    return SandboxRouter({backend_}, options);
  }
  // The engine's snapshot images and readers of this test's scope.
  std::size_t snapshot_images() {
    return list_images(*client_, {{"airlock.backend", "docker"},
                                  {"airlock.role", kRoleSnapshot},
                                  {"airlock.scope", map_label_value(scope_)}})
        .size();
  }
  std::size_t containers_of_scope() {
    return list_containers(*client_, {{"airlock.backend", "docker"},
                                      {"airlock.scope", map_label_value(scope_)}})
        .size();
  }
  std::string text(Sandbox& sandbox, const std::string& line) {
    return sh(sandbox, line, kWork).stdout_text();
  }
};

TEST(DockerSnapshotDeclaration, FilesystemSnapshotsOnlyWithAReadOnlyRootUnderRunc) {
  DockerConfig config;
  config.host = "unix:///nonexistent/docker.sock";
  EXPECT_EQ(DockerBackend(config).snapshot_content(), SnapshotContent::filesystem);
  EXPECT_TRUE(DockerBackend(config).capabilities()->contains(Capability::snapshot));
  // A writable root puts guest writes where no snapshot reads them.
  config.read_only_rootfs = false;
  EXPECT_FALSE(DockerBackend(config).snapshot_content());
  EXPECT_FALSE(DockerBackend(config).capabilities()->contains(Capability::snapshot));
  // Under runsc the engine's view of a place need not be the guest's.
  config.read_only_rootfs = true;
  config.runtime = "runsc";
  EXPECT_FALSE(DockerBackend(config).snapshot_content());
  EXPECT_FALSE(DockerBackend(config).capabilities()->contains(Capability::snapshot));
}

TEST_F(DockerSnapshot, FilesSurviveAResumeAndLaterWritesDoNot) {
  auto source = acquire();
  make_work(*source);
  ASSERT_EQ(sh(*source,
               "echo kept > kept.txt; mkdir -p deep/er && echo deep > deep/er/d.txt; "
               "chmod 640 deep/er/d.txt; ln -s kept.txt link; echo tmp > /tmp/t.txt; "
               "head -c 300000 /dev/urandom > blob; md5sum blob > blob.md5",
               kWork)
                .exit_code,
            0);
  const SnapshotRecord snapshot = source->snapshot();
  EXPECT_EQ(snapshot.content, SnapshotContent::filesystem);
  EXPECT_GT(snapshot.bytes, 300000u);
  // The source runs on after its snapshot, and its later writes are its own.
  EXPECT_EQ(text(*source, "cat kept.txt"), "kept\n");
  sh(*source, "echo later > later.txt", kWork);
  const std::string source_id = source->instance_id();
  source.reset();
  backend_->dispose(key());

  auto resumed = backend_->acquire_from_snapshot(key(), spec(), snapshot);
  EXPECT_NE(resumed->instance_id(), source_id);
  EXPECT_EQ(text(*resumed, "cat kept.txt deep/er/d.txt /tmp/t.txt"), "kept\ndeep\ntmp\n");
  EXPECT_EQ(text(*resumed, "md5sum -c blob.md5 >/dev/null && echo intact"), "intact\n");
  EXPECT_EQ(text(*resumed, "stat -c %a deep/er/d.txt"), "640\n");
  EXPECT_EQ(text(*resumed, "readlink link"), "kept.txt\n");
  EXPECT_NE(sh(*resumed, "test -e later.txt", kWork).exit_code, 0)
      << "a file written after the snapshot is in the resumed sandbox";
  // The resumed sandbox is a sandbox like any other: hardened, writable where it should be.
  EXPECT_EQ(sh(*resumed, "echo new > new.txt", kWork).exit_code, 0);
  EXPECT_NE(sh(*resumed, "touch /etc/planted").exit_code, 0) << "the root is writable";
}

TEST_F(DockerSnapshot, TheSourceRunsOnAndItsProcessesAreNotLeftStopped) {
  auto source = acquire();
  make_work(*source);
  sh(*source,
     "sh -c 'n=0; while :; do n=$((n+1)); echo $n > counter.new; mv counter.new counter; "
     "sleep 0.2; done' </dev/null >/dev/null 2>&1 &",
     kWork);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  source->snapshot();
  const long before = std::stol(text(*source, "cat counter"));
  long after = before;
  for (int poll = 0; poll < 50 && after == before; ++poll) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    after = std::stol(text(*source, "cat counter"));
  }
  EXPECT_GT(after, before) << "the source's background process did not run on after the snapshot";
  const auto states = process_states(*client_, source->instance_id(),
                                     podman() ? EngineFlavour::podman : EngineFlavour::docker);
  ASSERT_TRUE(states);
  for (const auto& state : *states) EXPECT_NE(state, "T") << "a process is left stopped";
  EXPECT_FALSE(inspect(source->instance_id())->paused) << "the container is left frozen";
}

TEST_F(DockerSnapshot, ForksDiverge) {
  auto source = acquire();
  make_work(*source);
  sh(*source, "echo from-source > shared.txt", kWork);
  const SnapshotRecord snapshot = source->snapshot();
  auto a = backend_->acquire_from_snapshot(key("thread-1", "/fork-left"), spec(), snapshot);
  auto b = backend_->acquire_from_snapshot(key("thread-1", "/fork-right"), spec(), snapshot);
  EXPECT_NE(a->instance_id(), b->instance_id());
  sh(*a, "echo left > shared.txt; echo left > only-left.txt", kWork);
  sh(*b, "echo right > only-right.txt", kWork);
  EXPECT_EQ(text(*b, "cat shared.txt"), "from-source\n");
  EXPECT_NE(sh(*b, "test -e only-left.txt", kWork).exit_code, 0);
  EXPECT_NE(sh(*a, "test -e only-right.txt", kWork).exit_code, 0);
  EXPECT_EQ(text(*source, "cat shared.txt"), "from-source\n");
  auto c = backend_->acquire_from_snapshot(key("thread-1", "/fork-third"), spec(), snapshot);
  EXPECT_EQ(text(*c, "cat shared.txt"), "from-source\n");
  EXPECT_NE(sh(*c, "test -e only-left.txt", kWork).exit_code, 0);
}

TEST_F(DockerSnapshot, AnotherConversationCannotResumeDeleteOrListIt) {
  SandboxRouter routed = router();
  auto sandbox = routed.acquire(key(), spec());
  make_work(*sandbox);
  sh(*sandbox, "echo conversation-one > secret.txt", kWork);
  const SnapshotRecord snapshot = routed.snapshot(key(), spec());
  const std::size_t containers_before = containers_of_scope();
  for (const SandboxKey& stranger :
       {key("thread-2"), SandboxKey{scope_ + "-other", "thread-1", "/agent"}}) {
    EXPECT_THROW(routed.resume(stranger, spec(), snapshot.id), NotFound);
    EXPECT_THROW(routed.delete_snapshot(stranger, snapshot.id), NotFound);
    for (const auto& listed : routed.list_snapshots(stranger.scope, stranger.thread_id)) {
      EXPECT_NE(listed.id, snapshot.id);
    }
  }
  EXPECT_EQ(containers_of_scope(), containers_before) << "a refused resume made a container";
  EXPECT_TRUE(backend_->find_snapshot(snapshot.id));
  for (const char* id : {"../x", "snap-../../x", "airlock-snapshot", "snap-00000000000000000000000g"}) {
    EXPECT_FALSE(backend_->find_snapshot(id)) << id;
  }
  auto mine = routed.resume(key("thread-1", "/another-agent"), spec(), snapshot.id);
  EXPECT_EQ(text(*mine, "cat secret.txt"), "conversation-one\n");
  backend_->dispose_scope(scope_ + "-other", std::nullopt);
}

TEST_F(DockerSnapshot, ASnapshotsImageIsNeverASpecsImage) {
  auto sandbox = acquire();
  make_work(*sandbox);
  sh(*sandbox, "echo secret > secret.txt", kWork);
  const SnapshotRecord snapshot = sandbox->snapshot();
  const auto stored = find_snapshot_image(*client_, snapshot.id);
  ASSERT_TRUE(stored);
  // Another conversation naming the image — by its tag, its id or a prefix of it — gets no
  // sandbox of it.
  const SandboxKey stranger{scope_ + "-stranger", "thread-1", "/agent"};
  const std::string tag = std::string(kSnapshotRepository) + ":" + snapshot.id;
  const std::string short_id = stored->image_id.substr(7, 12);
  for (const std::string& image : {tag, stored->image_id, short_id}) {
    SandboxSpec::Fields fields = spec().fields();
    fields.image = image;
    EXPECT_THROW(backend_->acquire(stranger, SandboxSpec(fields)), InvalidArgument) << image;
    fields.image.reset();
    fields.image_id = image;
    EXPECT_THROW(backend_->acquire(stranger, SandboxSpec(fields)), InvalidArgument) << image;
  }
  EXPECT_TRUE(list_containers(*client_, {{"airlock.backend", "docker"},
                                         {"airlock.scope", map_label_value(stranger.scope)}})
                  .empty());
  // The image carries its conversation, and nothing of it is named after the conversation.
  EXPECT_EQ(stored->record.labels.at("airlock.scope"), map_label_value(scope_));
  EXPECT_EQ(stored->record.labels.at("airlock.thread"), map_label_value("thread-1"));
  EXPECT_EQ(stored->record.labels.at("airlock.role"), kRoleSnapshot);
}

TEST_F(DockerSnapshot, NothingIsLeftAfterDisposeScope) {
  SandboxRouter routed = router();
  auto sandbox = routed.acquire(key(), spec());
  make_work(*sandbox);
  sh(*sandbox, "echo x > x.txt", kWork);
  const SnapshotRecord first = routed.snapshot(key(), spec());
  const SnapshotRecord second = routed.snapshot(key(), spec());
  auto fork = routed.resume(key("thread-1", "/fork"), spec(), first.id);
  // Another thread's snapshot stays.
  auto other = routed.acquire(key("thread-kept"), spec());
  make_work(*other);
  const SnapshotRecord kept = routed.snapshot(key("thread-kept"), spec());
  EXPECT_EQ(snapshot_images(), 3u);
  // A reader a crashed resume left behind (made by hand here) goes with its conversation too.
  ContainerRequest reader;
  reader.name = "airlock-reader-left-" + std::to_string(::getpid());
  reader.image = find_snapshot_image(*client_, first.id)->image_id;
  reader.entrypoint = {"/none"};
  reader.labels = {{"airlock.backend", "docker"},
                   {"airlock.role", kRoleSnapshotReader},
                   {"airlock.scope", map_label_value(scope_)},
                   {"airlock.thread", map_label_value("thread-1")},
                   {"airlock.snapshot", first.id}};
  reader.flavour = podman() ? EngineFlavour::podman : EngineFlavour::docker;
  ASSERT_TRUE(create_container(*client_, reader));
  sandbox.reset();
  fork.reset();

  routed.dispose_scope(scope_, std::string_view("thread-1"));
  EXPECT_FALSE(backend_->find_snapshot(first.id));
  EXPECT_FALSE(backend_->find_snapshot(second.id));
  EXPECT_TRUE(backend_->find_snapshot(kept.id)) << "another thread's snapshot went";
  EXPECT_EQ(snapshot_images(), 1u);
  EXPECT_FALSE(inspect(reader.name)) << "a snapshot reader is left";
  EXPECT_EQ(containers_of_scope(), 1u);

  other.reset();
  backend_->dispose_scope(scope_, std::nullopt);
  EXPECT_EQ(snapshot_images(), 0u);
  EXPECT_EQ(containers_of_scope(), 0u);
  EXPECT_FALSE(backend_->find_snapshot(kept.id));
}

TEST_F(DockerSnapshot, AResumeIsRefusedInAnotherWorkDirectory) {
  auto sandbox = acquire();
  make_work(*sandbox);
  const SnapshotRecord snapshot = sandbox->snapshot();
  SandboxSpec::Fields fields = spec().fields();
  fields.work_dir = "/elsewhere/work";
  EXPECT_THROW(backend_->acquire_from_snapshot(key("thread-1", "/elsewhere"), SandboxSpec(fields),
                                               snapshot),
               InvalidArgument);
}

}  // namespace
}  // namespace airlock::docker::test
