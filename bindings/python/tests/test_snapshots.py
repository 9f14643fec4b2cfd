"""Snapshots from Python, on the in-process `testing` backend: the records, the router's calls
(snapshot, resume, fork, list, delete), the conversation check, the errors each raises, and the
exclusive snapshot that waits for a command instead of cutting it."""

import datetime
import re
import threading
import time

import pytest

import airlock
import airlock.testing
from airlock import SnapshotContent

WORK = "/maf-sandbox/work"

SNAPSHOTTING = {
    "type": "testing",
    "isolation": "container",
    "capabilities": ["exec", "files_in", "files_out", "snapshot"],
    "egress_modes": ["closed", "allowlist"],
    "snapshot_content": "filesystem",
}


def router_of(**changes):
    return airlock.SandboxRouter({"backends": [{**SNAPSHOTTING, **changes}],
                                  "min_isolation": "container"})


SPEC = airlock.SandboxSpec(kind="k")
OWNER = airlock.SandboxKey("tenant", "t1", "coder")


def test_snapshot_content_is_a_vocabulary_enum():
    assert [member.value for member in SnapshotContent] == ["filesystem", "filesystem+memory"]
    assert SnapshotContent.FILESYSTEM_AND_MEMORY == "filesystem+memory"
    assert SnapshotContent("filesystem") is SnapshotContent.FILESYSTEM
    with pytest.raises(ValueError):
        SnapshotContent("memory")
    described = router_of().describe_backends()[0]
    assert described["snapshot_content"] == "filesystem"
    assert router_of(snapshot_content=None).describe_backends()[0]["snapshot_content"] is None


def test_a_snapshot_record_says_what_was_saved_and_whose_it_is():
    router = router_of()
    sandbox = router.acquire(OWNER, SPEC)
    sandbox.write_file("notes.md", b"kept")
    before = datetime.datetime.now(datetime.timezone.utc)
    record = router.snapshot(OWNER, SPEC)
    assert isinstance(record, airlock.SnapshotRecord)
    assert re.fullmatch(r"snap-[0-9a-f]{24}", record.id)
    assert record.backend == "in-process"
    assert record.content is SnapshotContent.FILESYSTEM
    assert record.kind == "k"
    assert record.egress_posture == "closed"
    assert record.work_dir == WORK
    assert record.source_instance_id == sandbox.instance_id
    assert record.bytes > 0
    assert record.labels["airlock.scope"] == "tenant"
    assert record.labels["airlock.thread"] == "t1"
    assert record.created_at.tzinfo is datetime.timezone.utc
    assert before - datetime.timedelta(seconds=2) <= record.created_at <= \
        datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=2)
    wire = record._airlock_json()
    assert wire["id"] == record.id and wire["content"] == "filesystem"
    assert record == router.list_snapshots("tenant", "t1")[0]
    assert hash(record) == hash(router.list_snapshots("tenant")[0])
    assert record.id in repr(record)
    with pytest.raises(AttributeError):
        record.id = "snap-" + "0" * 24  # read-only
    with pytest.raises(TypeError):
        airlock.SnapshotRecord()  # only the core makes them


def test_resume_and_fork_hold_the_snapshots_files_and_go_their_own_ways():
    router = router_of()
    source = router.acquire(OWNER, SPEC)
    source.write_file("state.txt", b"before")
    assert source.exec("printf by-exec > made.txt").exit_code == 0
    record = router.snapshot(OWNER, SPEC)
    source.write_file("state.txt", b"after")

    resumed = router.resume(OWNER, SPEC, record)  # a SnapshotRecord names it …
    assert resumed.instance_id != record.source_instance_id
    assert resumed.read_file("state.txt") == b"before"
    assert resumed.read_file("made.txt") == b"by-exec"
    assert resumed.work_dir == WORK, "path methods default to the resume's spec"
    fork = router.resume(airlock.SandboxKey("tenant", "t1", "reviewer"), SPEC, record.id)  # … or its id
    fork.write_file("state.txt", b"the fork's")
    assert resumed.read_file("state.txt") == b"before"
    assert router.acquire(OWNER, SPEC).instance_id == resumed.instance_id, \
        "the resumed sandbox took the key's place"
    backend = airlock.testing.backend_of(router)
    assert backend.resumed_snapshots == [record.id, record.id]
    assert record.source_instance_id in backend.disposed_instances
    with router.resume(airlock.SandboxKey("tenant", "t1", "third"), SPEC, record) as third:
        assert third.read_file("state.txt") == b"before"
    assert len(backend.sandboxes) == 2, "leaving `with` disposed the third fork"


def test_another_conversation_is_told_the_snapshot_does_not_exist():
    router = router_of()
    router.acquire(OWNER, SPEC)
    record = router.snapshot(OWNER, SPEC)
    never = "snap-" + "0" * 24
    for stranger in (airlock.SandboxKey("tenant", "t2", "coder"),
                     ("tenant-2", "t1", "coder")):
        with pytest.raises(airlock.NotFound) as theirs:
            router.resume(stranger, SPEC, record)
        with pytest.raises(airlock.NotFound) as missing:
            router.resume(stranger, SPEC, never)
        assert isinstance(theirs.value, FileNotFoundError)
        assert str(theirs.value).replace(record.id, "ID") == str(missing.value).replace(never, "ID")
        with pytest.raises(airlock.NotFound):
            router.delete_snapshot(stranger, record.id)
    assert router.list_snapshots("tenant", "t2") == []
    assert router.list_snapshots("tenant-2") == []
    assert [r.id for r in router.list_snapshots("tenant", "t1")] == [record.id]
    assert [r.id for r in router.list_snapshots("")] == [record.id], "the operator's view"
    assert airlock.testing.backend_of(router).resumed_snapshots == []


def test_refusals_come_through_the_error_table():
    router = router_of()
    router.acquire(OWNER, SPEC)
    record = router.snapshot(OWNER, SPEC)
    with pytest.raises(airlock.InvalidArgument) as kind:
        router.resume(OWNER, airlock.SandboxSpec(kind="other"), record)
    assert kind.value.check == "kind"
    # A backend that does not declare snapshots: the router refuses before it is reached.
    silent = airlock.SandboxRouter({"backends": [{**SNAPSHOTTING,
                                                  "capabilities": ["exec", "files_in"]}],
                                    "min_isolation": "container"})
    silent.acquire(OWNER, SPEC)
    with pytest.raises(airlock.SandboxCapabilityNotSupported) as refused:
        silent.snapshot(OWNER, SPEC)
    assert refused.value.check == "capabilities"
    # A host that denies snapshots refuses them whatever the backend declares.
    denying = airlock.SandboxRouter({"backends": [SNAPSHOTTING], "min_isolation": "container",
                                     "denied_capabilities": ["snapshot"]})
    with pytest.raises(airlock.SandboxCapabilityDenied):
        denying.snapshot(OWNER, SPEC)
    # The egress a resume asks for is judged as any acquire's.
    closed_only = router_of(egress_modes=["closed"])
    closed_only.acquire(OWNER, SPEC)
    closed = closed_only.snapshot(OWNER, SPEC)
    with pytest.raises(airlock.SandboxEgressNotEnforced):
        closed_only.resume(OWNER, airlock.SandboxSpec(kind="k", egress="allowlist",
                                                      egress_allow=["pypi.org"]), closed)
    # A shared sandbox belongs to no conversation: the backend says it takes no snapshot.
    shared = router_of(shared_sandbox=True)
    with pytest.raises(airlock.NotSupported) as unsupported:
        shared.snapshot(OWNER, SPEC)
    assert isinstance(unsupported.value, NotImplementedError)
    with pytest.raises(TypeError, match="snapshot id"):
        router.resume(OWNER, SPEC, 5)
    with pytest.raises(TypeError, match="snapshot id"):
        router.delete_snapshot(OWNER, None)


def test_delete_and_the_conversations_disposal_take_snapshots():
    router = router_of()
    router.acquire(OWNER, SPEC)
    first = router.snapshot(OWNER, SPEC)
    assert router.delete_snapshot(OWNER, first) is True
    with pytest.raises(airlock.NotFound):
        router.delete_snapshot(OWNER, first.id)
    router.snapshot(OWNER, SPEC)
    other = airlock.SandboxKey("tenant", "t2", "coder")
    router.acquire(other, SPEC)
    kept = router.snapshot(other, SPEC)
    router.dispose_scope("tenant", "t1")
    assert [r.id for r in router.list_snapshots("tenant")] == [kept.id]
    assert router.purge_all() == 1
    assert router.list_snapshots("") == []


def test_sandbox_snapshot_is_refused_under_a_running_command_and_router_snapshot_waits():
    router = router_of()
    sandbox = router.acquire(OWNER, SPEC)
    sandbox.write_file("ready.txt", b"")  # the work dir exists from here on
    started = threading.Event()
    results = {}

    def run():
        started.set()
        results["exec"] = sandbox.exec("sleep 0.6", timeout=10)

    worker = threading.Thread(target=run)
    worker.start()
    started.wait()
    deadline = time.monotonic() + 5
    while sandbox.commands_running == 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert sandbox.commands_running == 1
    with pytest.raises(airlock.BackendError, match="a snapshot is taken between commands"):
        sandbox.snapshot()
    worker.join()
    assert results["exec"].exit_code == 0
    assert sandbox.snapshot().source_instance_id == sandbox.instance_id, "between commands it saves"

    with pytest.raises(TypeError):
        router.snapshot(OWNER, SPEC, timeout="soon")


def test_router_snapshot_waits_for_an_admitted_call_instead_of_cutting_it():
    # A sandboxed tool's call is admitted by the router (its call lifecycle); router.snapshot
    # is an exclusive call over the same key, so it waits for the call to leave. The testing
    # backend would refuse a snapshot under the running command: success proves the wait.
    router = router_of()
    inside = threading.Event()
    seen = {}

    def body(call, arguments):
        seen["key"] = call.key()
        sandbox = call.acquire(call.key())
        sandbox.write_file("ready.txt", b"")  # the work dir exists from here on
        inside.set()
        result = sandbox.exec("sleep 0.5; printf done > done.txt", timeout=10)
        seen["left"] = time.monotonic()
        return str(result.exit_code)

    context = airlock.CallerContext(lambda: "tenant", lambda: "t1", None)
    tool = airlock.sandboxed_tool(router, SPEC, body, context=context, name="tool",
                                  description="d")
    answers = []
    worker = threading.Thread(target=lambda: answers.append(tool.invoke({})))
    worker.start()
    assert inside.wait(5)
    record = router.snapshot(seen["key"], SPEC, timeout=10)
    saved_at = time.monotonic()
    worker.join()
    assert answers == ["0"], "the command ran to its end"
    assert seen["left"] <= saved_at
    fork = router.resume(airlock.SandboxKey("tenant", "t1", "fork"), SPEC, record)
    assert fork.read_file("done.txt") == b"done", "it saved what the command left"


@pytest.mark.asyncio
async def test_the_awaitable_router_snapshots_resumes_lists_and_deletes():
    router = airlock.aio.AsyncSandboxRouter(router_of())
    sandbox = await router.acquire(OWNER, SPEC)
    await sandbox.write_file("a.txt", b"async")
    record = await router.snapshot(OWNER, SPEC)
    again = await sandbox.snapshot()
    assert again.id != record.id
    resumed = await router.resume(OWNER, SPEC, record)
    assert await resumed.read_file("a.txt") == b"async"
    assert {r.id for r in await router.list_snapshots("tenant", "t1")} == {record.id, again.id}
    assert await router.delete_snapshot(OWNER, again) is True
    assert [r.id for r in await router.list_snapshots("tenant")] == [record.id]
