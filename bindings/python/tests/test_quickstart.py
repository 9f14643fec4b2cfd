"""The quick start, `airlock.Sandbox.create(...)`: one sandbox through a router of its own, whose
floor is the router's — the default one refuses a backend below it exactly as a host's router
does; lowering it is explicit."""

import asyncio
import os
import re

import pytest

import airlock
import airlock.testing

from conftest import TESTING_BACKEND


def refusal(make, *args, **kwargs):
    with pytest.raises(airlock.SandboxBackendNotPermitted) as refused:
        make(*args, **kwargs)
    return refused.value


def test_the_version_is_the_projects():
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "..", "..", "CMakeLists.txt"), encoding="utf-8") as top:
        declared = re.search(r"project\(airlock VERSION ([0-9.]+)", top.read()).group(1)
    assert airlock.__version__ == declared


# ---- the floor is the router's ---------------------------------------------------------------


def test_the_default_floor_refuses_as_the_full_api_does():
    full = refusal(airlock.SandboxRouter, {"backends": [TESTING_BACKEND]})
    quick = refusal(airlock.Sandbox.create, TESTING_BACKEND)
    assert type(quick) is type(full)
    assert str(quick) == str(full)
    assert "microvm" in str(quick) and "container" in str(quick)


def test_a_floor_the_backend_meets_is_served():
    with airlock.Sandbox.create(TESTING_BACKEND, min_isolation="container") as sandbox:
        assert isinstance(sandbox, airlock.testing.InProcessSandbox)
        assert sandbox.kind == "quickstart"
        assert sandbox.key.scope == "quickstart" and sandbox.key.agent_dir == "quickstart"
        sandbox.write_file("hello.txt", "hi")
        assert sandbox.read_file("hello.txt") == b"hi"
        assert sandbox.contents(sandbox.work_dir + "/hello.txt") == b"hi"


def test_each_create_is_a_sandbox_of_its_own(testing_router):
    first = airlock.Sandbox.create(router=testing_router)
    second = airlock.Sandbox.create(router=testing_router)
    assert first.key != second.key and first.key.thread_id != second.key.thread_id
    assert first.instance_id != second.instance_id
    with first:
        pass
    assert [s.instance_id for s in airlock.testing.backend_of(testing_router).sandboxes] == [
        second.instance_id]


def test_a_spec_floor_above_the_backend_is_refused_as_the_full_api_does():
    spec = airlock.SandboxSpec(kind="k", image="host", min_isolation="microvm")
    key = airlock.SandboxKey("quickstart", "t", "k")
    router = airlock.SandboxRouter({"backends": [TESTING_BACKEND], "min_isolation": "container"})
    with pytest.raises(airlock.AirlockError) as full:
        router.acquire(key, spec)
    with pytest.raises(airlock.AirlockError) as quick:
        airlock.Sandbox.create(TESTING_BACKEND, min_isolation="container", spec=spec, key=key)
    assert type(quick.value) is type(full.value)
    assert str(quick.value) == str(full.value) and "microvm" in str(quick.value)


def test_a_hosts_own_router_is_used_as_it_is(testing_router):
    sandbox = airlock.Sandbox.create(router=testing_router, kind="mine", work_dir="/srv/q")
    assert airlock.testing.backend_of(testing_router).sandboxes[0].instance_id == \
        sandbox.instance_id
    assert sandbox.work_dir == "/srv/q"
    assert airlock.testing.backend_of(testing_router).specs[0].image == "host"
    with sandbox:
        pass
    assert airlock.testing.backend_of(testing_router).sandboxes == []


def test_the_arguments_that_contradict_each_other_are_named(testing_router):
    with pytest.raises(TypeError, match="either router= or backend="):
        airlock.Sandbox.create("linux", router=testing_router)
    with pytest.raises(TypeError, match="either router= or backend="):
        airlock.Sandbox.create(router=testing_router, min_isolation="container")
    with pytest.raises(TypeError, match="either spec= or SandboxSpec fields \\(kind\\)"):
        airlock.Sandbox.create(router=testing_router, spec=airlock.SandboxSpec(kind="k"),
                               kind="k")
    with pytest.raises(TypeError, match="needs its \"type\""):
        airlock.Sandbox.create({"state_dir": "/tmp/x"})
    with pytest.raises(TypeError, match="not int"):
        airlock.Sandbox.create(3)
    with pytest.raises(airlock.AirlockError, match="no-such-field"):
        airlock.Sandbox.create(router=testing_router, **{"no-such-field": 1})
    assert airlock.testing.backend_of(testing_router).keys == [], "a refused create acquired"


# ---- the awaitable quick start ---------------------------------------------------------------


def test_the_async_quick_start_refuses_and_serves_as_the_sync_one(testing_router):
    full = refusal(airlock.SandboxRouter, {"backends": [TESTING_BACKEND]})

    async def refused():
        async with airlock.aio.AsyncSandbox.create(TESTING_BACKEND):
            pytest.fail("the block ran under a floor the backend does not meet")

    quick = refusal(asyncio.run, refused())
    assert str(quick) == str(full)

    async def served():
        async with airlock.aio.AsyncSandbox.create(TESTING_BACKEND,
                                                   min_isolation="container") as sandbox:
            await sandbox.write_file("a.txt", "async")
            return await sandbox.read_file("a.txt")

    assert asyncio.run(served()) == b"async"

    async def disposed():
        async with airlock.aio.AsyncSandbox.create(router=testing_router) as sandbox:
            assert airlock.testing.backend_of(testing_router).sandboxes
            return sandbox.instance_id

    instance = asyncio.run(disposed())
    assert airlock.testing.backend_of(testing_router).disposed_instances == [instance]

    async def awaited():
        creation = airlock.aio.AsyncSandbox.create(TESTING_BACKEND, min_isolation="container")
        made = await creation
        try:
            with pytest.raises(RuntimeError, match="already awaited"):
                await creation
        finally:
            assert await made.dispose()

    asyncio.run(awaited())


# ---- against real linux sandboxes (root) -----------------------------------------------------


def test_the_quick_start_refuses_linux_under_the_default_floor(linux_state_dir):
    linux = {"type": "linux", "state_dir": linux_state_dir}
    full = refusal(airlock.SandboxRouter, {"backends": [linux]})
    quick = refusal(airlock.Sandbox.create, linux)
    assert str(quick) == str(full)
    assert "microvm" in str(quick) and "container" in str(quick)


def test_the_quick_start_runs_linux_with_the_floor_lowered(linux_state_dir):
    linux = {"type": "linux", "state_dir": linux_state_dir}
    with airlock.Sandbox.create(linux, min_isolation="container") as sandbox:
        assert sandbox.work_dir == "/maf-sandbox/work"
        result = sandbox.exec("pwd; id -u", timeout=30)
        assert result.exit_code == 0, result.stderr
        assert result.stdout.splitlines()[0] == sandbox.work_dir
        sandbox.write_file("round/trip.bin", b"\x00\xffpayload")
        assert sandbox.read_file("round/trip.bin") == b"\x00\xffpayload"
        listed = airlock.SandboxRouter({"backends": [linux], "min_isolation": "container"})
        assert [r["kind"] for r in listed.list_sandboxes()
                if r["instance_id"] == sandbox.instance_id] == ["quickstart"], \
            "the sandbox is not in the backend's durable state"
        instance = sandbox.instance_id
    after = airlock.SandboxRouter({"backends": [linux], "min_isolation": "container"})
    assert [r for r in after.list_sandboxes() if r["instance_id"] == instance] == []
