"""Against real `linux` sandboxes (root, image "host"): exec, files, confinement, timeouts,
host tools called from a guest program, codeact end to end, outputs, conformance."""

import os
import pathlib

import pytest

import airlock
from airlock import Identity, SourceIntegrity

WORK = "/maf-sandbox/work"


def test_argv_reaches_the_program_unparsed(linux_sandbox):
    result = linux_sandbox.exec(["printf", "%s|", "a b", "$HOME", "'q'", ";rm -rf /"],
                                working_directory=WORK, timeout=30)
    assert result.exit_code == 0
    assert result.stdout == "a b|$HOME|'q'|;rm -rf /|"


def test_shell_line_and_exit_code_and_bytes(linux_sandbox):
    result = linux_sandbox.exec("printf '\\377ok'; echo err >&2; exit 7",
                                working_directory=WORK, timeout=30)
    assert result.exit_code == 7
    assert result.stdout_bytes == b"\xffok"
    assert result.stdout == "\ufffdok"
    assert result.stderr == "err\n"


def test_files_round_trip_and_guest_sees_them(linux_sandbox):
    payload = os.urandom(64 * 1024)
    linux_sandbox.write_file("deep/dir/blob.bin", payload, working_directory=WORK)
    assert linux_sandbox.read_file("deep/dir/blob.bin", working_directory=WORK) == payload
    listed = linux_sandbox.exec(["wc", "-c", "deep/dir/blob.bin"], working_directory=WORK,
                                timeout=30)
    assert listed.stdout.split()[0] == str(len(payload))


def test_cannot_read_through_a_planted_link(linux_sandbox):
    planted = linux_sandbox.exec(["ln", "-s", "/etc", "escape"], working_directory=WORK,
                                 timeout=30)
    assert planted.exit_code == 0, planted.stderr
    with pytest.raises(ValueError) as refused:
        linux_sandbox.read_file("escape/hostname", working_directory=WORK)
    assert isinstance(refused.value, airlock.ConfinementError)
    with pytest.raises(ValueError):
        linux_sandbox.write_file("escape/planted", b"x", working_directory=WORK)
    with pytest.raises(ValueError):
        linux_sandbox.read_file("../../../etc/hostname", working_directory=WORK)
    entry = linux_sandbox.stat_file("escape", working_directory=WORK)
    assert entry.kind is airlock.EntryKind.SYMLINK and entry.size_bytes is None


def test_timeout_is_a_timeout_error_and_kills_the_command(linux_sandbox):
    with pytest.raises(TimeoutError) as expired:
        linux_sandbox.exec(["sleep", "30"], working_directory=WORK, timeout=1)
    assert isinstance(expired.value, airlock.SandboxTimeout)
    assert not isinstance(expired.value, airlock.SandboxQueuedTimeout)
    survivors = linux_sandbox.exec("ps -eo comm | grep -c '^sleep$' || true",
                                   working_directory=WORK, timeout=30)
    assert survivors.stdout.strip() == "0"


def test_output_flood_is_refused_not_buffered(linux_sandbox):
    with pytest.raises(airlock.SandboxExecOutputLimitExceeded) as refused:
        linux_sandbox.exec_bounded("yes flood | head -c 10000000", working_directory=WORK,
                                   timeout=30, max_output_bytes=4096)
    assert refused.value.limit == 4096
    assert not isinstance(refused.value, TimeoutError)


def test_run_code_runs_python_in_the_guest(linux_sandbox):
    result = linux_sandbox.run_code("import os\nprint(6 * 7, os.getcwd())", timeout=30)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == f"42 {WORK}\n"


def test_warm_acquire_returns_the_same_instance(linux_router):
    key = airlock.SandboxKey("pytest", "warm", "python")
    spec = airlock.SandboxSpec(kind="pytest", image="host")
    try:
        first = linux_router.acquire(key, spec)
        second = linux_router.acquire(key, spec)
        assert first.instance_id == second.instance_id
        assert linux_router.dispose_scope("pytest", "warm") == 1
        third = linux_router.acquire(key, spec)
        assert third.instance_id != first.instance_id
    finally:
        linux_router.dispose(key)


# ---- outputs ----------------------------------------------------------------------------------


def test_collect_outputs_lands_on_the_host_and_refuses_a_planted_link(linux_router, tmp_path):
    spec = airlock.SandboxSpec(kind="outputs", image="host",
                               requires={"exec", "files_in", "files_out"},
                               declared_outputs=[airlock.DeclaredOutput("report.txt"),
                                                 airlock.DeclaredOutput("data/table.csv")])
    key = airlock.SandboxKey("pytest", "outputs", "python")
    try:
        sandbox = linux_router.acquire(key, spec)
        done = sandbox.exec("echo report > report.txt && mkdir -p data && echo a,b > "
                            "data/table.csv", working_directory=WORK, timeout=30)
        assert done.exit_code == 0, done.stderr
        root = tmp_path / "landing"
        root.mkdir()
        landed = airlock.collect_outputs(sandbox, spec, airlock.make_file_system_sink(str(root)))
        assert [a.name for a in landed] == ["report.txt", "data/table.csv"]
        assert (root / "data" / "table.csv").read_text() == "a,b\n"

        # A link planted in the landing tree carries nothing out.
        outside = tmp_path / "outside"
        outside.mkdir()
        hostile = tmp_path / "hostile"
        hostile.mkdir()
        (hostile / "data").symlink_to(outside)
        with pytest.raises(airlock.SandboxLandingNotConfined):
            airlock.collect_outputs(sandbox, spec, airlock.make_file_system_sink(str(hostile)))
        assert list(outside.iterdir()) == []
    finally:
        linux_router.dispose(key)


# ---- host tools and codeact -------------------------------------------------------------------


class Conversation:
    def __init__(self, thread):
        self.thread = thread

    def context(self):
        return airlock.CallerContext(lambda: "pytest", lambda: self.thread)


def make_price_registry(calls):
    registry = airlock.HostToolRegistry()

    @airlock.sandbox_tool(source=SourceIntegrity.TRUSTED, sink=None, identity=Identity.APP)
    def price(sku: str):
        calls.append(sku)
        return {"sku": sku, "eur": 4.5}

    @airlock.sandbox_tool(source=None, sink=None, identity=None)
    def broken():
        raise RuntimeError("host-side secret")

    registry.register(price)
    registry.register(broken)
    return registry


GUEST_PROGRAM = (
    "import airlock_host_tools as tools\n"
    "print(tools.price(sku='x1')['eur'])\n"
    "try:\n"
    "    tools.broken()\n"
    "except tools.HostToolError as error:\n"
    "    print('refused; secret leaked:', 'secret' in str(error))\n")


@pytest.mark.parametrize("channel", ["auto", "files"])
def test_guest_program_calls_a_python_host_tool(linux_sandbox, channel):
    # The tool's body runs on the transport's thread, which takes the GIL to call it.
    calls = []
    registry = make_price_registry(calls)
    ran = airlock.run_program_with_host_tools(
        linux_sandbox, registry, GUEST_PROGRAM, run_directory=WORK + "/run-" + channel,
        timeout=60, channel=None if channel == "auto" else channel)
    result = ran["result"]
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "4.5\nrefused; secret leaked: False\n"
    assert ran["channel"] == ("files" if channel == "files" else ran["channel"])
    assert ran["channel"] in ("socket", "files")
    assert ran["dispatched"] == 2
    assert calls == ["x1"]
    # The run's traffic is gone from the warm sandbox.
    assert linux_sandbox.stat_file("run-" + channel, working_directory=WORK) is None


def test_forcing_a_socket_channel_the_sandbox_lacks_is_not_supported(testing_router):
    # The in-process testing sandbox offers no socket channel; the linux one does.
    spec = airlock.SandboxSpec(kind="no-socket")
    sandbox = testing_router.acquire(airlock.SandboxKey("pytest", "no-socket", "python"), spec)
    assert sandbox.socket_channel() is None
    with pytest.raises(NotImplementedError):
        airlock.run_program_with_host_tools(sandbox, make_price_registry([]), "print(1)",
                                            run_directory=WORK + "/run-socket", channel="socket")


def test_the_linux_sandbox_offers_a_socket_channel(linux_sandbox):
    assert linux_sandbox.socket_channel() is not None


def test_codeact_with_host_tools_is_refused_where_the_backend_does_not_declare_them(
        testing_router):
    assert "host_tools" not in testing_router.describe_backends()[0]["capabilities"]
    with pytest.raises(airlock.SandboxCapabilityNotSupported, match="host_tools"):
        airlock.make_codeact_tool(testing_router, context=Conversation("x").context(),
                                  image="host", host_tools=make_price_registry([]))


def test_codeact_with_host_tools_attaches_on_linux_which_declares_them(linux_router):
    assert "host_tools" in linux_router.describe_backends()[0]["capabilities"]
    tool = airlock.make_codeact_tool(linux_router, context=Conversation("x").context(),
                                     image="host", host_tools=make_price_registry([]))
    assert tool is not None and "host_tools" in {str(c) for c in tool.spec.requires}


def test_codeact_end_to_end_with_declared_outputs(linux_router, tmp_path):
    conversation = Conversation("codeact")
    sink = airlock.make_file_system_sink(str(tmp_path))
    tool = airlock.make_codeact_tool(linux_router, context=conversation.context(), image="host",
                                     outputs="declared", output_sink=sink, exec_timeout=60)
    try:
        assert tool.name == "execute_code"
        assert "max_allowed_confidentiality" not in tool.declarations()
        text = tool.invoke({"code": "open('chart.txt', 'w').write('up and to the right')\n"
                                    "print('written')",
                            "outputs": ["chart.txt"]})
        assert "written" in text, text
        assert (tmp_path / "chart.txt").read_text() == "up and to the right"
        assert str(tmp_path) not in text  # the host path is never shown to the model
        outside = tmp_path.parent / "escaped.txt"
        escape = tool.invoke({"code": "open('../../../../../../' + %r, 'w').write('x')"
                                      % str(outside), "outputs": []})
        assert not outside.exists(), escape
        failing = tool.invoke({"code": "raise SystemExit(3)"})
        assert "3" in failing
        conversation.thread = None
        assert "no active thread" in tool.invoke({"code": "print(1)"})
    finally:
        linux_router.dispose_scope("pytest", "codeact")


class Store:
    def __init__(self, files):
        self.files = files
        self.reads = []

    def list(self):
        return sorted(self.files)

    def read(self, name):
        self.reads.append(name)
        return self.files.get(name)


def test_codeact_shares_only_listed_files_from_a_python_store(linux_router):
    conversation = Conversation("store")
    store = Store({"prices.csv": b"sku,eur\nx1,4.5\n"})
    tool = airlock.make_codeact_tool(linux_router, context=conversation.context(),
                                     image="host", file_store=store, exec_timeout=60)
    try:
        text = tool.invoke({"code": "print(open('prices.csv').read().splitlines()[1])",
                            "files": ["prices.csv"]})
        assert "x1,4.5" in text, text
        assert store.reads == ["prices.csv"]
        refused = tool.invoke({"code": "print(1)", "files": ["../../etc/shadow"]})
        assert refused.startswith("Error"), refused
        assert store.reads == ["prices.csv"]  # an unlisted name is never read
    finally:
        linux_router.dispose_scope("pytest", "store")


# ---- conformance ------------------------------------------------------------------------------


def test_conformance_suites_pass_from_python(linux_router):
    declared = linux_router.describe_backends()[0]["capabilities"]
    capabilities = {c for c in declared if c not in ("snapshot", "attached_identity")}
    spec = airlock.SandboxSpec(kind="conformance", image="host", requires=capabilities)
    key = airlock.SandboxKey("pytest", "conformance", "python")
    try:
        sandbox = linux_router.acquire(key, spec)
        outcomes = {}
        for suite in ["files_out", "files_in", "files_delete", "exec"]:  # exec last
            results = airlock.run_conformance(sandbox, suite, working_directory=WORK,
                                              capabilities=capabilities, exec_timeout=30,
                                              raise_on_failure=True)
            assert results, f"{suite} ran no probe"
            for result in results:
                outcomes[(suite, result["probe"])] = result["outcome"]
        assert "failed" not in outcomes.values()
        assert sum(1 for o in outcomes.values() if o == "passed") >= 20
        with pytest.raises(ValueError):  # egress without its URLs is refused, not run green
            airlock.run_conformance(sandbox, "egress", working_directory=WORK,
                                    capabilities=capabilities)
    finally:
        linux_router.dispose(key)


def test_a_suite_whose_gate_is_missing_is_refused(linux_sandbox):
    with pytest.raises(ValueError):
        airlock.run_conformance(linux_sandbox, "files_out", working_directory=WORK,
                                capabilities={"exec", "files_in"})
