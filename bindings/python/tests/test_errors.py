"""Every C++ error type surfaces as its own Python class, with the seeds' catch relationships.

Each case throws the real C++ type through the module's translator (`_raise_error`), so a
mapping that picked a base before a derived type, or lost a field, fails here."""

import pytest

import airlock
from airlock import _airlock, errors

# C++ type → (Python class, built-in bases it must also be).
CASES = {
    "InvalidArgument": (errors.InvalidArgument, (ValueError,)),
    "ConfinementError": (errors.ConfinementError, (ValueError, errors.InvalidArgument)),
    "HostToolNotDeclared": (errors.HostToolNotDeclared, (ValueError,)),
    "HostToolIdentityNotAllowed": (errors.HostToolIdentityNotAllowed, (ValueError,)),
    "SystemError": (errors.SandboxSystemError, (OSError,)),
    "NotFound": (errors.NotFound, (FileNotFoundError, OSError)),
    "NotADirectory": (errors.NotADirectory, (NotADirectoryError,)),
    "IsADirectory": (errors.IsADirectory, (IsADirectoryError,)),
    "Timeout": (errors.SandboxTimeout, (TimeoutError, OSError)),
    "SandboxQueuedTimeout": (errors.SandboxQueuedTimeout, (TimeoutError, errors.SandboxTimeout)),
    "SandboxProgramTimeout": (errors.SandboxProgramTimeout, (TimeoutError,)),
    "SandboxBackendNotPermitted": (errors.SandboxBackendNotPermitted, (PermissionError,)),
    "SandboxCapabilityNotSupported": (errors.SandboxCapabilityNotSupported, (RuntimeError,)),
    "SandboxOsFamilyNotSupported": (errors.SandboxOsFamilyNotSupported, (RuntimeError,)),
    "SandboxCapabilityDenied": (errors.SandboxCapabilityDenied, (PermissionError,)),
    "SandboxIdentityDenied": (errors.SandboxIdentityDenied, (PermissionError,)),
    "SandboxEgressNotEnforced": (errors.SandboxEgressNotEnforced, (PermissionError,)),
    "SandboxTransferLimitsNotPermitted": (errors.SandboxTransferLimitsNotPermitted,
                                          (PermissionError,)),
    "NoSandboxBackend": (errors.NoSandboxBackend, (LookupError,)),
    "SandboxOutputMissing": (errors.SandboxOutputMissing, (errors.SandboxOutputError,)),
    "SandboxOutputNotConfined": (errors.SandboxOutputNotConfined, (RuntimeError,)),
    "SandboxOutputNotRegular": (errors.SandboxOutputNotRegular, (RuntimeError,)),
    "SandboxOutputSizeUnknown": (errors.SandboxOutputSizeUnknown, (RuntimeError,)),
    "SandboxOutputUnreachable": (errors.SandboxOutputUnreachable, (RuntimeError,)),
    "SandboxLandingNotConfined": (errors.SandboxLandingNotConfined, (RuntimeError,)),
    "SandboxOutputSinkRequired": (errors.SandboxOutputSinkRequired, (RuntimeError,)),
    "SandboxArtifactNameInvalid": (errors.SandboxArtifactNameInvalid, (RuntimeError,)),
    "SandboxArtifactNameCollision": (errors.SandboxArtifactNameCollision, (RuntimeError,)),
    "SandboxTransferCapExceeded": (errors.SandboxTransferCapExceeded, (RuntimeError,)),
    "SandboxExecOutputLimitExceeded": (errors.SandboxExecOutputLimitExceeded, (RuntimeError,)),
    "SandboxFileRefused": (errors.SandboxFileRefused, (OSError,)),
    "SandboxShellTransferFailed": (errors.SandboxShellTransferFailed, (RuntimeError,)),
    "SandboxShellTransferUnfinished": (errors.SandboxShellTransferUnfinished, (RuntimeError,)),
    "NotSupported": (errors.NotSupported, (NotImplementedError,)),
    "BackendError": (errors.BackendError, (RuntimeError,)),
    "SandboxBackendNotInstalled": (errors.SandboxBackendNotInstalled,
                                   (errors.BackendError, ImportError)),
    "SandboxEgressPolicyConflict": (errors.SandboxEgressPolicyConflict, (errors.BackendError,)),
    "SandboxInvalidated": (errors.SandboxInvalidated, (errors.BackendError,)),
    "ConformanceFailure": (errors.ConformanceFailure, (AssertionError,)),
    "Error": (errors.AirlockError, ()),
}


@pytest.mark.parametrize("cpp_type", sorted(CASES))
def test_each_cpp_error_becomes_its_own_python_class(cpp_type):
    cls, bases = CASES[cpp_type]
    with pytest.raises(airlock.AirlockError) as caught:
        _airlock._raise_error(cpp_type, "what was refused")
    error = caught.value
    assert type(error) is cls, f"{cpp_type} became {type(error).__name__}"
    for base in bases:
        assert isinstance(error, base)
    assert error.type == cpp_type  # the stable wire name travels with the exception
    assert str(error) == error.message


def test_catch_relationships_that_carry_behaviour():
    # A confinement refusal is not a not-found; a queued timeout is a timeout, not every timeout
    # is queued; the outputs family is not a ValueError; an output overflow is not a timeout.
    assert not issubclass(errors.ConfinementError, FileNotFoundError)
    assert not issubclass(errors.NotFound, ValueError)
    assert issubclass(errors.SandboxQueuedTimeout, errors.SandboxTimeout)
    assert not issubclass(errors.SandboxTimeout, errors.SandboxQueuedTimeout)
    assert not issubclass(errors.SandboxOutputError, ValueError)
    assert not issubclass(errors.SandboxExecOutputLimitExceeded, TimeoutError)
    assert issubclass(errors.RouterRefusal, errors.AirlockError)
    for cls, _ in CASES.values():
        assert issubclass(cls, airlock.AirlockError)


def test_typed_fields_cross_over():
    with pytest.raises(errors.SandboxTransferCapExceeded) as cap:
        _airlock._raise_error("SandboxTransferCapExceeded", "big.bin")
    assert (cap.value.cap, cap.value.file, cap.value.limit, cap.value.size) == \
        ("files_out.max_bytes_per_file", "big.bin", 10, 11)
    assert cap.value.check == "files_out.max_bytes_per_file"

    with pytest.raises(errors.SandboxProgramTimeout) as program:
        _airlock._raise_error("SandboxProgramTimeout", "ran out")
    assert program.value.signal is airlock.SignalOutcome.SENT
    assert program.value.reach is airlock.SignalReach.GROUP
    assert program.value.output == "so far"

    with pytest.raises(errors.SandboxTimeout) as timeout:
        _airlock._raise_error("Timeout", "deadline")
    assert timeout.value.kill_confirmed is True
    assert timeout.value.partial_stdout == b"partial out"
    assert timeout.value.errno == 110

    with pytest.raises(errors.NotFound) as missing:
        _airlock._raise_error("NotFound", "gone")
    assert missing.value.errno == 2 and missing.value.path == "/guest/missing"
    assert str(missing.value) == "gone"

    with pytest.raises(errors.BackendError) as backend:
        _airlock._raise_error("BackendError", "the provider failed")
    assert backend.value.detail == "provider detail"
    assert "provider detail" not in str(backend.value)

    with pytest.raises(errors.ConformanceFailure) as failure:
        _airlock._raise_error("ConformanceFailure", "it followed the link")
    assert failure.value.failures == [
        {"probe": "a-probe", "why": "what it proves", "failure": "it followed the link"}]

    with pytest.raises(errors.SandboxExecOutputLimitExceeded) as overflow:
        _airlock._raise_error("SandboxExecOutputLimitExceeded", "")
    assert overflow.value.limit == 64 and overflow.value.kill_confirmed is True


# ---- the error table (include/airlock/error_table.hpp) ----------------------------------------

KINDS = _airlock._error_kinds()
PYTHON_KINDS = [kind for kind in KINDS if kind["python_class"]]


def test_every_kind_of_the_table_has_its_python_class_under_its_parents_class():
    by_type = {kind["type"]: kind for kind in KINDS}
    for kind in PYTHON_KINDS:
        cls = getattr(errors, kind["python_class"], None)
        assert isinstance(cls, type) and issubclass(cls, errors.AirlockError), kind
        if kind["parent"]:
            parent = getattr(errors, by_type[kind["parent"]]["python_class"])
            assert issubclass(cls, parent), f"{cls.__name__} is not a {parent.__name__}"
        if kind["concrete"]:
            assert cls.type == kind["type"], f"{cls.__name__}.type is {cls.type!r}"


def test_every_python_error_class_is_a_kind_of_the_table():
    in_table = {kind["python_class"] for kind in PYTHON_KINDS}
    declared = {name for name in errors.__all__}
    assert declared - in_table == set(), "classes the table does not know"
    assert in_table - declared == set(), "kinds airlock.errors lacks"


def test_every_raisable_kind_is_covered_by_the_cases_above_and_raises_its_class():
    raisable = {kind["type"]: kind for kind in PYTHON_KINDS if kind["raisable"]}
    assert set(raisable) == set(CASES), "CASES and the table differ"
    for type_name, kind in raisable.items():
        with pytest.raises(errors.AirlockError) as caught:
            _airlock._raise_error(type_name, "m")
        assert type(caught.value).__name__ == kind["python_class"]


class _ProviderRefusal(Exception):
    status_code = 503

    class response:  # noqa: N801 — shaped as an HTTP client error's response
        @staticmethod
        def text():
            return "é" * 700


class _Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no text")


def test_error_detail_names_the_type_and_text_and_adds_status_and_a_bounded_body():
    assert airlock.error_detail(ValueError("bad image")) == "ValueError: bad image"
    line = airlock.error_detail(_ProviderRefusal("the engine refused"))
    assert line.startswith("_ProviderRefusal: the engine refused | status=503 | body=")
    assert line.endswith("é" * 600)
    assert len(line.split("body=")[1]) == 600


def test_error_detail_reads_a_backend_errors_own_fields_and_never_raises():
    with pytest.raises(errors.BackendError) as caught:
        _airlock._raise_error("BackendError", "the provider failed")
    assert caught.value.status_code is None and caught.value.body is None
    assert airlock.error_detail(caught.value) == "BackendError: " + str(caught.value)
    assert airlock.error_detail(_Unprintable()).startswith("_Unprintable: ")
