"""A sandboxed tool's call lifecycle (reference §3.6): keys, the acquire ladder, one sandbox and
one reclaim per key, the body's exceptions, the reclaim hook's bound and its cancellation, the
sink on the call handle, reclaim_guest_path, and a conversation's disposal."""

import asyncio
import threading
import time

import pytest

import airlock

WORK = "/maf-sandbox/work"
FIRST = airlock.SandboxKey("tenant", "thread-1", "tool")
OTHER = airlock.SandboxKey("tenant", "thread-2", "tool")


class Conversation:
    def __init__(self, thread="thread-1"):
        self.thread = thread
        self.scope_reads = 0

    def current_scope(self):
        self.scope_reads += 1
        return "tenant"

    def current_thread_id(self):
        return self.thread

    def context(self, list_files=None):
        return airlock.CallerContext(self.current_scope, self.current_thread_id, list_files)


def attach(router, body, spec=None, **options):
    options.setdefault("context", Conversation().context())
    return airlock.sandboxed_tool(router, spec or airlock.SandboxSpec(kind="k"), body,
                                  name="tool", description="d", **options)


def pin_call_path(call, key):
    """Make the call path unremovable in the sandbox of `key`: its parent is no longer
    writable to the guest, so the reclaim's `rm -rf` exits non-zero."""
    sandbox = call.acquire(key)
    path = call.guest_call_path()
    sandbox.write_file(path + "/left.txt", "data", working_directory=WORK)
    sandbox.exec(["chmod", "555", WORK], working_directory="/")
    return sandbox, path


class Recorder:
    def __init__(self):
        self.failures = []

    def __call__(self, failure):
        self.failures.append(failure)


# ---- keys and the ladder --------------------------------------------------------------------


def test_the_key_is_read_from_the_context_on_every_key_call(testing_router):
    conversation = Conversation()
    keys = []

    def body(call, arguments):
        keys.append(call.key())
        conversation.thread = "thread-2"
        keys.append(call.key())
        return "ok"

    attach(testing_router, body, context=conversation.context()).invoke({})
    assert [key.thread_id for key in keys] == ["thread-1", "thread-2"]
    assert conversation.scope_reads == 2


def test_an_exception_in_the_hosts_context_propagates_unchanged(testing_router):
    class TenantLookupFailed(Exception):
        pass

    def broken_scope():
        raise TenantLookupFailed("no tenant")

    context = airlock.CallerContext(broken_scope, lambda: "thread-1")
    tool = attach(testing_router, lambda call, arguments: str(call.key()), context=context)
    with pytest.raises(TenantLookupFailed):
        tool.invoke({})


def test_a_listing_failure_quotes_its_reason(testing_router):
    def listing(store):
        raise ConnectionError("the store is offline")

    tool = attach(testing_router, lambda call, arguments: call.list_files("docs"),
                  context=Conversation().context(listing))
    assert tool.invoke({}) == "Error: could not list the file store: the store is offline"


def test_a_missing_backend_provider_is_the_not_installed_sentence():
    # A docker backend whose engine socket does not exist: the engine is not installed there.
    router = airlock.SandboxRouter({
        "backends": [{"type": "docker",
                      "host": "unix:///nonexistent/airlock-test/docker.sock"}],
        "min_isolation": "os_process"})
    spec = airlock.SandboxSpec(kind="k", image="busybox")
    with pytest.raises(airlock.SandboxBackendNotInstalled) as refused:
        router.acquire(FIRST, spec)
    assert isinstance(refused.value, ImportError)
    assert isinstance(refused.value, airlock.BackendError)
    tool = attach(router, lambda call, arguments: call.acquire(call.key()), spec=spec)
    assert tool.invoke({}) == "Error: the sandbox backend is not installed — degrading to T0"


# ---- one sandbox and one reclaim per key ----------------------------------------------------


def test_each_key_acquired_in_a_call_gets_its_own_sandbox_and_its_call_path_reclaimed(
        linux_router):
    seen = {}

    def body(call, arguments):
        first, other = call.acquire(FIRST), call.acquire(OTHER)
        path = call.guest_call_path()
        for sandbox in (first, other):
            sandbox.write_file(path + "/scratch.txt", "left behind?", working_directory=WORK)
        seen.update(first=first, other=other, again=call.acquire(FIRST), path=path)
        return "ok"

    spec = airlock.SandboxSpec(kind="per-key", image="host")
    try:
        assert attach(linux_router, body, spec=spec).invoke({}) == "ok"
        assert seen["first"].instance_id != seen["other"].instance_id, \
            "the second key was handed the first key's sandbox"
        assert seen["again"].instance_id == seen["first"].instance_id
        for name in ("first", "other"):
            assert seen[name].stat_file(seen["path"], working_directory=WORK) is None, \
                f"the call path survived in the {name} sandbox"
    finally:
        linux_router.dispose(FIRST)
        linux_router.dispose(OTHER)


def test_a_reclaim_failure_is_reported_for_each_key_the_call_acquired(testing_router):
    recorder = Recorder()
    paths = []

    def body(call, arguments):
        first, path = pin_call_path(call, FIRST)
        other, _ = pin_call_path(call, OTHER)
        assert first.instance_id != other.instance_id
        paths.append(path)
        return "done"

    assert attach(testing_router, body, on_reclaim_failure=recorder).invoke({}) == "done"
    assert [failure.key for failure in recorder.failures] == [FIRST, OTHER]
    for failure in recorder.failures:
        assert failure.tool == "tool" and failure.path == paths[0]
        assert failure.reason.startswith("the guest refused it: rm exited ")


def test_the_call_handle_records_nothing_once_the_call_ended(testing_router):
    kept = []
    tool = attach(testing_router, lambda call, arguments: kept.append(call) or "ok")
    tool.invoke({})
    (call,) = kept
    assert call.ended
    for method, arguments in ((call.guest_call_path, ()), (call.acquire, (FIRST,)),
                              (call.key, ())):
        with pytest.raises(RuntimeError, match="ended"):
            method(*arguments)


# ---- the body's exceptions ------------------------------------------------------------------


def test_a_body_exception_propagates_unchanged_after_the_call_path_is_reclaimed(testing_router):
    class QuotaExceeded(Exception):
        pass

    kept = {}

    def body(call, arguments):
        kept["sandbox"] = call.acquire(call.key())
        kept["path"] = call.guest_call_path()
        kept["sandbox"].write_file(kept["path"] + "/out.txt", "x", working_directory=WORK)
        raise QuotaExceeded("over quota")

    with pytest.raises(QuotaExceeded, match="over quota"):
        attach(testing_router, body).invoke({})
    assert kept["sandbox"].stat_file(kept["path"], working_directory=WORK) is None


@pytest.mark.parametrize("cancellation", [KeyboardInterrupt, asyncio.CancelledError])
def test_a_cancelled_body_propagates_its_cancellation(testing_router, cancellation):
    kept = {}

    def body(call, arguments):
        kept["sandbox"] = call.acquire(call.key())
        kept["path"] = call.guest_call_path()
        kept["sandbox"].write_file(kept["path"] + "/out.txt", "x", working_directory=WORK)
        raise cancellation()

    with pytest.raises(cancellation):
        attach(testing_router, body).invoke({})
    # Reclaimed all the same (under the 2 s bound a cancellation gets: core_tests proves it).
    assert kept["sandbox"].stat_file(kept["path"], working_directory=WORK) is None


def test_a_body_that_returns_no_text_is_a_type_error(testing_router):
    with pytest.raises(TypeError, match="must return a str"):
        attach(testing_router, lambda call, arguments: 42).invoke({})


def test_aio_invoke_raises_the_bodys_exception(testing_router):
    def body(call, arguments):
        raise LookupError("not here")

    tool = attach(testing_router, body)
    with pytest.raises(LookupError):
        asyncio.run(airlock.aio.invoke(tool, {}))


# ---- the reclaim hook -----------------------------------------------------------------------


def test_a_hook_that_never_returns_is_bounded_by_the_reclaim_timeout(testing_router):
    release, finished = threading.Event(), threading.Event()

    def hook(failure):
        release.wait(30)
        finished.set()

    tool = attach(testing_router, lambda call, arguments: pin_call_path(call, FIRST) and "done",
                  on_reclaim_failure=hook, reclaim_timeout=0.3)
    started = time.monotonic()
    assert tool.invoke({}) == "done"
    assert time.monotonic() - started < 5, "the hook held the call"
    assert not finished.is_set()
    release.set()
    assert finished.wait(10), "the hook's thread never finished"


def test_an_exception_in_the_hook_is_logged_and_the_call_returns(testing_router, capfd):
    calls = []

    def hook(failure):
        calls.append(failure.key)
        raise ValueError("the pager is down")

    def body(call, arguments):
        pin_call_path(call, FIRST)
        pin_call_path(call, OTHER)
        return "done"

    assert attach(testing_router, body, on_reclaim_failure=hook).invoke({}) == "done"
    assert calls == [FIRST, OTHER], "a raising hook stopped the next sandbox's report"
    assert "on_reclaim_failure failed" in capfd.readouterr().err


@pytest.mark.parametrize("cancellation", [asyncio.CancelledError, KeyboardInterrupt])
def test_a_cancellation_in_the_hook_propagates_and_abandons_the_rest(testing_router, capfd,
                                                                     cancellation):
    calls = []

    def hook(failure):
        calls.append(failure.key)
        raise cancellation()

    def body(call, arguments):
        pin_call_path(call, FIRST)
        call.acquire(OTHER)
        return "done"

    with pytest.raises(cancellation):
        attach(testing_router, body, on_reclaim_failure=hook).invoke({})
    assert calls == [FIRST], "a reclaim went on after the hook was cancelled"
    assert "on_reclaim_failure was cancelled" in capfd.readouterr().err


# ---- the sink on the call -------------------------------------------------------------------


def test_the_call_carries_the_sink_it_was_given(testing_router):
    delivered = []

    def deliver(artifact):
        delivered.append((artifact.name, artifact.content))
        return airlock.LandedArtifact(artifact.name, f"{artifact.name} landed")

    sink = airlock.OutputSink(deliver)
    spec = airlock.SandboxSpec(kind="k", requires={"exec", "files_in", "files_out"},
                               declared_outputs=[airlock.DeclaredOutput("chart.txt")])

    def body(call, arguments):
        assert call.sink is sink
        sandbox = call.acquire(call.key())
        sandbox.write_file("chart.txt", b"up", working_directory=WORK)
        landed = airlock.collect_outputs(sandbox, call.spec, call.sink)
        return ", ".join(artifact.display for artifact in landed)

    assert attach(testing_router, body, spec=spec, output_sink=sink).invoke({}) == \
        "chart.txt landed"
    assert delivered == [("chart.txt", b"up")]
    assert attach(testing_router, lambda call, arguments: repr(call.sink)).invoke({}) == "None"
    with pytest.raises(TypeError, match="OutputSink"):
        attach(testing_router, lambda call, arguments: "", output_sink=deliver)


# ---- reclaim_guest_path ---------------------------------------------------------------------


def test_reclaim_guest_path_refuses_what_it_must_not_remove(testing_router):
    sandbox = testing_router.acquire(FIRST, airlock.SandboxSpec(kind="k"))
    assert "does not confine" in airlock.reclaim_guest_path(
        sandbox, "../../etc", working_directory=WORK, timeout=5)
    assert airlock.reclaim_guest_path(sandbox, ".", working_directory=WORK, timeout=5) == \
        "the call path is the work directory"
    assert airlock.reclaim_guest_path(sandbox, "etc", working_directory="/", timeout=5) == \
        "the call path is too close to the guest root"


def test_reclaim_guest_path_removes_the_tree_or_says_why_not(testing_router):
    sandbox = testing_router.acquire(FIRST, airlock.SandboxSpec(kind="k"))
    sandbox.write_file("run1/deep/a.txt", "x", working_directory=WORK)
    assert airlock.reclaim_guest_path(sandbox, "run1", working_directory=WORK, timeout=5) is None
    assert sandbox.stat_file("run1", working_directory=WORK) is None
    sandbox.write_file("run2/a.txt", "x", working_directory=WORK)
    sandbox.exec(["chmod", "555", WORK], working_directory="/")
    reason = airlock.reclaim_guest_path(sandbox, WORK + "/run2", working_directory=WORK,
                                        timeout=5)
    assert reason.startswith("the guest refused it: rm exited ")


# ---- a conversation's disposal --------------------------------------------------------------


def live_sandbox(router, thread):
    router.acquire(airlock.SandboxKey("tenant", thread, "tool"), airlock.SandboxSpec(kind="k"))


def test_scope_never_masks_the_blocks_error(testing_router):
    live_sandbox(testing_router, "thread-1")
    with pytest.raises(KeyError, match="turn failed"):
        with airlock.scope(testing_router, "tenant", "thread-1") as disposal:
            assert disposal.disposed == 0
            raise KeyError("turn failed")
    assert disposal.disposed == 1


def test_the_async_scope_never_masks_the_blocks_error(testing_router):
    live_sandbox(testing_router, "thread-1")
    live_sandbox(testing_router, "thread-2")

    async def turn():
        async with airlock.aio.scope(testing_router, "tenant", "thread-1") as disposal:
            assert disposal.disposed == 0
            raise KeyError("turn failed")

    with pytest.raises(KeyError, match="turn failed"):
        asyncio.run(turn())
    assert testing_router.dispose_scope("tenant", "thread-1") == 0, "the block's sandbox stayed"

    async def through_the_async_router():
        router = airlock.aio.AsyncSandboxRouter(testing_router)
        async with router.scope("tenant", "thread-2") as disposal:
            pass
        return disposal.disposed

    assert asyncio.run(through_the_async_router()) == 1


def test_the_purger_logs_at_info_only_when_something_went(testing_router, linux_router, capfd):
    live_sandbox(testing_router, "thread-1")
    assert airlock.SandboxPurger(testing_router).purge_scoped_thread("tenant", "thread-1") == 1
    assert "purged 1 sandbox(es)" in capfd.readouterr().err
    assert airlock.SandboxPurger(linux_router).purge_scoped_thread("nobody", "nothing") == 0
    assert "purged" not in capfd.readouterr().err
