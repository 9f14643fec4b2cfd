"""Binding a sandboxed workload as a tool, and the host glue around it.

``sandboxed_tool`` is the attach gate and the call lifecycle (the C++ core does both);
``sandbox_tool_declarations`` the information-flow labels; ``CallerContext`` and its helpers
where a call's key comes from; ``scope`` and ``SandboxPurger`` a conversation's disposal.
"""

import asyncio
import dataclasses
import typing

from . import _airlock


@dataclasses.dataclass(frozen=True)
class CallerContext:
    """Where a tool call's key comes from: callables read on every call, never values.

    ``current_thread_id`` returning None refuses the call (there is no placeholder key).
    ``list_files(store)`` pins the names a kind may take from a host file store."""

    current_scope: typing.Callable[[], str]
    current_thread_id: typing.Callable[[], typing.Optional[str]]
    list_files: typing.Optional[typing.Callable[[str], typing.List[str]]] = None


def make_caller_context(list_files, scope_getter, thread_getter):
    """A :class:`CallerContext` from its three callables, in the reference's positional order."""
    return CallerContext(current_scope=scope_getter, current_thread_id=thread_getter,
                         list_files=list_files)


def _entry_field(entry, name):
    if isinstance(entry, dict):
        return entry.get(name)
    return getattr(entry, name, None)


def list_all_files(store, directory=""):
    """Every file of a store that lists one directory at a time, as store-relative paths.

    ``store.list_children(directory)`` returns entries with a ``name`` (relative to that
    directory) and a ``type`` (attributes or dict keys); ``"directory"`` entries are walked.
    Errors propagate."""
    paths = []
    for entry in store.list_children(directory):
        name = _entry_field(entry, "name")
        if not isinstance(name, str) or not name:
            raise TypeError(f"list_all_files: an entry of {directory or '/'!r} has no name")
        path = f"{directory}/{name}" if directory else name
        if _entry_field(entry, "type") == "directory":
            paths.extend(list_all_files(store, path))
        else:
            paths.append(path)
    return paths


def list_no_files(store):
    """A ``list_files`` for a host without a file store: nothing may be named."""
    return []


def _sync_router(router):
    # An airlock.aio.AsyncSandboxRouter stands for the router it wraps.
    inner = getattr(router, "router", None)
    return inner if isinstance(inner, _airlock.SandboxRouter) else router


def sandbox_tool_declarations(spec, *, source_integrity="trusted",
                              outbound_max_confidentiality=None, output_sink=None,
                              also_carries_out=False):
    """The information-flow labels of a tool over ``spec``, as a dict.

    ``source_integrity`` when it is not None; ``max_allowed_confidentiality`` only when a cap
    is given and the tool can carry something out: an egress allowlist payload, an
    ``output_sink`` with something to land, or ``also_carries_out``. The cap is an opaque host
    string, never ranked."""
    return _airlock._sandbox_tool_declarations(
        spec, source_integrity=source_integrity,
        outbound_max_confidentiality=outbound_max_confidentiality,
        has_output_sink=output_sink is not None, also_carries_out=also_carries_out)


def sandboxed_tool(router, spec, body, *, context, name, description, agent_dir=None,
                   approval_mode="never_require", declarations=None, source_integrity="trusted",
                   outbound_max_confidentiality=None, output_sink=None, also_carries_out=False,
                   on_reclaim_failure=None, reclaim_timeout=30.0, admission_timeout=30.0):
    """Bind a workload as a tool a MAF or Deep Agents host wraps into its own tool type.

    ``body(call, arguments) -> str`` gets a :class:`SandboxToolCall` (``key()``,
    ``acquire(key)``, ``guest_call_path()``, ``condemn(key=None)``, ``list_files(store)``,
    ``sink``); its methods raise RuntimeError once the body has returned. The sandbox ladder
    answers with fixed sentences; an exception the body raises propagates out of ``invoke``
    after the call's guest path was reclaimed in every sandbox it acquired.

    The attach gate, in order: no router or a disabled one → None (nothing else is looked at);
    ``declarations`` (explicit labels, replacing the derived ones) with ``output_sink`` →
    ValueError; a spec that lands artifacts without ``output_sink`` →
    SandboxOutputSinkRequired; outputs without files_out → ValueError; a reclaim_timeout that
    is not finite and positive → ValueError; the router's refusals; a work_dir at the guest
    root → ValueError.

    ``on_reclaim_failure(ReclaimFailure)`` is bounded by ``reclaim_timeout`` (past it the call
    returns); an Exception it raises is logged, a cancellation (CancelledError,
    KeyboardInterrupt) propagates."""
    if router is None or not router.enabled:
        return None
    return _airlock._sandboxed_tool(
        _sync_router(router), spec, body, context=context,
        agent_dir=name if agent_dir is None else agent_dir, name=name, description=description,
        approval_mode=approval_mode, declarations=declarations,
        source_integrity=source_integrity,
        outbound_max_confidentiality=outbound_max_confidentiality, output_sink=output_sink,
        also_carries_out=also_carries_out, on_reclaim_failure=on_reclaim_failure,
        reclaim_timeout=reclaim_timeout, admission_timeout=admission_timeout)


reclaim_guest_path = _airlock.reclaim_guest_path


class Scope:
    """A conversation's sandboxes, disposed however a ``with`` or ``async with`` block ends.

    Entering gives a :class:`ScopeDisposal` that reads 0 inside the block; leaving runs the
    router's ``dispose_scope(scope_name, thread_id)`` (``async with``: on a worker thread) and
    sets ``disposed`` to how many went. Disposal never raises, so it cannot mask the block's
    own error, which propagates. One block at a time: entering it again while it is entered
    raises RuntimeError."""

    def __init__(self, router, scope_name, thread_id):
        if not isinstance(scope_name, str) or not isinstance(thread_id, str):
            raise TypeError("scope: scope_name and thread_id must be str")
        self._router = router
        self.scope_name = scope_name
        self.thread_id = thread_id
        self._disposal = None

    def _enter(self):
        if self._disposal is not None:
            raise RuntimeError(f"scope {self.scope_name!r}/{self.thread_id!r} is already entered")
        self._disposal = _airlock.ScopeDisposal()
        return self._disposal

    def _leave(self, disposed):
        disposal, self._disposal = self._disposal, None
        disposal.disposed = disposed

    def __enter__(self):
        return self._enter()

    def __exit__(self, exc_type, exc_value, traceback):
        self._leave(_sync_router(self._router).dispose_scope(self.scope_name, self.thread_id))
        return False

    async def __aenter__(self):
        return self._enter()

    async def __aexit__(self, exc_type, exc_value, traceback):
        router = _sync_router(self._router)
        self._leave(await asyncio.to_thread(router.dispose_scope, self.scope_name,
                                            self.thread_id))
        return False

    def __repr__(self):
        return f"<airlock.Scope {self.scope_name!r}/{self.thread_id!r}>"


def scope(router, scope_name, thread_id):
    """``with`` or ``async with``: dispose a conversation's sandboxes however the block ends
    (a :class:`Scope`; the block gets a :class:`ScopeDisposal`, ``disposed`` set after it)."""
    return Scope(router, scope_name, thread_id)


class SandboxPurger:
    """A host's conversation-delete participant: disposes every sandbox of (scope, thread) and
    logs at info when anything went."""

    def __init__(self, router):
        self._router = router

    def purge_scoped_thread(self, scope_name, thread_id):
        return _airlock._purge_scoped_thread(_sync_router(self._router), scope_name, thread_id)
