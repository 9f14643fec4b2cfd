"""The installed wheel, from outside the tree: run by scripts/test.d/55-python.sh with the
interpreter of a fresh venv the wheel was pip-installed into (`python -I`, so nothing of the tree
or of PYTHONPATH is importable), never collected by pytest.

    wheel_smoke.py VERSION SITE_PACKAGES [LINUX_STATE_DIR]

Checks that `import airlock` is the venv's copy at VERSION, that the testing backend is not in
it, and — given a state directory (root) — the quick start against the real `linux` backend:
refused under the default floor, naming it; with the floor lowered to container, one exec and
one file round trip in the spec's work dir, then disposed, leaving no sandbox in the state.
Prints one line per check; exits non-zero on the first failure."""

import os
import sys


def check(condition, what):
    if not condition:
        print(f"wheel smoke: FAILED: {what}", file=sys.stderr)
        sys.exit(1)
    print(f"wheel smoke: ok: {what}")


def main(version, site_packages, state_dir=None):
    import airlock

    where = os.path.realpath(airlock.__file__)
    check(where.startswith(os.path.realpath(site_packages) + os.sep),
          f"airlock is imported from the venv ({where})")
    check(airlock.__version__ == version,
          f"airlock.__version__ is {version} (got {airlock.__version__!r})")
    check("linux" in airlock.backend_types(), "the linux backend type is registered")
    check("testing" not in airlock.backend_types(), "the installed module has no testing backend")
    try:
        import airlock.testing  # noqa: F401
    except ImportError:
        check(True, "airlock.testing is not installed")
    else:
        check(False, "airlock.testing is not installed")
    check(os.path.isfile(os.path.join(os.path.dirname(where), "py.typed")),
          "the package is marked typed (py.typed)")
    if state_dir is None:
        return

    linux = {"type": "linux", "state_dir": state_dir}
    try:
        airlock.Sandbox.create(linux)
    except airlock.SandboxBackendNotPermitted as refused:
        check("microvm" in str(refused) and "container" in str(refused),
              f"the default floor refuses linux, naming both rungs ({refused})")
    else:
        check(False, "the default floor refuses linux")

    with airlock.Sandbox.create(linux, min_isolation="container") as sandbox:
        result = sandbox.exec(["sh", "-c", "pwd; echo from-the-guest"], timeout=30)
        check(result.exit_code == 0 and result.stdout == f"{sandbox.work_dir}\nfrom-the-guest\n",
              f"one exec in the spec's work dir ({result.stdout!r}, exit {result.exit_code})")
        payload = bytes(range(256)) * 64
        sandbox.write_file("smoke/blob.bin", payload)
        check(sandbox.read_file("smoke/blob.bin") == payload, "a file round trip")
        counted = sandbox.exec(["wc", "-c", "smoke/blob.bin"], timeout=30)
        check(counted.stdout.split()[:1] == [str(len(payload))], "the guest sees the file")
        instance = sandbox.instance_id
    after = airlock.SandboxRouter({"backends": [linux], "min_isolation": "container"})
    left = [record for record in after.list_sandboxes() if record.get("instance_id") == instance]
    check(after.list_sandboxes() == [], f"leaving `with` disposed the sandbox (left: {left})")


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    main(*sys.argv[1:])
