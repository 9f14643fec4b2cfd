"""Streaming exec (``on_output``) and what a stopped command means for its sandbox
(``sandbox_reset`` / ``sandbox_message`` on the exceptions), on the testing backend and, as
root, on linux."""

import threading
import time

import pytest

import airlock
from airlock import _airlock, errors

from conftest import TESTING_BACKEND

WORK = "/maf-sandbox/work"


def make_key(thread):
    return airlock.SandboxKey("tenant", thread, "agent")


def acquire_testing(router, thread):
    """A testing-backend sandbox whose work dir exists (the fake makes it on the first write)."""
    sandbox = router.acquire(make_key(thread), airlock.SandboxSpec(kind="k"))
    sandbox.write_file(".keep", "", working_directory=WORK)
    return sandbox


# ---- on_output --------------------------------------------------------------------------------


def test_on_output_gets_each_stream_and_the_result_keeps_none_of_it(testing_router):
    sandbox = acquire_testing(testing_router, "stream")
    chunks = []
    result = sandbox.exec("echo one; echo two >&2; exit 4", working_directory=WORK,
                          on_output=lambda stream, data: chunks.append((stream, data)))
    assert result.exit_code == 4
    assert b"".join(d for s, d in chunks if s == "stdout") == b"one\n"
    assert b"".join(d for s, d in chunks if s == "stderr") == b"two\n"
    assert all(isinstance(data, bytes) for _, data in chunks)
    assert (result.stdout_bytes, result.stderr_bytes) == (b"", b""), "streamed, not repeated"


def test_without_on_output_the_result_collects_as_before(testing_router):
    sandbox = acquire_testing(testing_router, "collect")
    result = sandbox.exec("echo one", working_directory=WORK)
    assert result.stdout == "one\n"


def test_a_callback_that_raises_stops_the_command_and_its_exception_is_raised(testing_router):
    sandbox = acquire_testing(testing_router, "raises")

    class Refused(Exception):
        pass

    def refuse(stream, data):
        raise Refused(f"no more {stream}")

    with pytest.raises(Refused, match="no more stdout"):
        sandbox.exec("echo one", working_directory=WORK, on_output=refuse)
    with pytest.raises(TypeError, match="on_output"):
        sandbox.exec("echo one", working_directory=WORK, on_output="not callable")
    # The sandbox still serves.
    assert sandbox.exec("echo two", working_directory=WORK).stdout == "two\n"


# ---- what a stopped command means for the sandbox ---------------------------------------------


def test_a_timeout_whose_kill_is_confirmed_says_the_sandbox_is_intact(testing_router):
    sandbox = acquire_testing(testing_router, "kept")
    with pytest.raises(airlock.SandboxTimeout) as expired:
        sandbox.exec(["sleep", "30"], working_directory=WORK, timeout=0.2)
    assert expired.value.kill_confirmed is True
    assert expired.value.sandbox_reset is False
    assert expired.value.sandbox_message == errors.SANDBOX_KEPT_MESSAGE
    assert "intact" in expired.value.sandbox_message


def test_a_timeout_whose_kill_is_unknown_says_the_sandbox_must_be_reset():
    router = airlock.SandboxRouter({
        "backends": [dict(TESTING_BACKEND, raises={"type": "Timeout", "message": "hung"})],
        "min_isolation": "container"})
    sandbox = router.acquire(make_key("reset"), airlock.SandboxSpec(kind="k"))
    with pytest.raises(airlock.SandboxTimeout) as expired:
        sandbox.exec("echo one", working_directory=WORK)
    assert expired.value.kill_confirmed is None
    assert expired.value.sandbox_reset is True
    assert expired.value.sandbox_message == errors.SANDBOX_RESET_MESSAGE
    assert "reset" in expired.value.sandbox_message and "gone" in expired.value.sandbox_message


def test_each_stopped_kind_says_what_became_of_the_sandbox():
    with pytest.raises(errors.SandboxQueuedTimeout) as queued:
        _airlock._raise_error("SandboxQueuedTimeout", "queued")
    assert queued.value.sandbox_reset is False, "nothing ran"
    with pytest.raises(errors.SandboxProgramTimeout) as program:
        _airlock._raise_error("SandboxProgramTimeout", "ran out")  # sent to the group
    assert program.value.sandbox_reset is False
    with pytest.raises(errors.SandboxExecOutputLimitExceeded) as overflow:
        _airlock._raise_error("SandboxExecOutputLimitExceeded", "")  # kill confirmed
    assert overflow.value.sandbox_reset is False
    assert overflow.value.sandbox_message == errors.SANDBOX_KEPT_MESSAGE


# ---- on linux ---------------------------------------------------------------------------------


def test_linux_streams_output_to_the_callback_in_order(linux_sandbox):
    seen = []
    started = time.monotonic()
    lock = threading.Lock()

    def collect(stream, data):
        with lock:
            seen.append((stream, data, time.monotonic() - started))

    result = linux_sandbox.exec("echo a; sleep 1; echo b; echo c >&2", working_directory=WORK,
                                timeout=30, on_output=collect)
    assert result.exit_code == 0
    assert b"".join(d for s, d, _ in seen if s == "stdout") == b"a\nb\n"
    assert b"".join(d for s, d, _ in seen if s == "stderr") == b"c\n"
    assert result.stdout_bytes == b""


def test_linux_timeout_proves_its_kill_and_keeps_the_sandbox(linux_sandbox):
    linux_sandbox.write_file("notes.md", "plan", working_directory=WORK)
    with pytest.raises(airlock.SandboxTimeout) as expired:
        linux_sandbox.exec(["sleep", "30"], working_directory=WORK, timeout=1)
    assert expired.value.kill_confirmed is True
    assert expired.value.sandbox_reset is False
    assert linux_sandbox.read_file("notes.md", working_directory=WORK) == b"plan"
