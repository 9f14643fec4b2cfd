"""Faults of the `testing` backend driving the router's lifecycle and the tool paths: an acquire
that fails, disposals that fail, an exec that raises or answers from a script — and the logs a
host's test reads to see what happened."""

import shlex
import time

import pytest

import airlock
import airlock.testing

WORK = "/maf-sandbox/work"
BACKEND = {"type": "testing", "isolation": "container", "egress_modes": ["closed"],
           "capabilities": ["exec", "files_in", "files_out", "files_delete"],
           "unemulated_commands": "not_found"}


def router_over(*backends):
    return airlock.SandboxRouter({"backends": [dict(BACKEND, **b) for b in backends],
                                  "min_isolation": "container"})


class Conversation:
    def __init__(self, thread="thread-1"):
        self.thread = thread

    def context(self):
        return airlock.CallerContext(lambda: "tenant", lambda: self.thread)


KEY = airlock.SandboxKey("tenant", "thread-1", "agent")


def eventually(condition, seconds=10):
    """A condemned instance's delete runs after the call answers, off its thread: wait for it
    (bounded)."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


# ---- acquire ----------------------------------------------------------------------------------


def test_an_acquire_error_reaches_the_host_as_that_error_and_records_nothing():
    router = router_over({})
    backend = airlock.testing.backend_of(router)
    backend.set_acquire_error(airlock.errors.BackendError, "the provider is over quota")
    with pytest.raises(airlock.BackendError, match="over quota"):
        router.acquire(KEY, airlock.SandboxSpec(kind="k"))
    assert backend.keys == [] and backend.specs == []
    backend.set_acquire_error(None)
    router.acquire(KEY, airlock.SandboxSpec(kind="k"))
    assert [k.thread_id for k in backend.keys] == ["thread-1"]
    assert [s.kind for s in backend.specs] == ["k"]


def test_an_acquire_error_in_a_tool_call_is_the_fixed_sentence_not_the_detail():
    router = router_over({"acquire_error": {"type": "BackendError",
                                            "message": "endpoint https://10.0.0.1/x"}})
    seen = []

    def body(call, arguments):
        seen.append(call.acquire(call.key()))
        return "unreachable" if isinstance(seen[-1], str) else "acquired"

    tool = airlock.sandboxed_tool(router, airlock.SandboxSpec(kind="k"), body,
                                  context=Conversation().context(), name="t", description="d")
    assert tool.invoke({}) == "unreachable"
    assert seen[0] == "Error: sandbox unavailable — degrading to T0 (LLM self-check only)"
    no_backend = router_over({"acquire_error": {"type": "NoSandboxBackend"}})
    tool = airlock.sandboxed_tool(no_backend, airlock.SandboxSpec(kind="k"), body,
                                  context=Conversation().context(), name="t", description="d")
    tool.invoke({})
    assert seen[1] == "Error: no sandbox backend is configured — degrading to T0"


# ---- disposal ---------------------------------------------------------------------------------


def test_a_failing_disposal_leaves_the_sandbox_and_the_router_goes_on_to_the_next_backend():
    router = router_over({"name": "failing", "dispose_fails": True},
                         {"name": "other", "purge_count": 2})
    failing = airlock.testing.backend_of(router)
    other = airlock.testing.backend_of(router, "other")
    assert failing.name == "failing"
    sandbox = router.acquire(KEY, airlock.SandboxSpec(kind="k"))

    # What a host sees: dispose never raises, dispose_kind says the instance is not gone,
    # dispose_scope counts only what went — and every backend was asked, the failing one first.
    router.dispose(KEY)
    assert router.dispose_kind(KEY, "k", sandbox.instance_id) is False
    assert router.dispose_scope("tenant", "thread-1") == 2
    assert [k.thread_id for k in failing.disposed] == ["thread-1"]
    assert [k.thread_id for k in other.disposed] == ["thread-1"]
    assert [(k.thread_id, kind) for k, kind in failing.disposed_kinds] == [("thread-1", "k")]
    assert failing.purged == [("tenant", "thread-1")] and other.purged == [("tenant", "thread-1")]
    # The sandbox survived, warm: the next acquire reaches the same instance.
    assert [s.instance_id for s in failing.sandboxes] == [sandbox.instance_id]
    assert router.acquire(KEY, airlock.SandboxSpec(kind="k")).instance_id == sandbox.instance_id

    failing.set_dispose_fails(False)
    assert router.dispose_kind(KEY, "k", sandbox.instance_id) is True
    assert failing.sandboxes == []
    assert router.acquire(KEY, airlock.SandboxSpec(kind="k")).instance_id != sandbox.instance_id


def test_a_condemned_call_whose_delete_fails_is_logged_and_the_call_still_answers(capfd):
    router = router_over({"dispose_fails": True})
    backend = airlock.testing.backend_of(router)

    def body(call, arguments):
        sandbox = call.acquire(call.key())
        call.condemn()
        return "condemned " + sandbox.instance_id

    tool = airlock.sandboxed_tool(router, airlock.SandboxSpec(kind="k"), body,
                                  context=Conversation().context(), name="t", description="d")
    answer = tool.invoke({})
    instance = answer.removeprefix("condemned ")
    assert eventually(lambda: backend.disposed_kinds), "the delete was never tried"
    assert [kind for _, kind in backend.disposed_kinds] == ["k"]
    assert [s.instance_id for s in backend.sandboxes] == [instance]
    said = []  # the log line is written just after the delete returns (airlock logs to stdout)
    assert eventually(lambda: said.append("".join(capfd.readouterr())) or "did not land" in
                      "".join(said))
    assert f"the delete of condemned sandbox instance {instance} did not land" in "".join(said)


def test_scope_reports_what_a_failing_backend_could_not_dispose():
    router = router_over({"dispose_fails": True})
    router.acquire(airlock.SandboxKey("conv", "t", "a"), airlock.SandboxSpec(kind="k"))
    with airlock.scope(router, "conv", "t") as disposal:
        pass
    assert disposal.disposed == 0
    airlock.testing.backend_of(router).set_dispose_fails(False)
    with airlock.scope(router, "conv", "t") as disposal:
        pass
    assert disposal.disposed == 1


# ---- exec: raised errors and scripted answers -------------------------------------------------


def test_codeact_reads_a_scripted_answer_and_the_sandbox_logs_the_command():
    router = router_over({"outputs": {"python3": {"stdout": "42\n"}}})
    tool = airlock.make_codeact_tool(router, context=Conversation().context(), exec_timeout=45)
    text = tool.invoke({"code": "print(6 * 7)"})
    assert "42" in text, text
    backend = airlock.testing.backend_of(router)
    assert [s.kind for s in backend.specs] == ["codeact"]
    (sandbox,) = backend.sandboxes
    assert isinstance(sandbox, airlock.testing.InProcessSandbox)
    argv, working_directory, timeout = next((shlex.split(c[0]), c[1], c[2])
                                            for c in sandbox.commands if "python3" in c[0])
    assert timeout == 45.0
    assert argv[0] == "python3" and len(argv) == 2
    assert argv[1].startswith(working_directory + "/") and argv[1].endswith(".py")
    # The call's guest path was reclaimed afterwards, with a command of its own.
    assert any(shlex.split(c[0])[:2] == ["rm", "-rf"] for c in sandbox.commands)


def test_codeact_answers_a_timeout_the_guest_raised_and_condemns_the_sandbox():
    router = router_over({"raises": {"type": "Timeout", "message": "the guest stopped answering"}})
    failures = []
    tool = airlock.make_codeact_tool(router, context=Conversation().context(), exec_timeout=30,
                                     on_reclaim_failure=failures.append)
    text = tool.invoke({"code": "while True: pass"})
    # The model is told the sandbox was reset and what that cost.
    assert text.startswith("Error: the program timed out after 30s. The sandbox was reset"), text
    assert "every file written earlier in this conversation is gone" in text, text
    backend = airlock.testing.backend_of(router)
    # A timeout whose kill was not confirmed condemns the instance: it is deleted once the
    # call is over.
    assert eventually(lambda: backend.disposed_instances)
    assert [kind for _, kind in backend.disposed_kinds] == ["codeact"]
    assert backend.sandboxes == []
    # The call path could not be reclaimed either (its removal raised too): the host was told.
    assert [f.reason for f in failures] == ["the removal call failed: Timeout: the guest "
                                            "stopped answering"]


def test_an_exec_error_scripted_on_a_handed_out_sandbox_is_what_the_caller_meets():
    router = router_over({})
    sandbox = router.acquire(KEY, airlock.SandboxSpec(kind="k"))
    sandbox.raise_on_exec("NotFound", "no such interpreter")
    with pytest.raises(FileNotFoundError, match="no such interpreter"):
        sandbox.exec(["true"], working_directory=WORK, timeout=5)
    sandbox.raise_on_exec(None)
    sandbox.script_output("deploy", stdout="ok", stderr="warned", exit_code=3)
    answered = sandbox.exec("deploy --all", working_directory=WORK, timeout=5)
    assert (answered.stdout, answered.stderr, answered.exit_code) == ("ok", "warned", 3)
    sandbox.set_default_stdout("unscripted")
    assert sandbox.run_code("print(1)", timeout=2).stdout == "unscripted"
    assert sandbox.programs == [("print(1)", 2.0)]
    # Recorded in order, raising or not: (command line, working directory, timeout in seconds).
    # (An argv is recorded POSIX-quoted; a shell line as given.)
    assert sandbox.commands == [("'true'", WORK, 5.0), ("deploy --all", WORK, 5.0)]
    with pytest.raises(ValueError, match="not an airlock error type"):
        sandbox.raise_on_exec("KeyboardInterrupt")
    with pytest.raises(TypeError):
        sandbox.raise_on_exec(42)


def test_backend_of_names_what_it_cannot_find():
    router = router_over({"name": "only"})
    with pytest.raises(ValueError, match="no backend named 'absent'.*only"):
        airlock.testing.backend_of(router, "absent")
    with pytest.raises(ValueError, match="no selected backend"):
        airlock.testing.backend_of(airlock.SandboxRouter({"backends": []}))
