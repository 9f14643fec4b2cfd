"""Types of airlock._binding: a sandboxed workload as a tool, and a conversation's disposal."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Protocol

from ._airlock import (
    OutputSink, ReclaimFailure, Sandbox, SandboxRouter, SandboxSpec, SandboxTool,
    SandboxToolCall, ScopeDisposal)
from .aio import AsyncSandboxRouter

_Router = SandboxRouter | AsyncSandboxRouter

@dataclass(frozen=True)
class CallerContext:
    current_scope: Callable[[], str]
    current_thread_id: Callable[[], str | None]
    list_files: Callable[[str], list[str]] | None = ...

def make_caller_context(list_files: Callable[[str], list[str]] | None,
                        scope_getter: Callable[[], str],
                        thread_getter: Callable[[], str | None]) -> CallerContext: ...

class _ListingStore(Protocol):
    def list_children(self, directory: str, /) -> Any: ...

def list_all_files(store: _ListingStore, directory: str = ...) -> list[str]: ...
def list_no_files(store: str) -> list[str]: ...

def sandbox_tool_declarations(
    spec: SandboxSpec | Mapping[str, Any], *, source_integrity: str | None = ...,
    outbound_max_confidentiality: str | None = ..., output_sink: OutputSink | None = ...,
    also_carries_out: bool = ...) -> dict[str, Any]: ...

def sandboxed_tool(
    router: _Router | None, spec: SandboxSpec | Mapping[str, Any],
    body: Callable[[SandboxToolCall, Any], str], *, context: CallerContext, name: str,
    description: str, agent_dir: str | None = ..., approval_mode: str = ...,
    declarations: Mapping[str, Any] | None = ..., source_integrity: str | None = ...,
    outbound_max_confidentiality: str | None = ..., output_sink: OutputSink | None = ...,
    also_carries_out: bool = ..., on_reclaim_failure: Callable[[ReclaimFailure], object] | None = ...,
    reclaim_timeout: float = ..., admission_timeout: float = ...) -> SandboxTool | None: ...

def reclaim_guest_path(sandbox: Sandbox, path: str, *, working_directory: str | None = ...,
                       timeout: float = ...) -> str | None: ...

class Scope:
    scope_name: str
    thread_id: str
    def __init__(self, router: _Router, scope_name: str, thread_id: str) -> None: ...
    def __enter__(self) -> ScopeDisposal: ...
    def __exit__(self, exc_type: type[BaseException] | None, exc_value: BaseException | None,
                 traceback: TracebackType | None) -> Literal[False]: ...
    async def __aenter__(self) -> ScopeDisposal: ...
    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc_value: BaseException | None,
                        traceback: TracebackType | None) -> Literal[False]: ...

def scope(router: _Router, scope_name: str, thread_id: str) -> Scope: ...

class SandboxPurger:
    def __init__(self, router: _Router) -> None: ...
    def purge_scoped_thread(self, scope_name: str, thread_id: str) -> int: ...
