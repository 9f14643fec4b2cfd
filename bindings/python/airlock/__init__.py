"""airlock for Python hosts: one seam between an agent host and the sandboxes that run what its
agents write.

    import airlock

    router = airlock.SandboxRouter({"backends": [{"type": "linux"}],
                                    "min_isolation": "container"})
    spec = airlock.SandboxSpec(kind="demo", image="host")
    sandbox = router.acquire(airlock.SandboxKey("tenant", "thread-1", "demo"), spec)
    result = sandbox.exec(["echo", "hi"], working_directory=spec.work_dir)

The C++ core does the work (``airlock._airlock``); this package adds the Python spellings: the
vocabulary as ``enum.StrEnum`` classes built from the C++ tables (``str(Isolation.MICROVM)`` is
``"microvm"``, ``Isolation("process")`` raises ``ValueError``), the exception hierarchy
(:mod:`airlock.errors`), host-tool registration from plain functions, ``sandboxed_tool`` and the
codeact kind, and awaitable variants (:mod:`airlock.aio`).

The GIL is released during every sandbox, router, output and conformance operation.
"""

import enum
import inspect
import typing

from . import _airlock
from . import errors
from .errors import *  # noqa: F401,F403 — the exception classes are part of the API

# ---- the vocabulary -------------------------------------------------------------------------


def _build_enum(name, values):
    # Member names are the seeds' (upper-case value); values are the wire strings, owned by C++.
    return enum.StrEnum(name, [(value.upper(), value) for value in values], module=__name__)


for _name, _values in _airlock._vocabulary().items():
    globals()[_name] = _build_enum(_name, _values)
del _name, _values

CodeactOutputs = _build_enum("CodeactOutputs", ["none", "declared", "manifest"])
DEFAULT_CAPABILITIES = frozenset({Capability.EXEC, Capability.FILES_IN})  # noqa: F821
isolation_rank = _airlock.isolation_rank
meets_floor = _airlock.meets_floor
isolation_ladder = _airlock.isolation_ladder

# ---- records and the core -------------------------------------------------------------------

SandboxKey = _airlock.SandboxKey
SandboxSpec = _airlock.SandboxSpec
TransferLimits = _airlock.TransferLimits
SandboxLimits = _airlock.SandboxLimits
DEFAULT_TRANSFER_LIMITS = _airlock.DEFAULT_TRANSFER_LIMITS
DEFAULT_SANDBOX_LIMITS = SandboxLimits()
DeclaredOutput = _airlock.DeclaredOutput
SandboxEntry = _airlock.SandboxEntry
ExecResult = _airlock.ExecResult
Artifact = _airlock.Artifact
LandedArtifact = _airlock.LandedArtifact
ScopeDisposal = _airlock.ScopeDisposal
ReclaimFailure = _airlock.ReclaimFailure
Sandbox = _airlock.Sandbox
StopSource = _airlock.StopSource
SandboxRouter = _airlock.SandboxRouter
backend_types = _airlock.backend_types

OutputSink = _airlock.OutputSink
make_file_system_sink = _airlock.make_file_system_sink
collect_outputs = _airlock.collect_outputs
validate_artifact_name = _airlock.validate_artifact_name
nfc_compose = _airlock.nfc_compose
artifact_collision_key = _airlock.artifact_collision_key
portable_name = _airlock.portable_name

describe_probes = _airlock.describe_probes
run_conformance = _airlock.run_conformance

HostToolDeclaration = _airlock.HostToolDeclaration
DispatchResult = _airlock.DispatchResult
run_program_with_host_tools = _airlock.run_program_with_host_tools
SandboxTool = _airlock.SandboxTool
SandboxToolCall = _airlock.SandboxToolCall


# ---- host tools -----------------------------------------------------------------------------

_DECLARATION_ATTRIBUTE = "__airlock_host_tool_declaration__"
_UNANSWERED = object()


def sandbox_tool(*, source=_UNANSWERED, sink=_UNANSWERED, identity=_UNANSWERED):
    """Stamp a function with its information-flow declaration. All three legs must be answered
    (``None`` is an answer: "not that role"); a missing leg is a ``TypeError``."""
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
    """The function's stamp, or None when it is unstamped."""
    declaration = getattr(function, _DECLARATION_ATTRIBUTE, None)
    return declaration if isinstance(declaration, HostToolDeclaration) else None


_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean",
               dict: "object", list: "array"}


def _parameters_of(function):
    parameters = []
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise TypeError(f"host tool {function!r}: *args/**kwargs cannot be declared to a "
                            "guest; name every parameter")
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise TypeError(f"host tool {function!r}: positional-only parameters cannot be "
                            "bound by name")
        annotation = parameter.annotation
        origin = typing.get_origin(annotation) or annotation
        json_type = _JSON_TYPES.get(origin, "any")
        parameters.append((parameter.name, json_type, parameter.default is parameter.empty, ""))
    return parameters


class HostToolRegistry(_airlock._HostToolRegistry):
    """Functions a guest program may call back into the host, under caps.

    Starts empty; ``register`` refuses a duplicate or empty name, an unstamped function when
    ``require_declared``, and an identity not in ``allowed_identities``. ``aggregate()`` seals it.
    A body runs in the host process with the host's privileges: register only what a model's
    code may drive. An exception in a body reaches the guest as a fixed refusal; the reason goes
    to the log."""

    def __init__(self, *, require_declared=False, allowed_identities=None,
                 max_dispatches_per_run=16, response_limits=None):
        if allowed_identities is None:
            allowed_identities = {Identity.APP}  # noqa: F821
        if response_limits is None:
            response_limits = DEFAULT_TRANSFER_LIMITS
        if not isinstance(response_limits, TransferLimits):
            raise TypeError("response_limits: expected a TransferLimits")
        super().__init__(require_declared=require_declared,
                         allowed_identities=allowed_identities,
                         max_dispatches_per_run=max_dispatches_per_run,
                         response_limits=response_limits)

    def register(self, function, *, name=None, description=None):
        """Register ``function`` under ``name`` (default: its ``__name__``); its parameters are
        read from its signature (annotations str/int/float/bool/dict/list become JSON types).
        Returns the function, so this also works as a decorator."""
        if not callable(function):
            raise TypeError("register: expected a callable")
        tool_name = function.__name__ if name is None else name
        if not isinstance(tool_name, str):
            raise TypeError("register: the name must be a str")
        text = description if description is not None else inspect.getdoc(function) or ""
        self._register(function, tool_name, text, _parameters_of(function),
                       declaration_of(function))
        return function


# ---- binding a workload as a tool (airlock/_binding.py) ------------------------------------

from ._binding import (  # noqa: E402 — after the records it uses
    CallerContext, SandboxPurger, list_all_files, list_no_files, make_caller_context,
    reclaim_guest_path, sandbox_tool_declarations, sandboxed_tool, scope)


# ---- the codeact kind -----------------------------------------------------------------------

_CODEACT_SPEC_OPTIONS = ("image", "image_id", "outputs", "files_in", "files_out", "host_tools",
                         "egress_allow", "work_dir", "resources")


def codeact_sandbox_spec(**options):
    """The spec the codeact kind runs under (see make_codeact_tool for the options)."""
    unknown = set(options) - set(_CODEACT_SPEC_OPTIONS)
    if unknown:
        raise TypeError("codeact_sandbox_spec: unknown options: " + ", ".join(sorted(unknown)))
    return _airlock._codeact_sandbox_spec(options)


def make_codeact_tool(router, *, context, agent_dir="codeact", file_store=None, output_sink=None,
                      outbound_max_confidentiality=None, exec_timeout=120.0,
                      on_reclaim_failure=None, **spec_options):
    """The ``execute_code`` tool: runs model-written Python in a sandbox.

    Spec options: image, image_id, outputs ("none", "declared", "manifest"), files_in,
    files_out, host_tools (a HostToolRegistry — taking its aggregate seals it), egress_allow,
    work_dir, resources. ``file_store`` is any object with ``list()`` and ``read(name)``.
    Returns a :class:`SandboxTool` called with ``code=``, ``files=`` and (declared mode)
    ``outputs=``; None when the router is disabled."""
    unknown = set(spec_options) - set(_CODEACT_SPEC_OPTIONS)
    if unknown:
        raise TypeError("make_codeact_tool: unknown options: " + ", ".join(sorted(unknown)))
    return _airlock._make_codeact_tool(
        router, context=context, agent_dir=agent_dir, spec_options=spec_options,
        file_store=file_store, output_sink=output_sink,
        outbound_max_confidentiality=outbound_max_confidentiality, exec_timeout=exec_timeout,
        on_reclaim_failure=on_reclaim_failure)


from . import aio  # noqa: E402 — the awaitable variants need everything above
