"""airlock for Python hosts: one seam between an agent host and the sandboxes that run what its
agents write.

    import airlock

    router = airlock.SandboxRouter({"backends": [{"type": "linux"}],
                                    "min_isolation": "container"})
    spec = airlock.SandboxSpec(kind="demo", image="host")
    with router.acquire(airlock.SandboxKey("tenant", "thread-1", "demo"), spec) as sandbox:
        result = sandbox.exec(["echo", "hi"])  # in the spec's work dir

or, for one sandbox on one backend (the router and its floor are still there)::

    with airlock.Sandbox.create("linux", min_isolation="container") as sandbox:
        print(sandbox.exec("uname -a").stdout)

The C++ core does the work (``airlock._airlock``); this package adds the Python spellings: the
vocabulary as ``enum.StrEnum`` classes built from the C++ tables (``str(Isolation.MICROVM)`` is
``"microvm"``, ``Isolation("process")`` raises ``ValueError``), the exception hierarchy
(:mod:`airlock.errors`), host-tool registration from plain functions, ``sandboxed_tool`` and the
codeact kind, and awaitable variants (:mod:`airlock.aio`).

The GIL is released during every sandbox, router, output and conformance operation.
"""

import enum
import typing

from . import _airlock
from . import errors
from .errors import *  # noqa: F401,F403 — the exception classes are part of the API
from .errors import error_detail  # noqa: F401 — one log line per error, for hosts

# ---- the vocabulary -------------------------------------------------------------------------


def _build_enum(name, values):
    # Member names are the seeds' (upper-case value; "filesystem+memory" reads
    # FILESYSTEM_AND_MEMORY); values are the wire strings, owned by C++.
    return enum.StrEnum(name, [(value.upper().replace("+", "_AND_"), value) for value in values],
                        module=__name__)


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
SnapshotRecord = _airlock.SnapshotRecord
Sandbox = _airlock.Sandbox
StopSource = _airlock.StopSource
SandboxRouter = _airlock.SandboxRouter
__version__ = _airlock.__version__
backend_types = _airlock.backend_types

OutputSink = _airlock.OutputSink
make_file_system_sink = _airlock.make_file_system_sink
collect_outputs = _airlock.collect_outputs
validate_artifact_name = _airlock.validate_artifact_name
nfc_compose = _airlock.nfc_compose
artifact_collision_key = _airlock.artifact_collision_key
portable_name = _airlock.portable_name
landing_outputs = _airlock.landing_outputs
spec_lands_artifacts = _airlock.spec_lands_artifacts
missing_sink_refusal = _airlock.missing_sink_refusal
MAX_ARTIFACT_NAME_BYTES = _airlock.MAX_ARTIFACT_NAME_BYTES

# Guest paths only: never apply these to host paths.
normalize_guest_path = _airlock.normalize_guest_path
confine_guest_path = _airlock.confine_guest_path
confine_guest_write_path = _airlock.confine_guest_write_path
guest_path_relative_to = _airlock.guest_path_relative_to
guest_directory_chain = _airlock.guest_directory_chain
refuse_symlinked_parents = _airlock.refuse_symlinked_parents

describe_probes = _airlock.describe_probes
run_conformance = _airlock.run_conformance
measure_files_delete_probes = _airlock.measure_files_delete_probes

SandboxTool = _airlock.SandboxTool
SandboxToolCall = _airlock.SandboxToolCall


# ---- host tools -----------------------------------------------------------------------------

from ._host_tools import *  # noqa: E402,F401,F403 — registry, run, declarations, transport helpers


# ---- binding a workload as a tool (airlock/_binding.py) ------------------------------------

from ._binding import (  # noqa: E402 — after the records it uses
    CallerContext, SandboxPurger, Scope, list_all_files, list_no_files, make_caller_context,
    reclaim_guest_path, sandbox_tool_declarations, sandboxed_tool, scope)


# ---- the quick start (airlock/_quickstart.py) ----------------------------------------------

from . import _quickstart  # noqa: E402

Sandbox.create = staticmethod(_quickstart.create)


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
