"""The quick start: one sandbox on one backend in one call, through a router of its own.

``airlock.Sandbox.create(min_isolation="container")`` builds the same router a host would build
from ``{"backends": [{"type": "linux"}], "min_isolation": "container"}``, acquires one sandbox
under a key of its own, and hands it back. Nothing is skipped on the way: the router checks
the backend against its floor when it is built (the default floor, microvm, refuses a backend
that declares less, naming both), and the spec at acquire, exactly as for a host's router.
"""

import collections.abc
import uuid

from . import _airlock

QUICKSTART_SCOPE = "quickstart"
QUICKSTART_KIND = "quickstart"
QUICKSTART_IMAGE = "host"


def _backend_entry(backend):
    if backend is None:
        return {"type": "linux"}
    if isinstance(backend, str):
        return {"type": backend}
    if isinstance(backend, collections.abc.Mapping):
        entry = dict(backend)
        if not isinstance(entry.get("type"), str):
            raise TypeError("Sandbox.create: a backend given as a dict needs its \"type\" (a str), "
                            "as in the router's configuration")
        return entry
    raise TypeError("Sandbox.create: backend must be a backend type (str) or one backend's "
                    f"configuration (dict), not {type(backend).__name__}")


def quickstart_router(backend=None, min_isolation=None):
    """The router ``Sandbox.create`` builds: one backend, and the floor given (the router's own
    default floor when None)."""
    config = {"backends": [_backend_entry(backend)]}
    if min_isolation is not None:
        config["min_isolation"] = str(min_isolation)
    return _airlock.SandboxRouter(config)


def quickstart_arguments(backend, min_isolation, router, key, spec, spec_fields):
    """(router, key, spec) for one quick-start sandbox; raises what the router raises."""
    if spec is not None:
        if spec_fields:
            raise TypeError("Sandbox.create: pass either spec= or SandboxSpec fields ("
                            + ", ".join(sorted(spec_fields)) + "), not both")
        if not isinstance(spec, _airlock.SandboxSpec):
            raise TypeError("Sandbox.create: spec must be an airlock.SandboxSpec, not "
                            + type(spec).__name__)
    if router is not None:
        if backend is not None or min_isolation is not None:
            raise TypeError("Sandbox.create: pass either router= or backend=/min_isolation=, "
                            "not both (the router already has its backends and floor)")
        if not isinstance(router, _airlock.SandboxRouter):
            router = getattr(router, "router", router)  # an airlock.aio.AsyncSandboxRouter
    else:
        router = quickstart_router(backend, min_isolation)
    if spec is None:
        fields = dict(spec_fields)
        fields.setdefault("kind", QUICKSTART_KIND)
        if fields.get("image") is None and fields.get("image_id") is None:
            fields["image"] = QUICKSTART_IMAGE
        spec = _airlock.SandboxSpec(**fields)
    if key is None:
        key = _airlock.SandboxKey(QUICKSTART_SCOPE, uuid.uuid4().hex, spec.kind)
    return router, key, spec


def create(backend=None, *, min_isolation=None, router=None, key=None, spec=None,
           **spec_fields):
    """One sandbox, through a router that enforces its isolation floor.

    ``backend``: a backend type ("linux", the default) or one backend's configuration dict
    (``{"type": "linux", "state_dir": ...}``). ``min_isolation``: the router's floor; None keeps
    the router's default (microvm), which refuses linux (container) with
    SandboxBackendNotPermitted — lowering it is the caller's explicit choice. ``router``: use a
    router the host already has instead (then neither of the two above). ``key``: the sandbox's
    key (default: scope "quickstart", a fresh thread id, the spec's kind). ``spec``: a
    SandboxSpec; or, instead, its fields as keywords (default kind "quickstart", image "host";
    a spec's own ``min_isolation``, which can only raise the floor, needs ``spec=``).

    The sandbox keeps its router alive. ``with`` disposes it when the block ends, as does
    ``sandbox.dispose()``; a sandbox left undisposed stays in the backend's durable state."""
    router, key, spec = quickstart_arguments(backend, min_isolation, router, key, spec,
                                             spec_fields)
    return router.acquire(key, spec)
