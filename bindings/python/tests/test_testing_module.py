"""`import airlock` carries no testing backend: the in-process fake is reached only through
`import airlock.testing`, by name. Each check runs in a fresh interpreter, since this session
has imported airlock.testing (conftest)."""

import subprocess
import sys

REFUSED = ("no backend named 'testing' is built into this airlock; "
           "the registered backends are: ")


def run_python(source):
    return subprocess.run([sys.executable, "-c", source], capture_output=True, text=True,
                          timeout=120, check=False)


def test_import_airlock_alone_has_no_testing_backend():
    ran = run_python("""
import sys
import airlock
assert "testing" not in airlock.backend_types(), airlock.backend_types()
assert "airlock.testing" not in sys.modules and "airlock._airlock_testing" not in sys.modules
try:
    airlock.SandboxRouter({"backends": [{"type": "testing", "isolation": "container"}],
                           "min_isolation": "container"})
except ValueError as refused:
    print(refused)
else:
    raise SystemExit("a router over the testing backend was built without airlock.testing")
""")
    assert ran.returncode == 0, ran.stderr
    message = ran.stdout.strip()
    assert REFUSED in message, message
    listed = message.split(REFUSED, 1)[1].split(", ")
    assert listed == sorted(listed) and "testing" not in listed, listed


def test_importing_airlock_testing_by_name_registers_it():
    ran = run_python("""
import airlock
import airlock.testing
assert airlock.testing.BACKEND_TYPE in airlock.backend_types()
router = airlock.SandboxRouter({"backends": [{"type": "testing", "isolation": "container"}],
                                "min_isolation": "container"})
print(router.ensure_can_serve(airlock.SandboxSpec(kind="k"))["backend"])
""")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "in-process"
