"""Fast checks against the in-process `testing` backend: the router's refusals, the sandbox
surface, host tools with Python bodies, and sandboxed_tool's guarantees."""

import threading

import pytest

import airlock
from airlock import Capability, Egress, Identity, SourceIntegrity

WORK = "/maf-sandbox/work"


def make_key(thread="t1"):
    return airlock.SandboxKey("tenant", thread, "agent")


# ---- the router -------------------------------------------------------------------------------


def test_default_floor_refuses_a_container_backend_at_construction():
    with pytest.raises(airlock.SandboxBackendNotPermitted) as refused:
        airlock.SandboxRouter({"backends": [{"type": "testing", "isolation": "container"}]})
    assert isinstance(refused.value, PermissionError)
    assert refused.value.check == "isolation-floor"


def test_unknown_backend_type_and_key_are_named():
    with pytest.raises(ValueError, match="nosuch"):
        airlock.SandboxRouter({"backends": [{"type": "nosuch"}]})
    with pytest.raises(ValueError, match="colour"):
        airlock.SandboxRouter({"backends": [{"type": "testing"}], "colour": "blue"})


def test_a_rung_off_the_ladder_is_the_routers_refusal_naming_the_backend():
    for rung in ("bogus", "process", 3):
        with pytest.raises(airlock.SandboxBackendNotPermitted) as refused:
            airlock.SandboxRouter({"backends": [{"type": "testing", "name": "odd",
                                                 "isolation": rung}],
                                   "min_isolation": "none"})
        assert isinstance(refused.value, PermissionError)
        assert refused.value.check == "isolation-floor"
        assert "sandbox backend 'odd'" in str(refused.value)
        assert "not a rung of the ladder" in str(refused.value)
    # Only the selected backend is floor-checked: registered beside it, it is only disposed to.
    router = airlock.SandboxRouter({"backends": [
        {"type": "testing", "name": "good", "isolation": "container", "egress_modes": ["closed"]},
        {"type": "testing", "name": "odd", "isolation": "bogus"}], "min_isolation": "container"})
    assert router.ensure_can_serve(airlock.SandboxSpec(kind="k"))["backend"] == "good"
    assert router.describe_backends()[1]["isolation"] == "<not a rung>"


def test_limits_that_are_not_sandbox_limits_are_refused_at_the_limits_check():
    bare = {"max_bytes_per_file": 1024, "max_total_bytes": 4096, "max_files": 4}
    router = airlock.SandboxRouter({"backends": [{
        "type": "testing", "name": "odd", "isolation": "container", "egress_modes": ["closed"],
        "limits": bare}], "min_isolation": "container"})  # construction reads no limits
    with pytest.raises(airlock.SandboxTransferLimitsNotPermitted) as refused:
        router.ensure_can_serve(airlock.SandboxSpec(kind="k"))
    assert isinstance(refused.value, PermissionError)
    assert refused.value.check == "transfer-limits"
    assert "sandbox backend 'odd'" in str(refused.value) and "not a SandboxLimits" in \
        str(refused.value)
    with pytest.raises(airlock.SandboxTransferLimitsNotPermitted):
        router.acquire(make_key(), airlock.SandboxSpec(kind="k"))
    # The checks before it still answer first.
    with pytest.raises(airlock.SandboxCapabilityNotSupported):
        router.ensure_can_serve(airlock.SandboxSpec(kind="k", requires={"exec", "run_code"}))


def test_other_wrong_shapes_of_a_declaration_are_parse_errors_naming_the_field():
    for field, value in (("os_families", "posix"), ("os_families", ["beos"]),
                         ("capabilities", ["exec", "telepathy"]), ("egress_modes", "closed")):
        with pytest.raises(ValueError, match=field):
            airlock.SandboxRouter({"backends": [{"type": "testing", "isolation": "container",
                                                 field: value}],
                                   "min_isolation": "container"})


def test_egress_the_backend_does_not_enforce_is_refused(testing_router):
    spec = airlock.SandboxSpec(kind="k", egress=Egress.ALLOWLIST, egress_allow=["a.example"])
    with pytest.raises(airlock.SandboxEgressNotEnforced) as refused:
        testing_router.acquire(make_key(), spec)
    assert isinstance(refused.value, PermissionError)
    assert refused.value.check == "egress"


def test_missing_capability_is_a_functionality_refusal(testing_router):
    spec = airlock.SandboxSpec(kind="k", requires={Capability.EXEC, Capability.RUN_CODE})
    with pytest.raises(airlock.SandboxCapabilityNotSupported) as refused:
        testing_router.ensure_can_serve(spec)
    assert isinstance(refused.value, RuntimeError)
    assert not isinstance(refused.value, PermissionError)


def test_spec_may_raise_the_floor_but_never_lower_it(testing_router):
    decision = testing_router.ensure_can_serve(airlock.SandboxSpec(kind="k"))
    assert decision["backend"] == "in-process"
    assert decision["backend_isolation"] == "container"
    with pytest.raises(airlock.SandboxBackendNotPermitted):
        testing_router.ensure_can_serve(
            airlock.SandboxSpec(kind="k", min_isolation=airlock.Isolation.MICROVM))
    # Asking for less than the host's floor changes nothing: the host floor still holds.
    lowered = testing_router.ensure_can_serve(
        airlock.SandboxSpec(kind="k", min_isolation=airlock.Isolation.NONE))
    assert lowered["effective_floor"] == "container"


def test_denied_capability_is_a_hard_stop():
    router = airlock.SandboxRouter({
        "backends": [{"type": "testing", "isolation": "container"}],
        "min_isolation": "container", "denied_capabilities": ["files_in"]})
    with pytest.raises(airlock.SandboxCapabilityDenied):
        router.ensure_can_serve(airlock.SandboxSpec(kind="k"))


def test_disabled_router_acquire_is_a_lookup_error():
    router = airlock.SandboxRouter({"backends": []})
    assert not router.enabled
    with pytest.raises(LookupError):
        router.acquire(make_key(), airlock.SandboxSpec(kind="k"))


# ---- the sandbox ------------------------------------------------------------------------------


def test_files_round_trip_bytes_exactly(testing_router):
    sandbox = testing_router.acquire(make_key(), airlock.SandboxSpec(kind="k"))
    payload = bytes(range(256))
    sandbox.write_file("dir/blob.bin", payload, working_directory=WORK)
    assert sandbox.read_file("dir/blob.bin", working_directory=WORK) == payload
    entry = sandbox.stat_file("dir/blob.bin", working_directory=WORK)
    assert entry.kind is airlock.EntryKind.FILE and entry.size_bytes == 256
    assert sandbox.stat_file("absent", working_directory=WORK) is None
    assert [e.path for e in sandbox.list_dir("dir", working_directory=WORK)] == ["dir/blob.bin"]
    sandbox.remove("dir", working_directory=WORK, recursive=True)
    assert sandbox.stat_file("dir", working_directory=WORK) is None


def test_escape_is_a_value_error_never_a_not_found(testing_router):
    sandbox = testing_router.acquire(make_key(), airlock.SandboxSpec(kind="k"))
    with pytest.raises(ValueError) as refused:
        sandbox.read_file("../../etc/passwd", working_directory=WORK)
    assert isinstance(refused.value, airlock.ConfinementError)
    assert not isinstance(refused.value, FileNotFoundError)
    with pytest.raises(FileNotFoundError):
        sandbox.read_file("missing.txt", working_directory=WORK)


def test_read_cap_refuses_rather_than_truncates(testing_router):
    sandbox = testing_router.acquire(make_key(), airlock.SandboxSpec(kind="k"))
    sandbox.write_file("big.txt", "x" * 100, working_directory=WORK)
    with pytest.raises(airlock.SandboxTransferCapExceeded) as refused:
        sandbox.read_file("big.txt", working_directory=WORK, max_bytes=10)
    assert refused.value.limit == 10


def test_bad_arguments_are_refused_before_anything_runs(testing_router):
    sandbox = testing_router.acquire(make_key(), airlock.SandboxSpec(kind="k"))
    with pytest.raises(ValueError, match="timeout"):
        sandbox.exec(["true"], working_directory=WORK, timeout=0)
    with pytest.raises(ValueError, match="timeout"):
        sandbox.exec(["true"], working_directory=WORK, timeout=float("nan"))
    with pytest.raises(TypeError):
        sandbox.exec(["echo", 1], working_directory=WORK)
    with pytest.raises(TypeError):
        sandbox.write_file("x", 12, working_directory=WORK)
    with pytest.raises(TypeError):
        sandbox.read_file("x", WORK)  # working_directory is keyword-only


def test_emulated_exec_runs_argv_and_shell(testing_router):
    sandbox = testing_router.acquire(make_key(), airlock.SandboxSpec(kind="k"))
    sandbox.write_file("note.txt", "hello", working_directory=WORK)
    result = sandbox.exec(["cat", "note.txt"], working_directory=WORK)
    assert (result.exit_code, result.stdout, result.stdout_bytes) == (0, "hello", b"hello")
    shell = sandbox.exec("echo one; exit 3", working_directory=WORK)
    assert shell.exit_code == 3 and shell.stdout == "one\n"


def test_scope_disposes_after_the_block_and_reads_zero_inside(testing_router):
    testing_router.acquire(airlock.SandboxKey("conv", "t", "a"), airlock.SandboxSpec(kind="k"))
    with airlock.scope(testing_router, "conv", "t") as disposal:
        assert disposal.disposed == 0
    assert disposal.disposed == 1


# ---- host tools -------------------------------------------------------------------------------


def test_declarations_have_no_defaults():
    with pytest.raises(TypeError):
        airlock.HostToolDeclaration(source=SourceIntegrity.TRUSTED, sink=None)
    with pytest.raises(TypeError, match="identity"):
        airlock.sandbox_tool(source=None, sink=None)
    with pytest.raises(ValueError):
        airlock.HostToolDeclaration(source="very-trusted", sink=None, identity=None)
    with pytest.raises(TypeError):
        airlock.HostToolDeclaration(source=None, sink=3, identity=None)


def test_python_tool_is_dispatched_with_validated_arguments():
    registry = airlock.HostToolRegistry()

    @airlock.sandbox_tool(source=SourceIntegrity.TRUSTED, sink="internal", identity=Identity.APP)
    def price(sku: str, quantity: int = 1):
        """The price of quantity items."""
        return {"sku": sku, "eur": 2.5 * quantity}

    registry.register(price)
    assert registry.names() == ["price"]
    ok = registry.dispatch("price", {"sku": "x1", "quantity": 2})
    assert ok.ok and ok.value_json == '{"sku": "x1", "eur": 5.0}'  # json.dumps' spelling
    wrong_type = registry.dispatch("price", {"sku": 5})
    assert not wrong_type.ok and "price" in wrong_type.refusal
    unknown = registry.dispatch("nosuch", {})
    assert not unknown.ok and "not a registered host tool" in unknown.refusal


def test_a_raising_tool_becomes_the_fixed_refusal_not_a_crash():
    registry = airlock.HostToolRegistry()

    @airlock.sandbox_tool(source=None, sink=None, identity=None)
    def explode():
        raise RuntimeError("the secret database password is hunter2")

    @airlock.sandbox_tool(source=None, sink=None, identity=None)
    def not_json():
        return object()

    registry.register(explode)
    registry.register(not_json)
    result = registry.dispatch("explode", {})
    assert not result.ok
    assert "failed" in result.refusal and "hunter2" not in result.refusal
    assert not registry.dispatch("not_json", {}).ok


def test_tools_are_dispatched_from_foreign_threads_safely():
    registry = airlock.HostToolRegistry(max_dispatches_per_run=1000)
    seen = []

    @airlock.sandbox_tool(source=None, sink=None, identity=None)
    def record(n: int):
        seen.append(threading.get_ident())
        return n * 2

    registry.register(record)
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(
        registry.dispatch("record", {"n": i}).value_json)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(int(r) for r in results) == [i * 2 for i in range(8)]
    assert len(seen) == 8


def test_registry_refusals_follow_the_seeds():
    strict = airlock.HostToolRegistry(require_declared=True)
    with pytest.raises(airlock.HostToolNotDeclared):
        strict.register(lambda: 1, name="unstamped")
    registry = airlock.HostToolRegistry()

    @airlock.sandbox_tool(source=None, sink=None, identity=Identity.USER)
    def on_behalf():
        return 1

    with pytest.raises(airlock.HostToolIdentityNotAllowed):
        registry.register(on_behalf)
    registry.register(lambda: 1, name="one")
    with pytest.raises(ValueError, match="one"):
        registry.register(lambda: 2, name="one")
    with pytest.raises(ValueError):
        airlock.HostToolRegistry(max_dispatches_per_run=0)
    with pytest.raises(TypeError):
        airlock.HostToolRegistry(max_dispatches_per_run=True)
    aggregate = registry.aggregate()
    assert registry.sealed
    assert aggregate["identities"] == {Identity.APP}
    assert aggregate["has_undeclared"] is True
    assert aggregate["result_integrity"] is SourceIntegrity.UNTRUSTED
    with pytest.raises(ValueError):
        registry.register(lambda: 3, name="late")


# ---- sandboxed_tool ---------------------------------------------------------------------------


class Conversation:
    def __init__(self):
        self.scope = "tenant"
        self.thread = "thread-1"
        self.reads = 0

    def current_scope(self):
        self.reads += 1
        return self.scope

    def current_thread_id(self):
        return self.thread

    def context(self):
        return airlock.CallerContext(self.current_scope, self.current_thread_id)


def test_key_is_read_from_host_callables_on_every_call(testing_router):
    conversation = Conversation()
    keys = []

    def body(call, arguments):
        key = call.key()
        keys.append(key)
        return "ok"

    tool = airlock.sandboxed_tool(testing_router, airlock.SandboxSpec(kind="k"), body,
                                  context=conversation.context(), name="t", description="d")
    assert tool() == "ok"
    conversation.thread = "thread-2"
    assert tool.invoke({}) == "ok"
    assert [k.thread_id for k in keys] == ["thread-1", "thread-2"]
    conversation.thread = None
    refusal = []
    tool2 = airlock.sandboxed_tool(
        testing_router, airlock.SandboxSpec(kind="k"),
        lambda call, arguments: refusal.append(call.key()) or "ran",
        context=conversation.context(), name="t2", description="d")
    tool2.invoke({})
    assert isinstance(refusal[0], str) and "no active thread" in refusal[0]


def test_call_path_is_reclaimed_and_the_call_handle_dies_with_the_call(testing_router):
    conversation = Conversation()
    kept = {}

    def body(call, arguments):
        sandbox = call.acquire(call.key())
        path = call.guest_call_path()
        sandbox.write_file(path + "/scratch.txt", "left behind?", working_directory=WORK)
        kept["sandbox"], kept["path"], kept["call"] = sandbox, path, call
        return "wrote"

    tool = airlock.sandboxed_tool(testing_router, airlock.SandboxSpec(kind="k"), body,
                                  context=conversation.context(), name="writer",
                                  description="d")
    assert tool.invoke({}) == "wrote"
    assert kept["path"].startswith(WORK + "/")
    assert kept["sandbox"].stat_file(kept["path"], working_directory=WORK) is None
    with pytest.raises(RuntimeError, match="ended"):
        kept["call"].guest_call_path()


def test_a_raising_body_propagates_to_the_host_unchanged(testing_router):
    # The reference propagates a body's exception (test_binding_lifecycle.py has the rest).
    def body(call, arguments):
        raise KeyError("internal endpoint https://10.0.0.1/tenant-42")

    tool = airlock.sandboxed_tool(testing_router, airlock.SandboxSpec(kind="k"), body,
                                  context=Conversation().context(), name="t", description="d")
    with pytest.raises(KeyError, match="10.0.0.1"):
        tool.invoke({})


def test_attach_gate(testing_router):
    body = lambda call, arguments: ""  # noqa: E731
    context = Conversation().context()
    assert airlock.sandboxed_tool(airlock.SandboxRouter({"backends": []}),
                                  airlock.SandboxSpec(kind="k"), body, context=context,
                                  name="t", description="d") is None
    landing = airlock.SandboxSpec(kind="k", requires={"exec", "files_in", "files_out"},
                                  declared_outputs=[airlock.DeclaredOutput("a.txt")])
    with pytest.raises(airlock.SandboxOutputSinkRequired):
        airlock.sandboxed_tool(testing_router, landing, body, context=context, name="t",
                               description="d")
    with pytest.raises(airlock.SandboxEgressNotEnforced):
        airlock.sandboxed_tool(
            testing_router,
            airlock.SandboxSpec(kind="k", egress="allowlist", egress_allow=["x.example"]),
            body, context=context, name="t", description="d")
    with pytest.raises(ValueError, match="reclaim_timeout"):
        airlock.sandboxed_tool(testing_router, airlock.SandboxSpec(kind="k"), body,
                               context=context, name="t", description="d", reclaim_timeout=0)


def test_information_flow_declarations_are_data(testing_router):
    body = lambda call, arguments: ""  # noqa: E731
    tool = airlock.sandboxed_tool(testing_router, airlock.SandboxSpec(kind="k"), body,
                                  context=Conversation().context(), name="t", description="d",
                                  source_integrity="untrusted",
                                  outbound_max_confidentiality="public", also_carries_out=True)
    declarations = tool.declarations()
    assert declarations["source_integrity"] == "untrusted"
    assert declarations["max_allowed_confidentiality"] == "public"
    quiet = airlock.sandboxed_tool(testing_router, airlock.SandboxSpec(kind="k"), body,
                                   context=Conversation().context(), name="t", description="d",
                                   outbound_max_confidentiality="public")
    # Nothing can leave a closed spec without a sink: no cap is declared for it.
    assert "max_allowed_confidentiality" not in quiet.declarations()


# ---- outputs ----------------------------------------------------------------------------------


def test_collect_outputs_through_a_python_sink(testing_router):
    spec = airlock.SandboxSpec(kind="k", requires={"exec", "files_in", "files_out"},
                               declared_outputs=[airlock.DeclaredOutput("out/a.txt"),
                                                 airlock.DeclaredOutput("b.txt", required=False)])
    sandbox = testing_router.acquire(make_key("outputs"), spec)
    sandbox.write_file("out/a.txt", b"artifact", working_directory=WORK)
    delivered = []

    def deliver(artifact):
        delivered.append((artifact.name, artifact.content, artifact.kind))
        return airlock.LandedArtifact(artifact.name, f"{artifact.name} landed")

    landed = airlock.collect_outputs(sandbox, spec, airlock.OutputSink(deliver))
    assert [a.display for a in landed] == ["out/a.txt landed"]
    assert delivered == [("out/a.txt", b"artifact", "k")]
    with pytest.raises(airlock.SandboxOutputSinkRequired):
        airlock.collect_outputs(sandbox, spec)


def test_a_python_sink_refusal_propagates_unchanged(testing_router):
    spec = airlock.SandboxSpec(kind="k", requires={"exec", "files_in", "files_out"},
                               declared_outputs=[airlock.DeclaredOutput("a.txt")])
    sandbox = testing_router.acquire(make_key("sink-refusal"), spec)
    sandbox.write_file("a.txt", b"x", working_directory=WORK)

    class QuotaExceeded(Exception):
        pass

    def deliver(artifact):
        raise QuotaExceeded(artifact.name)

    with pytest.raises(QuotaExceeded, match="a.txt"):
        airlock.collect_outputs(sandbox, spec, airlock.OutputSink(deliver))

    def wrong_type(artifact):
        return "landed"

    with pytest.raises(TypeError, match="LandedArtifact"):
        airlock.collect_outputs(sandbox, spec, airlock.OutputSink(wrong_type))
