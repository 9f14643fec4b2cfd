"""Context managers (`with` / `async with` on sandboxes and scopes) and `working_directory`
defaulting to the work dir of the spec a sandbox was acquired with — on the testing backend."""

import asyncio

import pytest

import airlock
import airlock.testing

SPEC = airlock.SandboxSpec(kind="k", work_dir="/srv/job")
KEY = airlock.SandboxKey("tenant", "thread-1", "agent")


def backend(router):
    return airlock.testing.backend_of(router)


# ---- working_directory defaults to the spec's work dir ---------------------------------------


def test_path_methods_default_to_the_specs_work_dir(testing_router):
    sandbox = testing_router.acquire(KEY, SPEC)
    assert sandbox.work_dir == "/srv/job"
    sandbox.write_file("notes/a.txt", b"alpha")  # creates /srv/job, which exec needs
    assert sandbox.contents("/srv/job/notes/a.txt") == b"alpha"
    assert sandbox.read_file("notes/a.txt") == b"alpha"
    assert sandbox.stat_file("notes/a.txt").size_bytes == 5
    assert [entry.path for entry in sandbox.list_dir("notes")] == ["notes/a.txt"]
    sandbox.exec(["true"])
    sandbox.exec_bounded(["true"], timeout=5, max_output_bytes=64)
    assert [command[1] for command in sandbox.commands] == ["/srv/job", "/srv/job"]
    sandbox.remove("notes", recursive=True)
    assert sandbox.kind_of("/srv/job/notes") is None


def test_an_explicit_working_directory_still_wins(testing_router):
    sandbox = testing_router.acquire(KEY, SPEC)
    sandbox.write_file("b.txt", "beta", working_directory="/elsewhere")
    assert sandbox.contents("/elsewhere/b.txt") == b"beta"
    assert sandbox.contents("/srv/job/b.txt") is None
    sandbox.exec("true", working_directory="/elsewhere")
    assert sandbox.commands[-1][1] == "/elsewhere"


def test_the_default_still_confines(testing_router):
    sandbox = testing_router.acquire(KEY, SPEC)
    with pytest.raises(airlock.ConfinementError):
        sandbox.read_file("../outside.txt")
    with pytest.raises(airlock.ConfinementError):
        sandbox.write_file("/etc/passwd", "x")


def test_a_working_directory_that_is_not_a_str_is_named(testing_router):
    sandbox = testing_router.acquire(KEY, SPEC)
    with pytest.raises(TypeError, match="working_directory: expected a str"):
        sandbox.read_file("a.txt", working_directory=b"/srv/job")


def test_the_spec_default_work_dir_is_the_records_default(testing_router):
    sandbox = testing_router.acquire(KEY, airlock.SandboxSpec(kind="k"))
    assert sandbox.work_dir == airlock.SandboxSpec(kind="k").work_dir == "/maf-sandbox/work"
    sandbox.write_file("c.txt", "gamma")
    assert sandbox.contents("/maf-sandbox/work/c.txt") == b"gamma"


def test_a_warm_instance_keeps_the_work_dir_it_was_created_with():
    router = airlock.SandboxRouter({"backends": [{
        "type": "testing", "isolation": "container", "capabilities": ["exec", "files_in"],
        "egress_modes": ["closed"], "shared_sandbox": True}], "min_isolation": "container"})
    first = router.acquire(KEY, SPEC)
    again = router.acquire(airlock.SandboxKey("tenant", "thread-2", "agent"),
                           SPEC.replace(work_dir="/srv/other"))
    assert again.instance_id == first.instance_id
    assert again.work_dir == first.work_dir == "/srv/job"


def test_conformance_and_reclaim_default_to_the_work_dir(testing_router):
    sandbox = testing_router.acquire(KEY, SPEC)
    sandbox.write_file("call-1/x/left.txt", "data")
    assert sandbox.kind_of("/srv/job/call-1/x/left.txt") is airlock.EntryKind.FILE
    assert airlock.reclaim_guest_path(sandbox, "/srv/job/call-1") is None
    assert sandbox.kind_of("/srv/job/call-1") is None
    # Outside the (defaulted) work dir: refused without touching the guest.
    refusal = airlock.reclaim_guest_path(sandbox, "/other/call-1")
    assert isinstance(refusal, str) and refusal
    # Each run in a sandbox of its own: a run plants links that change the next one's answers.
    defaulted = airlock.run_conformance(sandbox, "files_in", capabilities=["exec", "files_in"])
    other = testing_router.acquire(airlock.SandboxKey("tenant", "thread-2", "agent"), SPEC)
    explicit = airlock.run_conformance(other, "files_in", working_directory="/srv/job",
                                       capabilities=["exec", "files_in"])
    assert defaulted and [(r["probe"], r["outcome"]) for r in defaulted] == [
        (r["probe"], r["outcome"]) for r in explicit]
    assert any(r["outcome"] == "passed" for r in defaulted), defaulted


def test_a_tool_calls_sandbox_defaults_to_the_tools_spec(testing_router):
    seen = {}

    def body(call, arguments):
        sandbox = call.acquire(call.key())
        sandbox.write_file("from-tool.txt", "t")
        seen["work_dir"] = sandbox.work_dir
        seen["contents"] = sandbox.contents("/srv/job/from-tool.txt")
        with pytest.raises(TypeError, match="use call.condemn"):
            with sandbox:
                pass
        return "ok"

    context = airlock.CallerContext(lambda: "tenant", lambda: "thread-1")
    tool = airlock.sandboxed_tool(testing_router, SPEC, body, context=context, name="tool",
                                  description="d")
    assert tool.invoke({}) == "ok"
    assert seen == {"work_dir": "/srv/job", "contents": b"t"}


# ---- with / async with on a sandbox ----------------------------------------------------------


def test_leaving_with_disposes_the_instance(testing_router):
    with testing_router.acquire(KEY, SPEC) as sandbox:
        instance = sandbox.instance_id
        sandbox.write_file("a.txt", "a")
        assert backend(testing_router).disposed_instances == []
    assert backend(testing_router).disposed_instances == [instance]
    assert backend(testing_router).sandboxes == []


def test_with_lets_the_blocks_exception_through_and_still_disposes(testing_router):
    with pytest.raises(KeyError, match="the block failed"):
        with testing_router.acquire(KEY, SPEC) as sandbox:
            instance = sandbox.instance_id
            raise KeyError("the block failed")
    assert backend(testing_router).disposed_instances == [instance]


def test_with_disposes_only_its_own_kind(testing_router):
    other = testing_router.acquire(KEY, airlock.SandboxSpec(kind="other"))
    with testing_router.acquire(KEY, SPEC):
        pass
    assert [sandbox.instance_id for sandbox in backend(testing_router).sandboxes] == [
        other.instance_id]


def test_dispose_spares_a_newer_instance_and_says_when_one_remains(testing_router):
    sandbox = testing_router.acquire(KEY, SPEC)
    assert sandbox.dispose() is True
    assert sandbox.dispose() is True, "an instance already gone is gone"
    fresh = testing_router.acquire(KEY, SPEC)
    assert fresh.instance_id != sandbox.instance_id
    sandbox.dispose()
    assert [s.instance_id for s in backend(testing_router).sandboxes] == [fresh.instance_id], \
        "an old handle disposed the newer instance"
    backend(testing_router).set_dispose_fails()
    assert fresh.dispose() is False


def test_async_with_disposes_and_lets_the_exception_through(testing_router):
    router = airlock.aio.AsyncSandboxRouter(testing_router)

    async def turn():
        async with await router.acquire(KEY, SPEC) as sandbox:
            assert isinstance(sandbox, airlock.aio.AsyncSandbox)
            assert sandbox.work_dir == "/srv/job"
            await sandbox.write_file("d.txt", "delta")
            assert await sandbox.read_file("d.txt") == b"delta"
            assert (await sandbox.exec(["cat", "d.txt"])).stdout == "delta"
            seen.append(sandbox.instance_id)
            raise KeyError("async block failed")

    seen = []
    with pytest.raises(KeyError, match="async block failed"):
        asyncio.run(turn())
    assert backend(testing_router).disposed_instances == seen


# ---- scopes ----------------------------------------------------------------------------------


def test_a_scope_works_with_and_async_with(testing_router):
    testing_router.acquire(KEY, SPEC)
    with airlock.scope(testing_router, "tenant", "thread-1") as disposal:
        assert disposal.disposed == 0
    assert disposal.disposed == 1

    testing_router.acquire(KEY, SPEC)

    async def turn():
        async with airlock.scope(testing_router, "tenant", "thread-1") as inner:
            assert inner.disposed == 0
        return inner.disposed

    assert asyncio.run(turn()) == 1
    assert backend(testing_router).purged == [("tenant", "thread-1"), ("tenant", "thread-1")]


def test_a_scope_cannot_be_entered_twice_at_once(testing_router):
    scope = airlock.scope(testing_router, "tenant", "thread-1")
    with scope:
        with pytest.raises(RuntimeError, match="already entered"):
            with scope:
                pass
    with scope as again:  # entered once more after it was left
        pass
    assert again.disposed == 0


def test_a_scope_names_a_wrong_argument(testing_router):
    with pytest.raises(TypeError, match="must be str"):
        airlock.scope(testing_router, "tenant", None)
