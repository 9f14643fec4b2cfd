"""Every refusal and failure airlock reports, as Python exceptions.

One class per C++ error type (``include/airlock/errors.hpp``), all under :class:`AirlockError`,
with the catch relationships the seeds give them, so a handler written against the reference
keeps working:

* bad input is a ``ValueError`` — a confinement refusal (an escape, a link in a parent) included,
  and it is never a ``FileNotFoundError``: a caller can tell an attack from an absence;
* an operating-system or guest failure is an ``OSError`` (not-found, not-a-directory and
  is-a-directory as the matching built-in subclasses);
* the timeout family is ``TimeoutError``: the caller's deadline (:class:`SandboxTimeout`), a
  deadline that expired while still queued (:class:`SandboxQueuedTimeout`: nothing ran, retry
  unchanged), a host-tool run's own bound (:class:`SandboxProgramTimeout`);
* the router's posture refusals are ``PermissionError``, its functionality refusals
  ``RuntimeError``; :class:`NoSandboxBackend` is a ``LookupError``;
* the outputs family is a ``RuntimeError`` and deliberately *not* a ``ValueError``;
* :class:`NotSupported` is a ``NotImplementedError``; :class:`ConformanceFailure` an
  ``AssertionError``.

Every instance carries ``message``, ``type`` (the stable wire name, e.g.
``"SandboxEgressNotEnforced"``) and ``check`` (which check refused; may be empty), plus the typed
fields of its class. ``str(error)`` is the message, safe to show a model; a
:class:`BackendError`'s ``detail`` is for logs only.
"""


class AirlockError(Exception):
    """Base of every airlock error."""

    type = "Error"
    check = ""

    def __init__(self, message="", *args):
        super().__init__(message, *args)
        self.message = message

    def __str__(self):
        return self.message


# ---- bad input -------------------------------------------------------------------------------


class InvalidArgument(AirlockError, ValueError):
    type = "InvalidArgument"


class ConfinementError(InvalidArgument):
    """A guest path escapes its working directory or passes through a link."""

    type = "ConfinementError"


class HostToolNotDeclared(InvalidArgument):
    type = "HostToolNotDeclared"


class HostToolIdentityNotAllowed(InvalidArgument):
    type = "HostToolIdentityNotAllowed"


# ---- operating-system and guest failures -----------------------------------------------------


class SandboxSystemError(AirlockError, OSError):
    """An operation failed in the OS or the guest; ``errno`` and the guest ``path`` when known."""

    type = "SystemError"
    path = ""


class NotFound(SandboxSystemError, FileNotFoundError):
    type = "NotFound"


class NotADirectory(SandboxSystemError, NotADirectoryError):
    type = "NotADirectory"


class IsADirectory(SandboxSystemError, IsADirectoryError):
    type = "IsADirectory"


#: What a model is told after a stopped command whose every process the backend proved gone.
SANDBOX_KEPT_MESSAGE = (
    "The command was stopped and every process it started is gone; the sandbox is intact, with "
    "every file written earlier in this conversation.")
#: What a model is told after a command whose end is unknown, once its sandbox was condemned.
SANDBOX_RESET_MESSAGE = (
    "The sandbox was reset: the command's end could not be confirmed (its processes may have "
    "outlived it), so the sandbox was replaced by a fresh one, and every file written earlier in "
    "this conversation is gone.")


class _StoppedCommand:
    """What a stopped command (its deadline, its output ceiling, a stop request) means for its
    sandbox: keep it only when the backend proved every process of the command gone.

    ``sandbox_reset``: True when the sandbox must be condemned (``SandboxToolCall.condemn()``)
    because the command's end is unknown — its processes may still be running and writing;
    ``sandbox_message``: the sentence to tell the model, either way."""

    @property
    def sandbox_reset(self):
        return self.kill_confirmed is not True

    @property
    def sandbox_message(self):
        return SANDBOX_RESET_MESSAGE if self.sandbox_reset else SANDBOX_KEPT_MESSAGE


class SandboxTimeout(_StoppedCommand, SandboxSystemError, TimeoutError):
    """The caller's deadline expired — and nothing else.

    ``kill_confirmed``: whether the command's process group was confirmed gone (None: unknown);
    ``partial_stdout`` / ``partial_stderr``: output so far, as bytes, when known;
    ``sandbox_reset`` / ``sandbox_message``: whether to condemn the sandbox, and what to tell the
    model (condemn unless the kill is confirmed)."""

    type = "Timeout"
    kill_confirmed = None
    partial_stdout = b""
    partial_stderr = b""


class SandboxQueuedTimeout(SandboxTimeout):
    """The deadline passed while the call waited for its turn: the program never started, so
    the sandbox is as it was (``sandbox_reset`` is False)."""

    type = "SandboxQueuedTimeout"

    @property
    def sandbox_reset(self):
        return False

    @property
    def sandbox_message(self):
        return "The command never started; the sandbox is as it was."


class SandboxProgramTimeout(SandboxTimeout):
    """A host-tool run's own bound expired. Branch on ``signal``, not on the message.

    ``sandbox_reset`` is False only when SIGKILL reached the run's whole process group
    (``signal == "sent"`` and ``reach == "group"``)."""

    type = "SandboxProgramTimeout"
    output = ""
    signal = "unknown"
    reach = "nothing"

    @property
    def sandbox_reset(self):
        return not (self.signal == "sent" and self.reach == "group")


# ---- the router's refusals -------------------------------------------------------------------


class RouterRefusal(AirlockError):
    """The router refused before anything ran; ``check`` names the check."""


class SandboxBackendNotPermitted(RouterRefusal, PermissionError):
    type = "SandboxBackendNotPermitted"


class SandboxCapabilityNotSupported(RouterRefusal, RuntimeError):
    type = "SandboxCapabilityNotSupported"


class SandboxOsFamilyNotSupported(RouterRefusal, RuntimeError):
    type = "SandboxOsFamilyNotSupported"


class SandboxCapabilityDenied(RouterRefusal, PermissionError):
    type = "SandboxCapabilityDenied"


class SandboxIdentityDenied(RouterRefusal, PermissionError):
    type = "SandboxIdentityDenied"


class SandboxEgressNotEnforced(RouterRefusal, PermissionError):
    type = "SandboxEgressNotEnforced"


class SandboxTransferLimitsNotPermitted(RouterRefusal, PermissionError):
    type = "SandboxTransferLimitsNotPermitted"


class NoSandboxBackend(AirlockError, LookupError):
    type = "NoSandboxBackend"


# ---- declared outputs and sinks --------------------------------------------------------------


class SandboxOutputError(AirlockError, RuntimeError):
    type = "SandboxOutputError"


class SandboxOutputMissing(SandboxOutputError):
    type = "SandboxOutputMissing"


class SandboxOutputNotConfined(SandboxOutputError):
    type = "SandboxOutputNotConfined"


class SandboxOutputNotRegular(SandboxOutputError):
    type = "SandboxOutputNotRegular"


class SandboxOutputSizeUnknown(SandboxOutputError):
    type = "SandboxOutputSizeUnknown"


class SandboxOutputUnreachable(SandboxOutputError):
    type = "SandboxOutputUnreachable"


class SandboxLandingNotConfined(SandboxOutputError):
    type = "SandboxLandingNotConfined"


class SandboxOutputSinkRequired(SandboxOutputError):
    type = "SandboxOutputSinkRequired"


class SandboxArtifactNameInvalid(SandboxOutputError):
    type = "SandboxArtifactNameInvalid"


class SandboxArtifactNameCollision(SandboxOutputError):
    type = "SandboxArtifactNameCollision"


class SandboxTransferCapExceeded(SandboxOutputError):
    """A transfer cap was breached: ``cap``, ``file``, ``limit`` and ``size`` (None: unknown)."""

    type = "SandboxTransferCapExceeded"
    cap = ""
    file = ""
    limit = 0
    size = None


# ---- exec and shell roads --------------------------------------------------------------------


class SandboxExecOutputLimitExceeded(_StoppedCommand, AirlockError, RuntimeError):
    """A bounded exec's output passed its ceiling; nothing of it is returned. Not a timeout.

    ``sandbox_reset`` / ``sandbox_message``: condemn the sandbox unless ``kill_confirmed``."""

    type = "SandboxExecOutputLimitExceeded"
    limit = 0
    kill_confirmed = None


class SandboxFileRefused(AirlockError, OSError):
    """A shell road classified a refusal: ``refusal`` is file_not_found, is_directory, …"""

    type = "SandboxFileRefused"
    refusal = ""
    path = ""
    detail = ""


class SandboxShellTransferFailed(AirlockError, RuntimeError):
    type = "SandboxShellTransferFailed"


class SandboxShellTransferUnfinished(AirlockError, RuntimeError):
    """The command's end is unknown: condemn the sandbox."""

    type = "SandboxShellTransferUnfinished"
    over_cap = False


# ---- backends and conformance ----------------------------------------------------------------


class NotSupported(AirlockError, NotImplementedError):
    type = "NotSupported"


class BackendError(AirlockError, RuntimeError):
    """The provider failed for a reason of its own. ``detail`` is for logs, never a model."""

    type = "BackendError"
    detail = ""
    status_code = None  # the provider's HTTP status, when it answered over HTTP
    body = None         # the provider's HTTP response body, likewise — for logs only


class SandboxBackendNotInstalled(BackendError, ImportError):
    """The backend's provider program (the container engine, runsc) is not on this host."""

    type = "SandboxBackendNotInstalled"


class SandboxEgressPolicyConflict(BackendError):
    """A warm sandbox of this conversation and kind has another egress policy: dispose it first."""

    type = "SandboxEgressPolicyConflict"


class SandboxInvalidated(BackendError):
    """The backend disposed the sandbox because a command's end was unknown; acquire again."""

    type = "SandboxInvalidated"


class ConformanceFailure(AirlockError, AssertionError):
    """Conformance probes failed: ``failures`` is a list of {probe, why, failure}."""

    type = "ConformanceFailure"

    def __init__(self, message="", *args):
        super().__init__(message, *args)
        self.failures = []


def error_detail(error):
    """One line about ``error`` for a host's log — never for a model: ``"<Type>: <text>"``, then
    ``" | status=<status>"`` and ``" | body=<the first 600 characters>"`` when the error carries
    a provider's HTTP answer (``status_code`` / ``body``, or a ``response`` with ``text()``, as
    HTTP client errors do). Never raises."""
    try:
        text = f"{type(error).__name__}: {error}"
        status = getattr(error, "status_code", None)
        if status is not None:
            text += f" | status={status}"
        body = getattr(error, "body", None)
        if body is None:
            response = getattr(error, "response", None)
            reader = getattr(response, "text", None)
            body = reader() if callable(reader) else reader
        if body is not None:
            text += f" | body={str(body)[:600]}"
        return text
    except Exception:  # noqa: BLE001 — a log line must never be the next failure
        return f"{type(error).__name__}: (its text could not be read)"


__all__ = [name for name, value in list(globals().items())
           if isinstance(value, type) and issubclass(value, AirlockError)]
