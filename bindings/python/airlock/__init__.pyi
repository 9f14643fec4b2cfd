"""Types of the `airlock` package (its runtime face is airlock/__init__.py)."""

import enum
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

from . import _airlock as _airlock, aio as aio, errors as errors
from ._airlock import (
    DEFAULT_TRANSFER_LIMITS as DEFAULT_TRANSFER_LIMITS,
    MAX_ARTIFACT_NAME_BYTES as MAX_ARTIFACT_NAME_BYTES,
    Artifact as Artifact,
    DeclaredOutput as DeclaredOutput,
    ExecResult as ExecResult,
    LandedArtifact as LandedArtifact,
    OutputSink as OutputSink,
    ReclaimFailure as ReclaimFailure,
    Sandbox as Sandbox,
    SandboxEntry as SandboxEntry,
    SandboxKey as SandboxKey,
    SandboxLimits as SandboxLimits,
    SandboxRouter as SandboxRouter,
    SandboxSpec as SandboxSpec,
    SandboxTool as SandboxTool,
    SandboxToolCall as SandboxToolCall,
    ScopeDisposal as ScopeDisposal,
    SnapshotRecord as SnapshotRecord,
    StopSource as StopSource,
    TransferLimits as TransferLimits,
    artifact_collision_key as artifact_collision_key,
    backend_types as backend_types,
    collect_outputs as collect_outputs,
    confine_guest_path as confine_guest_path,
    confine_guest_write_path as confine_guest_write_path,
    describe_probes as describe_probes,
    guest_directory_chain as guest_directory_chain,
    guest_path_relative_to as guest_path_relative_to,
    isolation_ladder as isolation_ladder,
    isolation_rank as isolation_rank,
    landing_outputs as landing_outputs,
    make_file_system_sink as make_file_system_sink,
    measure_files_delete_probes as measure_files_delete_probes,
    meets_floor as meets_floor,
    missing_sink_refusal as missing_sink_refusal,
    nfc_compose as nfc_compose,
    normalize_guest_path as normalize_guest_path,
    portable_name as portable_name,
    refuse_symlinked_parents as refuse_symlinked_parents,
    run_conformance as run_conformance,
    spec_lands_artifacts as spec_lands_artifacts,
    validate_artifact_name as validate_artifact_name,
)
from ._binding import (
    CallerContext as CallerContext,
    SandboxPurger as SandboxPurger,
    Scope as Scope,
    list_all_files as list_all_files,
    list_no_files as list_no_files,
    make_caller_context as make_caller_context,
    reclaim_guest_path as reclaim_guest_path,
    sandbox_tool_declarations as sandbox_tool_declarations,
    sandboxed_tool as sandboxed_tool,
    scope as scope,
)
from ._host_tools import (
    CALLS_DIRECTORY as CALLS_DIRECTORY,
    DEFAULT_MAX_DISPATCHES_PER_RUN as DEFAULT_MAX_DISPATCHES_PER_RUN,
    RESPONSE_FRAMING_BYTES as RESPONSE_FRAMING_BYTES,
    SHIM_MODULE as SHIM_MODULE,
    WORK_DIRECTORY as WORK_DIRECTORY,
    AirlockHostToolsWarning as AirlockHostToolsWarning,
    DispatchResult as DispatchResult,
    GuestRunLayout as GuestRunLayout,
    HostToolDeclaration as HostToolDeclaration,
    HostToolRegistry as HostToolRegistry,
    HostToolRun as HostToolRun,
    declaration_of as declaration_of,
    dispatch_over_exec as dispatch_over_exec,
    guest_run_layout as guest_run_layout,
    host_tool_shim as host_tool_shim,
    launcher_script as launcher_script,
    reclaim_run as reclaim_run,
    run_program_with_host_tools as run_program_with_host_tools,
    sandbox_tool as sandbox_tool,
)
from .errors import *  # every exception class, re-exported (errors.__all__)
from .errors import error_detail as error_detail

__version__: Final[str]

# ---- the vocabulary, built at import from the C++ tables (stubtest checks the members) -------

class Isolation(enum.StrEnum):
    NONE = "none"
    RUNTIME = "runtime"
    OS_PROCESS = "os_process"
    CONTAINER = "container"
    HARDENED_CONTAINER = "hardened_container"
    MICROVM = "microvm"
    VM = "vm"

class Egress(enum.StrEnum):
    UNRESTRICTED = "unrestricted"
    ALLOWLIST = "allowlist"
    CLOSED = "closed"

class Capability(enum.StrEnum):
    EXEC = "exec"
    RUN_CODE = "run_code"
    HOST_TOOLS = "host_tools"
    FILES_IN = "files_in"
    FILES_OUT = "files_out"
    FILES_LIST = "files_list"
    FILES_DELETE = "files_delete"
    SNAPSHOT = "snapshot"
    ATTACHED_IDENTITY = "attached_identity"

class OsFamily(enum.StrEnum):
    POSIX = "posix"
    WINDOWS = "windows"

class SourceIntegrity(enum.StrEnum):
    UNTRUSTED = "untrusted"
    TRUSTED = "trusted"

class Identity(enum.StrEnum):
    APP = "app"
    USER = "user"

class EntryKind(enum.StrEnum):
    FILE = "file"
    DIRECTORY = "directory"
    SYMLINK = "symlink"
    OTHER = "other"

class OutputDisposition(enum.StrEnum):
    LAND = "land"
    CONSUME = "consume"

class NameNormalization(enum.StrEnum):
    NFC = "nfc"
    NONE = "none"

class SignalOutcome(enum.StrEnum):
    SENT = "sent"
    REFUSED = "refused"
    ABSENT = "absent"
    UNRECORDED = "unrecorded"
    UNKNOWN = "unknown"

class SnapshotContent(enum.StrEnum):
    FILESYSTEM = "filesystem"
    FILESYSTEM_AND_MEMORY = "filesystem+memory"

class SignalReach(enum.StrEnum):
    GROUP = "group"
    PROGRAM = "program"
    NOTHING = "nothing"

class CodeactOutputs(enum.StrEnum):
    NONE = "none"
    DECLARED = "declared"
    MANIFEST = "manifest"

DEFAULT_CAPABILITIES: Final[frozenset[Capability]]
DEFAULT_SANDBOX_LIMITS: Final[SandboxLimits]

# ---- the codeact kind ------------------------------------------------------------------------

class _FileStore(Protocol):
    def list(self) -> list[str]: ...
    def read(self, name: str, /) -> bytes | str: ...

def codeact_sandbox_spec(**options: Any) -> SandboxSpec: ...
def make_codeact_tool(router: SandboxRouter | aio.AsyncSandboxRouter, *, context: CallerContext,
                      agent_dir: str = ..., file_store: _FileStore | None = ...,
                      output_sink: OutputSink | None = ...,
                      outbound_max_confidentiality: str | None = ...,
                      exec_timeout: float = ...,
                      on_reclaim_failure: Callable[[ReclaimFailure], object] | None = ...,
                      **spec_options: Any) -> SandboxTool | None: ...
