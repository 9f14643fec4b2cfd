"""Types of airlock.errors: every refusal and failure airlock reports."""

from typing import Any, ClassVar

SANDBOX_KEPT_MESSAGE: str
SANDBOX_RESET_MESSAGE: str

class AirlockError(Exception):
    type: ClassVar[str]
    check: str
    message: str
    def __init__(self, message: str = ..., *args: object) -> None: ...
    def __str__(self) -> str: ...

class InvalidArgument(AirlockError, ValueError):
    type: ClassVar[str]

class ConfinementError(InvalidArgument):
    type: ClassVar[str]

class HostToolNotDeclared(InvalidArgument):
    type: ClassVar[str]

class HostToolIdentityNotAllowed(InvalidArgument):
    type: ClassVar[str]

class SandboxSystemError(AirlockError, OSError):
    type: ClassVar[str]
    path: str

class NotFound(SandboxSystemError, FileNotFoundError):
    type: ClassVar[str]

class NotADirectory(SandboxSystemError, NotADirectoryError):
    type: ClassVar[str]

class IsADirectory(SandboxSystemError, IsADirectoryError):
    type: ClassVar[str]

class _StoppedCommand:
    @property
    def sandbox_reset(self) -> bool: ...
    @property
    def sandbox_message(self) -> str: ...

class SandboxTimeout(_StoppedCommand, SandboxSystemError, TimeoutError):
    type: ClassVar[str]
    kill_confirmed: bool | None
    partial_stdout: bytes
    partial_stderr: bytes

class SandboxQueuedTimeout(SandboxTimeout):
    type: ClassVar[str]
    @property
    def sandbox_reset(self) -> bool: ...
    @property
    def sandbox_message(self) -> str: ...

class SandboxProgramTimeout(SandboxTimeout):
    type: ClassVar[str]
    output: str
    signal: str
    reach: str
    @property
    def sandbox_reset(self) -> bool: ...

class RouterRefusal(AirlockError): ...

class SandboxBackendNotPermitted(RouterRefusal, PermissionError):
    type: ClassVar[str]

class SandboxCapabilityNotSupported(RouterRefusal, RuntimeError):
    type: ClassVar[str]

class SandboxOsFamilyNotSupported(RouterRefusal, RuntimeError):
    type: ClassVar[str]

class SandboxCapabilityDenied(RouterRefusal, PermissionError):
    type: ClassVar[str]

class SandboxIdentityDenied(RouterRefusal, PermissionError):
    type: ClassVar[str]

class SandboxEgressNotEnforced(RouterRefusal, PermissionError):
    type: ClassVar[str]

class SandboxTransferLimitsNotPermitted(RouterRefusal, PermissionError):
    type: ClassVar[str]

class NoSandboxBackend(AirlockError, LookupError):
    type: ClassVar[str]

class SandboxOutputError(AirlockError, RuntimeError):
    type: ClassVar[str]

class SandboxOutputMissing(SandboxOutputError):
    type: ClassVar[str]

class SandboxOutputNotConfined(SandboxOutputError):
    type: ClassVar[str]

class SandboxOutputNotRegular(SandboxOutputError):
    type: ClassVar[str]

class SandboxOutputSizeUnknown(SandboxOutputError):
    type: ClassVar[str]

class SandboxOutputUnreachable(SandboxOutputError):
    type: ClassVar[str]

class SandboxLandingNotConfined(SandboxOutputError):
    type: ClassVar[str]

class SandboxOutputSinkRequired(SandboxOutputError):
    type: ClassVar[str]

class SandboxArtifactNameInvalid(SandboxOutputError):
    type: ClassVar[str]

class SandboxArtifactNameCollision(SandboxOutputError):
    type: ClassVar[str]

class SandboxTransferCapExceeded(SandboxOutputError):
    type: ClassVar[str]
    cap: str
    file: str
    limit: int
    size: int | None

class SandboxExecOutputLimitExceeded(_StoppedCommand, AirlockError, RuntimeError):
    type: ClassVar[str]
    limit: int
    kill_confirmed: bool | None

class SandboxFileRefused(AirlockError, OSError):
    type: ClassVar[str]
    refusal: str
    path: str
    detail: str

class SandboxShellTransferFailed(AirlockError, RuntimeError):
    type: ClassVar[str]

class SandboxShellTransferUnfinished(AirlockError, RuntimeError):
    type: ClassVar[str]
    over_cap: bool

class NotSupported(AirlockError, NotImplementedError):
    type: ClassVar[str]

class BackendError(AirlockError, RuntimeError):
    type: ClassVar[str]
    detail: str
    status_code: int | None
    body: str | None

class SandboxBackendNotInstalled(BackendError, ImportError):
    type: ClassVar[str]

class SandboxEgressPolicyConflict(BackendError):
    type: ClassVar[str]

class SandboxInvalidated(BackendError):
    type: ClassVar[str]

class ConformanceFailure(AirlockError, AssertionError):
    type: ClassVar[str]
    failures: list[dict[str, Any]]
    results: list[dict[str, Any]]
    total: int
    def __init__(self, message: str = ..., *args: object) -> None: ...

def error_detail(error: BaseException) -> str: ...

__all__ = [
    "AirlockError", "InvalidArgument", "ConfinementError", "HostToolNotDeclared",
    "HostToolIdentityNotAllowed", "SandboxSystemError", "NotFound", "NotADirectory",
    "IsADirectory", "SandboxTimeout", "SandboxQueuedTimeout", "SandboxProgramTimeout",
    "RouterRefusal", "SandboxBackendNotPermitted", "SandboxCapabilityNotSupported",
    "SandboxOsFamilyNotSupported", "SandboxCapabilityDenied", "SandboxIdentityDenied",
    "SandboxEgressNotEnforced", "SandboxTransferLimitsNotPermitted", "NoSandboxBackend",
    "SandboxOutputError", "SandboxOutputMissing", "SandboxOutputNotConfined",
    "SandboxOutputNotRegular", "SandboxOutputSizeUnknown", "SandboxOutputUnreachable",
    "SandboxLandingNotConfined", "SandboxOutputSinkRequired", "SandboxArtifactNameInvalid",
    "SandboxArtifactNameCollision", "SandboxTransferCapExceeded",
    "SandboxExecOutputLimitExceeded", "SandboxFileRefused", "SandboxShellTransferFailed",
    "SandboxShellTransferUnfinished", "NotSupported", "BackendError",
    "SandboxBackendNotInstalled", "SandboxEgressPolicyConflict", "SandboxInvalidated",
    "ConformanceFailure"
]
