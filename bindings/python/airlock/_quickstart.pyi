"""Types of airlock._quickstart: one sandbox on one backend in one call."""

from collections.abc import Mapping
from typing import Any, Final

from ._airlock import Sandbox, SandboxKey, SandboxRouter, SandboxSpec
from .aio import AsyncSandboxRouter

QUICKSTART_SCOPE: Final[str]
QUICKSTART_KIND: Final[str]
QUICKSTART_IMAGE: Final[str]

def quickstart_router(backend: str | Mapping[str, Any] | None = ...,
                      min_isolation: str | None = ...) -> SandboxRouter: ...

def quickstart_arguments(
    backend: str | Mapping[str, Any] | None, min_isolation: str | None,
    router: SandboxRouter | AsyncSandboxRouter | None, key: SandboxKey | None,
    spec: SandboxSpec | None,
    spec_fields: Mapping[str, Any]) -> tuple[SandboxRouter, SandboxKey, SandboxSpec]: ...

def create(backend: str | Mapping[str, Any] | None = ..., *, min_isolation: str | None = ...,
           router: SandboxRouter | AsyncSandboxRouter | None = ...,
           key: SandboxKey | None = ..., spec: SandboxSpec | None = ...,
           **spec_fields: Any) -> Sandbox: ...
