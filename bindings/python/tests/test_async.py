"""Awaitable variants: the blocking call runs on a thread with the GIL released, so two awaits
really overlap."""

import asyncio

import pytest

import airlock
from airlock import aio

WORK = "/maf-sandbox/work"


@pytest.mark.asyncio
async def test_two_awaits_overlap_on_one_sandbox(linux_router):
    # Each command can only finish once the other has started: A announces itself and waits for
    # B's file, B waits for A's announcement before writing it. If either call held the GIL (or
    # the sandbox serialised them), neither could finish before its timeout.
    router = aio.AsyncSandboxRouter(linux_router)
    key = airlock.SandboxKey("pytest", "async-overlap", "python")
    spec = airlock.SandboxSpec(kind="pytest", image="host")
    try:
        sandbox = await router.acquire(key, spec)
        a = sandbox.exec("touch ready; while [ ! -e go ]; do sleep 0.02; done; cat go",
                         working_directory=WORK, timeout=20)
        b = sandbox.exec("while [ ! -e ready ]; do sleep 0.02; done; echo from-b > go",
                         working_directory=WORK, timeout=20)
        first, second = await asyncio.gather(a, b)
        assert first.exit_code == 0 and first.stdout == "from-b\n"
        assert second.exit_code == 0
    finally:
        await router.dispose(key)


@pytest.mark.asyncio
async def test_a_guest_command_waits_for_a_file_written_by_another_await(linux_router):
    router = aio.AsyncSandboxRouter(linux_router)
    key = airlock.SandboxKey("pytest", "async-files", "python")
    spec = airlock.SandboxSpec(kind="pytest", image="host")
    try:
        sandbox = await router.acquire(key, spec)
        waiter = asyncio.ensure_future(sandbox.exec(
            "touch started; while [ ! -e handoff.txt ]; do sleep 0.02; done; cat handoff.txt",
            working_directory=WORK, timeout=20))
        # The event loop keeps running while the waiter's command blocks: poll for it to start.
        while await sandbox.stat_file("started", working_directory=WORK) is None:
            assert not waiter.done(), (await waiter)
            await asyncio.sleep(0.02)
        await sandbox.write_file("handoff.txt", b"handed over", working_directory=WORK)
        result = await waiter
        assert result.stdout == "handed over"
    finally:
        await router.dispose(key)


@pytest.mark.asyncio
async def test_async_errors_keep_their_classes(testing_router):
    router = aio.AsyncSandboxRouter(testing_router)
    sandbox = await router.acquire(airlock.SandboxKey("a", "b", "c"), airlock.SandboxSpec(kind="k"))
    with pytest.raises(ValueError):
        await sandbox.read_file("../outside", working_directory=WORK)
    with pytest.raises(airlock.SandboxEgressNotEnforced):
        await router.acquire(airlock.SandboxKey("a", "b", "c"),
                             airlock.SandboxSpec(kind="k", egress="unrestricted"))


@pytest.mark.asyncio
async def test_cancelling_an_awaited_exec_kills_the_guest_command(linux_router):
    router = aio.AsyncSandboxRouter(linux_router)
    key = airlock.SandboxKey("pytest", "async-cancel", "python")
    spec = airlock.SandboxSpec(kind="pytest", image="host")
    try:
        sandbox = await router.acquire(key, spec)
        task = asyncio.ensure_future(sandbox.exec(
            "touch started; exec sleep 1234", working_directory=WORK, timeout=120))
        while await sandbox.stat_file("started", working_directory=WORK) is None:
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Without the stop, `sleep 1234` would outlive the await by twenty minutes.
        for _ in range(500):
            ps = await sandbox.exec(["ps", "-eo", "args"], working_directory=WORK, timeout=30)
            if "sleep 1234" not in ps.stdout:
                break
            await asyncio.sleep(0.02)
        assert "sleep 1234" not in ps.stdout, ps.stdout
    finally:
        await router.dispose(key)


def test_a_stop_source_cancels_a_blocking_exec_from_another_thread(linux_sandbox):
    import threading
    import time
    stop = airlock.StopSource()

    def stop_when_started():
        for _ in range(3000):  # bounded: a broken exec must not hang the suite
            if linux_sandbox.stat_file("began", working_directory=WORK) is not None:
                break
            time.sleep(0.01)
        stop.request_stop()

    helper = threading.Thread(target=stop_when_started)
    helper.start()
    try:
        with pytest.raises(TimeoutError, match="cancel"):
            linux_sandbox.exec("touch began; sleep 600", working_directory=WORK, timeout=300,
                               stop=stop)
    finally:
        helper.join()
    assert stop.stop_requested
