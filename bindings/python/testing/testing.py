"""The in-process ``testing`` backend, for tests of hosts and kinds — never for production.

    import airlock
    import airlock.testing  # registers the "testing" backend type in this process

    router = airlock.SandboxRouter({
        "backends": [{"type": "testing", "isolation": "container",
                      "capabilities": ["exec", "files_in", "files_out"],
                      "egress_modes": ["closed"]}],
        "min_isolation": "container"})

The backend is a policy fixture: every declaration can be overridden (``name``, ``isolation``,
``egress_modes``, ``capabilities``, ``os_families``, ``limits``), and its sandboxes keep a
filesystem in memory with an emulated POSIX shell over it. It draws no boundary at all, so
whatever rung it is configured to declare, nothing enforces it. An ``isolation`` that is not a
rung, or ``limits`` that are not a SandboxLimits, are kept as declared and refused by the router
when it checks the backend (``SandboxBackendNotPermitted`` when the router selects it,
``SandboxTransferLimitsNotPermitted`` when a spec is checked against it), as for a backend that
declared them in code.

Faults a host's tests can script, to drive their own failure paths — in the backend's
configuration, or at run time on what the backend hands out:

    config field          at run time                         what it does
    outputs               sandbox.script_output(marker, …)    answer commands containing marker
    default_stdout        sandbox.set_default_stdout(text)    what an unanswered command prints
    raises                sandbox.raise_on_exec(error, msg)   exec / run_code raise that error
    stat_sizes            sandbox.misreport_size(path, size)  stat/list report a wrong size or
                                                              none (None)
    hanging_reads         sandbox.hang_reads(path, bound)     a read hangs until release_reads()
      read_hang_seconds                                       or `bound` (then TimeoutError)
    seed_files            sandbox.seed(path, content)         files, dirs, links, other entries
    acquire_error         backend.set_acquire_error(…)        acquire raises that error
    dispose_fails         backend.set_dispose_fails()         disposals remove nothing and say so
    purge_count           backend.set_purge_count(n)          what dispose_scope reports
    shared_sandbox                                            one sandbox for every key and kind
    snapshot_content      backend.set_snapshot_content(c)     what its snapshots are declared to
                                                              hold ("filesystem", …, None)
    snapshot_seconds      backend.set_snapshot_seconds(s)     how long a snapshot takes, the
                                                              sandbox frozen meanwhile
    emulate_commands, unemulated_commands                     how unscripted commands answer

An error is named by its airlock type ("Timeout", "BackendError", …) or given as a class of
:mod:`airlock.errors`. Every sandbox the backend hands out is an :class:`InProcessSandbox`
(``sandbox.commands`` — (command, working_directory, timeout) in order — ``programs``,
``contents(path)``, ``kind_of(path)``); :func:`backend_of` reaches the backend itself (``keys``,
``specs``, ``disposed``, ``disposed_kinds``, ``disposed_instances``, ``purged``, ``sandboxes``,
``resumed_snapshots``, ``deleted_snapshots``).

Snapshots: with one sandbox per key (the default; not ``shared_sandbox``) the backend takes
them, whatever it declares — a copy of the sandbox's files, kept in the backend's memory and
labelled with the conversation of the key. Declare them for the router with ``"capabilities":
[..., "snapshot"]`` and ``"snapshot_content": "filesystem"``. A snapshot is refused
(BackendError) while one of the sandbox's commands runs, and a command while a snapshot is taken:
``router.snapshot`` is the exclusive call that keeps them apart. ``dispose_scope`` and
``purge_all`` take a conversation's (every) snapshot.

That is why it is not part of ``import airlock``: it lives in its own extension,
``airlock._airlock_testing``, loaded only by importing this module by name. It is built in a build
tree with the tests (``AIRLOCK_BUILD_TESTS``) and never installed; without it, a router naming
``"testing"`` is refused as a backend this airlock does not have.
"""

from . import _airlock, _airlock_testing

BACKEND_TYPE = _airlock_testing.BACKEND_TYPE
InProcessSandbox = _airlock_testing.InProcessSandbox
InProcessSandboxBackend = _airlock_testing.InProcessSandboxBackend
backend_of = _airlock_testing.backend_of

if BACKEND_TYPE not in _airlock.backend_types():
    raise ImportError(
        "airlock._airlock_testing loaded but the 'testing' backend type is not registered: "
        "the extension and airlock._airlock do not share one libairlock")
