"""Awaitable variants for async hosts.

Every blocking call runs on a worker thread (``asyncio.to_thread``) and releases the GIL inside
the C++ core, so the event loop — and other awaits on other sandboxes, or on the same one — keep
running while a guest command does::

    router = airlock.aio.AsyncSandboxRouter(airlock.SandboxRouter(config))
    async with await router.acquire(key, spec) as sandbox:  # disposed when the block ends
        result = await sandbox.exec(["python3", "-c", "print(1)"])  # in the spec's work dir

    async with airlock.aio.AsyncSandbox.create("linux", min_isolation="container") as sandbox:
        ...

Cancelling an awaited ``exec`` stops the guest command (its process group is killed through a
:class:`airlock.StopSource`). Cancelling the other awaits abandons the wait, not the work: a
file transfer or ``run_code`` runs on to its own bound on its thread.
"""

import asyncio
import functools


def _threaded(name):
    @functools.wraps(getattr(__import__("airlock")._airlock.Sandbox, name))
    async def method(self, *args, **kwargs):
        return await asyncio.to_thread(getattr(self._sandbox, name), *args, **kwargs)

    method.__name__ = name
    return method


class AsyncSandbox:
    """A :class:`airlock.Sandbox` whose methods are awaitable."""

    def __init__(self, sandbox):
        self._sandbox = sandbox

    @property
    def sandbox(self):
        """The synchronous handle underneath."""
        return self._sandbox

    @property
    def instance_id(self):
        return self._sandbox.instance_id

    @property
    def key(self):
        return self._sandbox.key

    @property
    def kind(self):
        return self._sandbox.kind

    @property
    def work_dir(self):
        """What ``working_directory`` defaults to (see :attr:`airlock.Sandbox.work_dir`)."""
        return self._sandbox.work_dir

    @staticmethod
    def create(backend=None, *, min_isolation=None, router=None, key=None, spec=None,
               **spec_fields):
        """:meth:`airlock.Sandbox.create`, awaitable: ``await AsyncSandbox.create(...)``, or
        ``async with AsyncSandbox.create(...) as sandbox:`` to dispose it when the block ends.
        The router is built (and its floor checked) when awaited or entered."""
        return _Creation(functools.partial(
            __import__("airlock")._quickstart.create, backend, min_isolation=min_isolation,
            router=router, key=key, spec=spec, **spec_fields))

    async def dispose(self):
        """``Sandbox.dispose``, awaitable."""
        return await asyncio.to_thread(self._sandbox.dispose)

    async def __aenter__(self):
        self._sandbox.__enter__()  # refuses a handle no router can dispose, before the block
        return self

    async def __aexit__(self, exc_type, exc_value, traceback):
        await asyncio.to_thread(self._sandbox.__exit__, exc_type, exc_value, traceback)
        return False

    async def exec(self, command, **options):
        """``Sandbox.exec``, awaitable; cancelling the await kills the guest command."""
        from . import _airlock
        stop = _airlock.StopSource()
        try:
            return await asyncio.to_thread(self._sandbox.exec, command, stop=stop, **options)
        except asyncio.CancelledError:
            stop.request_stop()
            raise

    write_file = _threaded("write_file")
    exec_bounded = _threaded("exec_bounded")
    run_code = _threaded("run_code")
    stat_file = _threaded("stat_file")
    read_file = _threaded("read_file")
    list_dir = _threaded("list_dir")
    remove = _threaded("remove")
    snapshot = _threaded("snapshot")

    def __repr__(self):
        return f"<airlock.aio.AsyncSandbox {self._sandbox!r}>"


class _Creation:
    """What ``AsyncSandbox.create`` returns: awaitable once, or entered once with ``async with``."""

    def __init__(self, make):
        self._make = make
        self._sandbox = None

    def __await__(self):
        return self._create().__await__()

    async def _create(self):
        if self._make is None:
            raise RuntimeError("AsyncSandbox.create(...) was already awaited or entered")
        make, self._make = self._make, None
        return AsyncSandbox(await asyncio.to_thread(make))

    async def __aenter__(self):
        self._sandbox = await self._create()
        return await self._sandbox.__aenter__()

    async def __aexit__(self, exc_type, exc_value, traceback):
        return await self._sandbox.__aexit__(exc_type, exc_value, traceback)


class AsyncSandboxRouter:
    """A :class:`airlock.SandboxRouter` whose blocking calls are awaitable."""

    def __init__(self, router):
        self._router = router

    @property
    def router(self):
        return self._router

    @property
    def enabled(self):
        return self._router.enabled

    async def ensure_can_serve(self, spec):
        return await asyncio.to_thread(self._router.ensure_can_serve, spec)

    async def acquire(self, key, spec):
        return AsyncSandbox(await asyncio.to_thread(self._router.acquire, key, spec))

    async def dispose(self, key):
        await asyncio.to_thread(self._router.dispose, key)

    async def snapshot(self, key, spec, *, timeout=30.0):
        return await asyncio.to_thread(self._router.snapshot, key, spec, timeout=timeout)

    async def resume(self, key, spec, snapshot):
        return AsyncSandbox(await asyncio.to_thread(self._router.resume, key, spec, snapshot))

    async def list_snapshots(self, scope, thread_id=None):
        return await asyncio.to_thread(self._router.list_snapshots, scope, thread_id)

    async def delete_snapshot(self, key, snapshot):
        return await asyncio.to_thread(self._router.delete_snapshot, key, snapshot)

    async def dispose_kind(self, key, kind, instance_id=None):
        return await asyncio.to_thread(self._router.dispose_kind, key, kind, instance_id)

    async def dispose_scope(self, scope, thread_id=None):
        return await asyncio.to_thread(self._router.dispose_scope, scope, thread_id)

    def scope(self, scope_name, thread_id):
        """:func:`airlock.aio.scope` over this router."""
        return scope(self, scope_name, thread_id)


def scope(router, scope_name, thread_id):
    """``async with`` (or ``with``): dispose a conversation's sandboxes however the block ends.

    An :class:`airlock.Scope`: the block gets a :class:`airlock.ScopeDisposal` that reads 0
    inside it; ``disposed`` is set after it, the disposal having run on a worker thread.
    Disposal never raises, so it cannot mask the block's own error."""
    from ._binding import Scope
    return Scope(router, scope_name, thread_id)


async def collect_outputs(sandbox, spec, sink=None, call_time_outputs=()):
    from . import _airlock
    target = sandbox.sandbox if isinstance(sandbox, AsyncSandbox) else sandbox
    return await asyncio.to_thread(_airlock.collect_outputs, target, spec, sink,
                                   list(call_time_outputs))


async def invoke(tool, arguments):
    """Await one call of a SandboxTool (its body runs on a worker thread; a coroutine host tool
    it dispatches is awaited on this loop). An exception the body raises is raised here, after
    the call's guest path was reclaimed."""
    from ._host_tools import _to_thread_serving_this_loop
    return await _to_thread_serving_this_loop(tool.invoke, arguments)


async def run_conformance(sandbox, suite, **options):
    from . import _airlock
    target = sandbox.sandbox if isinstance(sandbox, AsyncSandbox) else sandbox
    return await asyncio.to_thread(_airlock.run_conformance, target, suite, **options)


async def measure_files_delete_probes(sandbox, **options):
    from . import _airlock
    target = sandbox.sandbox if isinstance(sandbox, AsyncSandbox) else sandbox
    return await asyncio.to_thread(_airlock.measure_files_delete_probes, target, **options)


from ._host_tools import (  # noqa: E402,F401 — host-tool runs, awaitable
    dispatch_over_exec_async as dispatch_over_exec,
    reclaim_run_async as reclaim_run,
    run_program_with_host_tools_async as run_program_with_host_tools,
)
