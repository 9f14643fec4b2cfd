"""Types of airlock._host_tools: Python functions a guest program may call back into the host."""

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from ._airlock import (
    DispatchResult as DispatchResult, ExecResult, HostToolDeclaration as HostToolDeclaration,
    HostToolRun as HostToolRun, Sandbox, TransferLimits, _HostToolRegistry)
from .aio import AsyncSandbox

__all__ = [
    "AirlockHostToolsWarning", "CALLS_DIRECTORY", "DEFAULT_MAX_DISPATCHES_PER_RUN",
    "DispatchResult", "GuestRunLayout", "HostToolDeclaration", "HostToolRegistry",
    "HostToolRun", "RESPONSE_FRAMING_BYTES", "SHIM_MODULE", "WORK_DIRECTORY", "declaration_of",
    "dispatch_over_exec", "guest_run_layout", "host_tool_shim", "launcher_script",
    "reclaim_run", "run_program_with_host_tools", "sandbox_tool"
]

_F = TypeVar("_F", bound=Callable[..., Any])
_Sandbox = Sandbox | AsyncSandbox

SHIM_MODULE: Final[str]
CALLS_DIRECTORY: Final[str]
WORK_DIRECTORY: Final[str]
DEFAULT_MAX_DISPATCHES_PER_RUN: Final[int]
RESPONSE_FRAMING_BYTES: Final[int]

class AirlockHostToolsWarning(UserWarning): ...

def sandbox_tool(*, source: str | None = ..., sink: str | None = ...,
                 identity: str | None = ...) -> Callable[[_F], _F]: ...
def declaration_of(function: Callable[..., Any]) -> HostToolDeclaration | None: ...

class HostToolRegistry(_HostToolRegistry):
    def __init__(self, *, require_declared: bool = ...,
                 allowed_identities: Collection[str] | None = ...,
                 max_dispatches_per_run: int = ...,
                 response_limits: TransferLimits | None = ...,
                 dispatch_observer: Callable[[HostToolRun | None, str], Any] | None = ...
                 ) -> None: ...
    def register(self, function: _F, *, name: str | None = ...,
                 description: str | None = ...) -> _F: ...
    def resolve(self, name: str) -> Callable[..., Any] | None: ...
    def dispatch(self, name: str, arguments: Mapping[str, Any] | None = ...) -> DispatchResult: ...

@dataclass(frozen=True)
class GuestRunLayout:
    directory: str
    work: str
    program: str
    shim: str
    launcher: str
    calls: str
    output: str
    exit_code: str
    pid: str
    session: str = ...

def guest_run_layout(run_directory: str, *, program: str = ...) -> GuestRunLayout: ...
def host_tool_shim(names: Iterable[str] = ..., *, call_timeout: float = ...) -> str: ...
def launcher_script(layout: GuestRunLayout, interpreter: str = ...) -> str: ...
def dispatch_over_exec(sandbox: _Sandbox, run: HostToolRun, layout: GuestRunLayout, *,
                       timeout: float, poll_interval: float = ...,
                       interpreter: str = ...) -> ExecResult: ...
def reclaim_run(sandbox: _Sandbox, layout: GuestRunLayout, *,
                timeout: float = ...) -> str | None: ...
def run_program_with_host_tools(
    sandbox: _Sandbox, registry: HostToolRegistry, code: str, *, run_directory: str,
    timeout: float = ..., channel: str | None = ..., program: str = ...,
    poll_interval: float = ..., call_timeout: float | None = ..., interpreter: str = ...,
    reclaim: bool = ...) -> dict[str, Any]: ...

async def run_program_with_host_tools_async(sandbox: _Sandbox, registry: HostToolRegistry,
                                            code: str, **options: Any) -> dict[str, Any]: ...
async def dispatch_over_exec_async(sandbox: _Sandbox, run: HostToolRun, layout: GuestRunLayout,
                                   **options: Any) -> ExecResult: ...
async def reclaim_run_async(sandbox: _Sandbox, layout: GuestRunLayout,
                            **options: Any) -> str | None: ...
