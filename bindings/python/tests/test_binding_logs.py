"""The library's log lines go to stderr: a host's stdout is its own.

Run in a child interpreter, so that nothing pytest does to the process's streams can hide where
the library writes by default."""

import os
import subprocess
import sys
import textwrap

import airlock

# A host that prints nothing itself, and whose tool's call path cannot be reclaimed: the library
# logs a warning about it.
HOST = textwrap.dedent("""
    import airlock
    import airlock.testing

    WORK = "/maf-sandbox/work"
    router = airlock.SandboxRouter({
        "backends": [{"type": "testing", "isolation": "container",
                      "capabilities": ["exec", "files_in", "files_out"],
                      "egress_modes": ["closed"]}],
        "min_isolation": "container"})

    def body(call, arguments):
        sandbox = call.acquire(call.key())
        sandbox.write_file(call.guest_call_path() + "/left.txt", "x", working_directory=WORK)
        sandbox.exec(["chmod", "555", WORK], working_directory="/")
        return "done"

    tool = airlock.sandboxed_tool(
        router, airlock.SandboxSpec(kind="k"), body, name="logged", description="d",
        context=airlock.CallerContext(lambda: "tenant", lambda: "thread-1"))
    assert tool.invoke({}) == "done"
""")


def run_host(source):
    environment = dict(os.environ)
    package = os.path.dirname(os.path.dirname(airlock.__file__))
    environment["PYTHONPATH"] = package + os.pathsep + environment.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", source], capture_output=True, text=True,
                          env=environment, timeout=60)


def test_a_library_warning_goes_to_stderr_and_never_to_the_hosts_stdout():
    ran = run_host(HOST)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "", f"the library wrote to the host's stdout: {ran.stdout!r}"
    assert "was not reclaimed" in ran.stderr
    assert "[warning]" in ran.stderr
