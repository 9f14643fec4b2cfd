"""Fixtures: a `testing` router (in-process, fast) and a `linux` router (real sandboxes, root).

The testing backend is not part of `import airlock`: importing `airlock.testing` by name
registers it for the session. The linux router keeps its sandboxes in a state directory of its
own, and purges and removes it however the session ends, so a failed test leaves nothing
behind."""

import os
import shutil
import tempfile

import pytest

import airlock
import airlock.testing  # noqa: F401 — registers the "testing" backend type

TESTING_BACKEND = {
    "type": "testing",
    "isolation": "container",
    "capabilities": ["exec", "files_in", "files_out", "files_list", "files_delete"],
    "egress_modes": ["closed"],
    "unemulated_commands": "not_found",
}


@pytest.fixture
def testing_router():
    return airlock.SandboxRouter({"backends": [TESTING_BACKEND], "min_isolation": "container"})


def linux_skip_reason():
    if os.geteuid() != 0:
        return "the linux backend needs root here (CI runs as root)"
    return None


@pytest.fixture(scope="session")
def linux_state_dir():
    reason = linux_skip_reason()
    if reason:
        pytest.skip(f"SKIPPED: {reason}")
    state = tempfile.mkdtemp(prefix="airlock-python-linux-")
    yield state
    shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="session")
def linux_router(linux_state_dir):
    router = airlock.SandboxRouter({
        "backends": [{"type": "linux", "state_dir": linux_state_dir}],
        "min_isolation": "container",
    })
    try:
        yield router
    finally:
        router.purge_all()
        assert router.list_sandboxes() == [], "sandboxes survived the purge"


@pytest.fixture
def linux_sandbox(linux_router, request):
    """A fresh sandbox per test (its own thread id), disposed afterwards."""
    spec = airlock.SandboxSpec(kind="pytest", image="host")
    key = airlock.SandboxKey("pytest", request.node.name, "python")
    sandbox = linux_router.acquire(key, spec)
    try:
        yield sandbox
    finally:
        linux_router.dispose(key)
