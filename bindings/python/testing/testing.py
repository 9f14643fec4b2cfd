"""The in-process ``testing`` backend, for tests of hosts and kinds — never for production.

    import airlock
    import airlock.testing  # registers the "testing" backend type in this process

    router = airlock.SandboxRouter({
        "backends": [{"type": "testing", "isolation": "container",
                      "capabilities": ["exec", "files_in", "files_out"],
                      "egress_modes": ["closed"]}],
        "min_isolation": "container"})

The backend is a policy fixture: every declaration can be overridden (``name``, ``isolation``,
``egress_modes``, ``capabilities``, ``os_families``, ``limits``, ``unemulated_commands``), and its
sandboxes keep a filesystem in memory with an emulated POSIX shell over it. It draws no boundary
at all, so whatever rung it is configured to declare, nothing enforces it.

That is why it is not part of ``import airlock``: it lives in its own extension,
``airlock._airlock_testing``, loaded only by importing this module by name. It is built in a build
tree with the tests (``AIRLOCK_BUILD_TESTS``) and never installed; without it, a router naming
``"testing"`` is refused as a backend this airlock does not have.
"""

from . import _airlock, _airlock_testing

BACKEND_TYPE = _airlock_testing.BACKEND_TYPE

if BACKEND_TYPE not in _airlock.backend_types():
    raise ImportError(
        "airlock._airlock_testing loaded but the 'testing' backend type is not registered: "
        "the extension and airlock._airlock do not share one libairlock")
