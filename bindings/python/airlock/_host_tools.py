"""Host tools: Python functions a guest program may call back into the host, under caps.

The C++ core owns the door (``HostToolRun.dispatch``: every cap and refusal, in the reference's
order) and both transports. This module is the Python face of it:

* declaring and registering plain functions (``sandbox_tool``, ``HostToolRegistry``), their
  parameters read from the signature;
* calling a body from the C++ serving thread: the function is called with the GIL taken, an
  awaitable result is awaited (on the host's event loop when the run captured one, else in a
  fresh loop), and the value is encoded with ``json.dumps(ensure_ascii=False, allow_nan=False)``
  — exactly what the guest receives;
* the dispatch observer protocol (``_observe``);
* the run layout, shim and transport helpers, and their awaitable variants for ``airlock.aio``.

A body runs in this process with this process's authority, driven by model-written code.
"""

import asyncio
import contextvars
import dataclasses
import inspect
import json
import logging
import threading
import typing
import warnings

from . import _airlock
from . import errors as _errors

_LOGGER = logging.getLogger("airlock.host_tools")

SHIM_MODULE = _airlock._SHIM_MODULE
CALLS_DIRECTORY = _airlock._CALLS_DIRECTORY
WORK_DIRECTORY = _airlock._WORK_DIRECTORY
DEFAULT_MAX_DISPATCHES_PER_RUN = _airlock._DEFAULT_MAX_DISPATCHES_PER_RUN
RESPONSE_FRAMING_BYTES = _airlock._RESPONSE_FRAMING_BYTES

HostToolDeclaration = _airlock.HostToolDeclaration
DispatchResult = _airlock.DispatchResult

# The C++ side counts in unsigned 64-bit integers; a larger Python int means the same thing there.
_UINT64_MAX = 2**64 - 1


class AirlockHostToolsWarning(UserWarning):
    """Emitted once per process, on the first registration of a host tool."""


_warned_lock = threading.Lock()
_warned = False


def _warn_once():
    global _warned
    with _warned_lock:
        if _warned:
            return
        _warned = True
    warnings.warn("a host tool was registered: its body runs in this process with this "
                  "process's authority, driven by model-written code",
                  AirlockHostToolsWarning, stacklevel=3)


def _identity_class():
    from . import Identity  # built by the package from the C++ vocabulary
    return Identity


# ---- declaring --------------------------------------------------------------------------------

_DECLARATION_ATTRIBUTE = "__airlock_host_tool_declaration__"
_UNANSWERED = object()


def sandbox_tool(*, source=_UNANSWERED, sink=_UNANSWERED, identity=_UNANSWERED):
    """Stamp a function with its information-flow declaration. All three legs must be answered
    (``None`` is an answer: "not that role"); a missing leg is a ``TypeError``. Returns the
    function unchanged."""
    missing = [name for name, value in
               (("source", source), ("sink", sink), ("identity", identity))
               if value is _UNANSWERED]
    if missing:
        raise TypeError("sandbox_tool: every leg must be answered (None is an answer); missing: "
                        + ", ".join(missing))
    declaration = HostToolDeclaration(source=source, sink=sink, identity=identity)

    def stamp(function):
        setattr(function, _DECLARATION_ATTRIBUTE, declaration)
        return function

    return stamp


def declaration_of(function):
    """The function's stamp when it is a complete HostToolDeclaration; None (unstamped)
    otherwise."""
    declaration = getattr(function, _DECLARATION_ATTRIBUTE, None)
    return declaration if isinstance(declaration, HostToolDeclaration) else None


_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean",
               dict: "object", list: "array"}


def _json_type(annotation):
    """(JSON type, whether None is allowed) for a parameter annotation."""
    origin = typing.get_origin(annotation)
    if origin is typing.Union or type(annotation).__name__ == "UnionType":
        members = [member for member in typing.get_args(annotation) if member is not type(None)]
        takes_none = len(members) < len(typing.get_args(annotation))
        if len(members) == 1:
            return _json_type(members[0])[0], takes_none
        return "any", takes_none
    return _JSON_TYPES.get(origin or annotation, "any"), False


def _signature_of(function):
    try:
        return inspect.signature(function, eval_str=True)
    except (NameError, SyntaxError, TypeError):  # an annotation that does not evaluate
        return inspect.signature(function)


def _parameters_of(function, tool_name):
    """The parameters a guest binds by keyword, and whether the tool takes any keyword."""
    try:
        signature = _signature_of(function)
    except (TypeError, ValueError) as error:
        raise TypeError(f"host tool {tool_name!r}: its signature cannot be read ({error}), so "
                        "no argument could be bound to it by name") from None
    parameters = []
    any_keyword = False
    for parameter in signature.parameters.values():
        if parameter.kind is parameter.VAR_KEYWORD:
            any_keyword = True
            continue
        if parameter.kind is parameter.VAR_POSITIONAL:
            continue  # nothing arrives positionally
        required = parameter.default is parameter.empty
        if parameter.kind is parameter.POSITIONAL_ONLY:
            if required:
                raise TypeError(f"host tool {tool_name!r}: its positional-only parameter "
                                f"{parameter.name!r} has no default, and a guest binds "
                                "arguments by name only")
            continue
        json_type, takes_none = _json_type(parameter.annotation)
        takes_none = takes_none or parameter.default is None
        parameters.append((parameter.name, json_type, required, takes_none))
    return parameters, any_keyword


# ---- the registry -----------------------------------------------------------------------------


def _is_asynchronous(function):
    if inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function):
        return True
    call = getattr(type(function), "__call__", None)
    return inspect.iscoroutinefunction(call) or inspect.isasyncgenfunction(call)


def _plain_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _invalid(message, check):
    error = _errors.InvalidArgument(message)
    error.check = check
    return error


class HostToolRegistry(_airlock._HostToolRegistry):
    """Functions a guest program may call back into the host, under caps.

    Starts empty. ``register`` refuses, in order: a sealed registry, a non-callable, a name that
    is not a str, is empty or is taken (never replaced), an unstamped function when
    ``require_declared`` (``HostToolNotDeclared``), an identity outside ``allowed_identities``
    (``HostToolIdentityNotAllowed``), and a signature no guest could bind by name.
    ``aggregate()`` and ``declaration_for()`` seal it.

    ``dispatch_observer(run, name)`` — synchronous — returns a context manager entered as each
    dispatch begins and exited as it ends; when its ``__enter__`` returns a callable, that is
    called with the dispatch's :class:`DispatchResult` just before ``__exit__`` (an audit log sees
    every dispatch and its outcome, refusals included). ``run`` is the :class:`HostToolRun` (None
    for a run a C++ caller keeps on its stack); ``name`` is what the guest sent. The observer's
    failures are logged and never reach the dispatch.

    A body runs in the host process with the host's privileges: register only what a model's
    code may drive. An exception in a body reaches the guest as a fixed refusal; its type and text
    go to the ``airlock.host_tools`` logger (or the run's)."""

    def __init__(self, *, require_declared=False, allowed_identities=None,
                 max_dispatches_per_run=DEFAULT_MAX_DISPATCHES_PER_RUN, response_limits=None,
                 dispatch_observer=None):
        from . import DEFAULT_TRANSFER_LIMITS, SandboxLimits, TransferLimits
        identity = _identity_class()
        if not _plain_int(max_dispatches_per_run):
            raise TypeError("max_dispatches_per_run: expected a plain int, not "
                            f"{type(max_dispatches_per_run).__name__}")
        if max_dispatches_per_run < 1:
            raise _invalid("max_dispatches_per_run must be at least 1: a registry that wants "
                           "nothing dispatched should be an empty registry instead (use an empty "
                           "registry)", "max_dispatches_per_run")
        if response_limits is None:
            response_limits = DEFAULT_TRANSFER_LIMITS
        if not isinstance(response_limits, TransferLimits):
            hint = (" — a SandboxLimits is a backend's two ceilings; pass one TransferLimits"
                    if isinstance(response_limits, SandboxLimits) else "")
            raise TypeError("response_limits: expected a TransferLimits, not "
                            f"{type(response_limits).__name__}{hint}")
        if dispatch_observer is not None:
            if not callable(dispatch_observer):
                raise TypeError("dispatch_observer: expected a callable")
            if _is_asynchronous(dispatch_observer):
                raise TypeError("dispatch_observer: must be synchronous — it is called on the "
                                "thread serving the guest, around each dispatch")
        if allowed_identities is None:
            allowed_identities = frozenset({identity.APP})
        if not isinstance(allowed_identities, (set, frozenset)) or not all(
                isinstance(member, identity) for member in allowed_identities):
            raise TypeError("allowed_identities: expected a set of airlock.Identity members")
        self._functions = {}
        self._require_declared = bool(require_declared)
        self._allowed_identities = frozenset(allowed_identities)
        super().__init__(require_declared=self._require_declared,
                         allowed_identities=self._allowed_identities,
                         max_dispatches_per_run=min(max_dispatches_per_run, _UINT64_MAX),
                         response_limits=response_limits,
                         dispatch_observer=dispatch_observer,
                         run_context=_context_of_a_run_started_here_that_blocks)

    def register(self, function, *, name=None, description=None):
        """Register ``function`` under ``name`` (default: its ``__name__``); its parameters are
        read from its signature (annotations str/int/float/bool/dict/list become the JSON types
        checked at the door; ``**kwargs`` takes any keyword). Returns the function, so this also
        works as a decorator."""
        if self.sealed:
            raise _invalid("the host-tool registry is sealed: its aggregate or a declaration was "
                           "read, and a tool registered now would reach nothing the spec was "
                           "built from", "sealed")
        if not callable(function):
            raise TypeError("register: expected a callable")
        tool_name = getattr(function, "__name__", None) if name is None else name
        if not isinstance(tool_name, str):
            raise TypeError("register: the name must be a str, not " + type(tool_name).__name__)
        if not tool_name:
            raise _invalid("a host tool needs a name", "name")
        if tool_name in self:
            raise _invalid(f"host tool {tool_name!r} is already registered; a name is never "
                           "replaced", "name")
        declaration = declaration_of(function)  # read once, here
        if self._require_declared and declaration is None:
            error = _errors.HostToolNotDeclared(
                f"host tool {tool_name!r} declares no source, sink and identity, and this "
                "registry requires every tool to answer all three: decorate it with "
                "@airlock.sandbox_tool(source=…, sink=…, identity=…)")
            error.check = "require_declared"
            raise error
        effective = _identity_class().APP if declaration is None else declaration.identity
        if effective is not None and effective not in self._allowed_identities:
            allowed = ", ".join(sorted(str(member) for member in self._allowed_identities))
            error = _errors.HostToolIdentityNotAllowed(
                f"host tool {tool_name!r} exercises identity '{effective}', which this registry "
                f"does not allow (allowed: {allowed or 'none'})")
            error.check = "allowed_identities"
            raise error
        parameters, any_keyword = _parameters_of(function, tool_name)
        text = description if description is not None else inspect.getdoc(function) or ""
        _warn_once()
        self._register(function, tool_name, text, parameters, any_keyword, declaration)
        self._functions[tool_name] = function
        return function

    def resolve(self, name):
        """The function registered under ``name``, or None: the one door's lookup."""
        return self._functions.get(name) if isinstance(name, str) else None

    def dispatch(self, name, arguments=None):
        """Dispatch once, in a fresh run, through the one door — every cap and check, as a guest
        would meet them. For a host's own tests of its tools."""
        return HostToolRun(self).dispatch(name, arguments)


# ---- a run ------------------------------------------------------------------------------------


class _RunContext:
    """What a run carries to its bodies: the host's event loop (or None) and its logger."""

    __slots__ = ("loop", "logger")

    def __init__(self, loop, logger):
        self.loop = loop
        self.logger = logger


# Set by airlock.aio around the worker thread it runs a blocking call on: the loop that awaits
# the call, free to run a coroutine body meanwhile.
_HOST_LOOP = contextvars.ContextVar("airlock_host_loop", default=None)


def _running_loop_here():
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _context_of_a_run_started_here_that_blocks():
    # A run the C++ core starts (codeact, run_program_with_host_tools) blocks the thread that
    # started it until it ends: a loop running on that thread could never serve a coroutine body,
    # so only a loop airlock.aio says is free is captured.
    return _RunContext(_HOST_LOOP.get(), None)


# The run class is the C++ one (so a run the core starts itself is the same class an observer
# sees); its constructor and dispatch call the two helpers below.
HostToolRun = _airlock.HostToolRun


def _context_of_a_run_started_here(logger):
    # A run made in Python may be dispatched from anywhere later: the loop running on this
    # thread is captured too (a dispatch made on the loop's own thread gives the body a loop of
    # its own rather than wait on a loop it blocks).
    if logger is not None and not callable(getattr(logger, "error", None)):
        raise TypeError("logger: expected a logging.Logger (or None)")
    return _RunContext(_HOST_LOOP.get() or _running_loop_here(), logger)


def _framing_bytes(framing_bytes):
    """What the transport adds around an answer: a plain int, at least 0."""
    if not _plain_int(framing_bytes):
        raise TypeError("framing_bytes: expected a plain int, not "
                        f"{type(framing_bytes).__name__}")
    if framing_bytes < 0:
        raise _invalid("framing_bytes must be at least 0", "framing_bytes")
    return min(framing_bytes, _UINT64_MAX)


# ---- calling a body (from the C++ serving thread, GIL taken) -----------------------------------


class _NotCarried(Exception):
    """A body's value has no JSON form the guest could receive."""


def _logger_of(context):
    return context.logger if context is not None and context.logger is not None else _LOGGER


async def _awaiting(awaitable):
    return await awaitable


def _run_in_a_loop_of_its_own(coroutine):
    # This thread already runs a loop (a synchronous call made inside a coroutine), which is
    # blocked in this very call: the coroutine gets a thread and a loop of its own.
    outcome = {}

    def run():
        try:
            outcome["value"] = asyncio.run(coroutine)
        except BaseException as error:  # handed back to the dispatching thread
            outcome["error"] = error

    thread = threading.Thread(target=run, name="airlock-host-tool")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _settle(awaitable, loop):
    """The value of an awaitable body result. On the host's loop when one was captured and is
    free; otherwise in a fresh loop. Waits as long as the body takes: a transport's deadline never
    cancels a dispatch in progress."""
    coroutine = awaitable if inspect.iscoroutine(awaitable) else _awaiting(awaitable)
    here = _running_loop_here()
    if loop is not None and loop is not here and loop.is_running():
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result()
    if here is None:
        return asyncio.run(coroutine)
    return _run_in_a_loop_of_its_own(coroutine)


def _invoke_tool(function, name, arguments, context):
    """Call one body; the UTF-8 JSON text of its value. Raises what the body raised (logged with
    its type and text), or _NotCarried when json.dumps or UTF-8 refuses the value."""
    logger = _logger_of(context)
    try:
        value = function(**arguments)
        if inspect.isawaitable(value):
            value = _settle(value, context.loop if context is not None else None)
    except BaseException as error:
        logger.error("host tool %r failed: %s: %s", name, type(error).__name__, error,
                     exc_info=True)
        raise
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except Exception as error:
        logger.error("host tool %r returned a value that cannot be carried as JSON: %s: %s",
                     name, type(error).__name__, error)
        raise _NotCarried(f"{type(error).__name__}: {error}") from None


_OBSERVER_FAILURES = (Exception, asyncio.CancelledError, GeneratorExit)


def _observe(observer, run, name, context):
    """Enter the observer's context manager for one dispatch; the callable that finishes it with
    the dispatch's outcome, or None when the observer failed to begin."""
    logger = _logger_of(context)
    try:
        manager = observer(run, name)
        exit_method = type(manager).__exit__
        entered = type(manager).__enter__(manager)
    except _OBSERVER_FAILURES:
        logger.warning("a dispatch observer failed as the dispatch of %r began", name,
                       exc_info=True)
        return None

    def finish(outcome):
        try:
            if callable(entered):
                entered(outcome)
        except _OBSERVER_FAILURES:
            logger.warning("a dispatch observer failed to take the outcome of %r", name,
                           exc_info=True)
        try:
            exit_method(manager, None, None, None)
        except _OBSERVER_FAILURES:
            logger.warning("a dispatch observer failed as the dispatch of %r ended", name,
                           exc_info=True)

    return finish


# ---- the run's layout, shim and transport ------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class GuestRunLayout:
    """Absolute guest paths of one run: ``directory`` (the run), ``work`` (the program's working
    directory, the only place for model-named files), and the transport's files in
    ``directory/host_tools/``: ``program``, ``shim``, ``launcher``, ``calls``, ``output``,
    ``exit_code``, ``pid``, ``session``."""

    directory: str
    work: str
    program: str
    shim: str
    launcher: str
    calls: str
    output: str
    exit_code: str
    pid: str
    session: str = ""


def _require_str(value, what):
    if not isinstance(value, str):
        raise TypeError(f"{what}: expected a str, not {type(value).__name__}")


def guest_run_layout(run_directory, *, program="program.py"):
    """The layout of a run in ``run_directory`` (absolute; no ``:`` or backslash), the guest
    program named ``program`` (a plain file name that is none of the transport's own and would
    not be imported in place of a module the shim or the interpreter needs)."""
    _require_str(run_directory, "run_directory")
    _require_str(program, "program")
    return GuestRunLayout(*_airlock._guest_run_layout(run_directory, program))


def host_tool_shim(names=(), *, call_timeout=300.0):
    """The guest module (``airlock_host_tools``): ``call(name, **arguments)``,
    ``HostToolError``, and a function per tool whose name Python can spell and that names
    nothing of the module. ``call_timeout`` is the guest's patience per call, in seconds."""
    if isinstance(names, str):
        raise TypeError("names: expected a collection of tool names, not a str")
    names = list(names)
    for name in names:
        _require_str(name, "names")
    return _airlock._host_tool_shim(names, call_timeout)


def launcher_script(layout, interpreter="python3"):
    """The POSIX sh script that starts the program detached and records its pid and exit."""
    _require_str(interpreter, "interpreter")
    return _airlock._launcher_script(layout, interpreter)


def _unwrap(sandbox):
    """The synchronous handle under an airlock.aio.AsyncSandbox; any other value as it is."""
    inner = getattr(sandbox, "sandbox", None)
    return inner if isinstance(inner, _airlock.Sandbox) else sandbox


def dispatch_over_exec(sandbox, run, layout, *, timeout, poll_interval=0.2,
                       interpreter="python3"):
    """Run the program already written at ``layout.program`` (the shim at ``layout.shim``),
    serving its request files through ``run``, and return its ExecResult. The transport's files
    are removed however it ends; ``layout.work`` is left for the caller to collect from, then
    ``reclaim_run``. The run's own bound expiring raises SandboxProgramTimeout."""
    if not isinstance(run, HostToolRun):
        raise TypeError("run: expected a HostToolRun")
    _require_str(interpreter, "interpreter")
    return _airlock._dispatch_over_exec(_unwrap(sandbox), run, layout, timeout, poll_interval,
                                        interpreter)


def reclaim_run(sandbox, layout, *, timeout=30.0):
    """Remove the whole run directory; True only when the removal succeeded. False is a
    data-retention failure: the remedy is disposing of the sandbox."""
    return _airlock._reclaim_run(_unwrap(sandbox), layout, timeout)


def run_program_with_host_tools(sandbox, registry, code, *, run_directory, timeout=120,
                                channel=None, program="program.py", poll_interval=0.2,
                                call_timeout=None, interpreter="python3", reclaim=True):
    """Write ``code`` and the shim into a fresh run at ``run_directory`` and run it, serving its
    calls to ``registry`` (over the socket channel when the sandbox offers one, else over exec
    and files; ``channel`` forces one). ``call_timeout`` is the guest's patience per call
    (default: ``timeout``).

    Returns ``{"result": ExecResult, "channel": "socket"|"files", "dispatched": n, "run":
    HostToolRun, "layout": GuestRunLayout}``. With ``reclaim`` (the default) the whole run
    directory is removed afterwards, however the program ended; with ``reclaim=False`` only the
    transport's files go and ``layout.work`` is left for you to collect, then ``reclaim_run``."""
    if not isinstance(registry, _airlock._HostToolRegistry):
        raise TypeError("registry: expected a HostToolRegistry")
    _require_str(code, "code")
    _require_str(interpreter, "interpreter")
    if channel is not None:
        _require_str(channel, "channel")
    layout = guest_run_layout(run_directory, program=program)
    ran = _airlock._run_program_with_host_tools(_unwrap(sandbox), registry, code, layout,
                                                timeout, poll_interval, call_timeout, interpreter,
                                                channel, bool(reclaim))
    ran["layout"] = layout
    return ran


# ---- awaitable variants (airlock.aio) ----------------------------------------------------------


async def _to_thread_serving_this_loop(function, /, *args, **kwargs):
    """``asyncio.to_thread``, telling the run started on the worker thread that this loop is free
    to await its coroutine bodies."""
    token = _HOST_LOOP.set(asyncio.get_running_loop())
    try:
        return await asyncio.to_thread(function, *args, **kwargs)
    finally:
        _HOST_LOOP.reset(token)


async def run_program_with_host_tools_async(sandbox, registry, code, **options):
    """:func:`run_program_with_host_tools`, awaitable; coroutine bodies run on this loop."""
    return await _to_thread_serving_this_loop(run_program_with_host_tools, sandbox, registry,
                                              code, **options)


async def dispatch_over_exec_async(sandbox, run, layout, **options):
    """:func:`dispatch_over_exec`, awaitable."""
    return await _to_thread_serving_this_loop(dispatch_over_exec, sandbox, run, layout,
                                              **options)


async def reclaim_run_async(sandbox, layout, **options):
    """:func:`reclaim_run`, awaitable."""
    return await asyncio.to_thread(reclaim_run, sandbox, layout, **options)


__all__ = [
    "AirlockHostToolsWarning", "CALLS_DIRECTORY", "DEFAULT_MAX_DISPATCHES_PER_RUN",
    "DispatchResult", "GuestRunLayout", "HostToolDeclaration", "HostToolRegistry", "HostToolRun",
    "RESPONSE_FRAMING_BYTES", "SHIM_MODULE", "WORK_DIRECTORY", "declaration_of",
    "dispatch_over_exec", "guest_run_layout", "host_tool_shim", "launcher_script", "reclaim_run",
    "run_program_with_host_tools", "sandbox_tool",
]
