"""The host-tool transport from Python: the run layout, the shim, the launcher, and — against
real `linux` sandboxes (root, image "host") — both channels end to end: tools named like the
shim's own machinery, the over-exec supervisor leaving `work` for the caller, reclaiming a run,
timeouts quoting the program's output, and coroutine bodies awaited on the host's loop."""

import asyncio
import contextlib
import json
import math

import pytest

import airlock

WORK = "/maf-sandbox/work"
DECLARED = airlock.sandbox_tool(source=None, sink=None, identity=None)
CHANNELS = ["files", "socket"]


# ---- the layout (§6.4) ------------------------------------------------------------------------


def test_the_layout_puts_the_program_beside_the_shim_and_away_from_work():
    layout = airlock.guest_run_layout("/runs//abc/./", program="main.py")
    assert layout == airlock.GuestRunLayout(
        directory="/runs/abc", work="/runs/abc/work", program="/runs/abc/host_tools/main.py",
        shim="/runs/abc/host_tools/airlock_host_tools.py",
        launcher="/runs/abc/host_tools/run_program.sh",
        calls="/runs/abc/host_tools/host_tool_calls",
        output="/runs/abc/host_tools/program_output.txt",
        exit_code="/runs/abc/host_tools/program_exit_code",
        pid="/runs/abc/host_tools/program_pid", session="/runs/abc/host_tools/program_session")
    assert airlock.guest_run_layout("/r").program == "/r/host_tools/program.py"
    with pytest.raises(dataclasses_frozen_error()):
        layout.work = "/elsewhere"


def dataclasses_frozen_error():
    import dataclasses
    return dataclasses.FrozenInstanceError


@pytest.mark.parametrize("run_directory", ["relative/run", "/runs/10:30", "/runs\\x", "/"])
def test_a_run_directory_pythonpath_cannot_carry_is_refused(run_directory):
    with pytest.raises(ValueError):
        airlock.guest_run_layout(run_directory)


@pytest.mark.parametrize("program", ["", ".", "..", "a/b.py", "airlock_host_tools.py",
                                     "run_program.sh", "program_output.txt", "program_pid",
                                     "program_exit_code.part", "host_tool_calls", "json.py",
                                     "os.pyc", "time.so", "site.py", "io.cpython-311.so"])
def test_a_program_name_the_transport_or_the_interpreter_needs_is_refused(program):
    with pytest.raises(ValueError):
        airlock.guest_run_layout("/run", program=program)


@pytest.mark.parametrize("program", ["json.backup.py", "json.txt", "main.py", "jsonish.py"])
def test_a_program_name_that_shadows_nothing_is_accepted(program):
    assert airlock.guest_run_layout("/run", program=program).program.endswith("/" + program)


def test_layout_arguments_must_be_strings():
    with pytest.raises(TypeError, match="run_directory"):
        airlock.guest_run_layout(b"/run")
    with pytest.raises(TypeError, match="program"):
        airlock.guest_run_layout("/run", program=None)


# ---- the shim and the launcher (§6.5, §6.6) ---------------------------------------------------


@pytest.mark.parametrize("call_timeout", [0, -1, math.nan, math.inf])
def test_the_guests_call_patience_must_be_finite_and_positive(call_timeout):
    with pytest.raises(ValueError, match="call_timeout"):
        airlock.host_tool_shim(["a"], call_timeout=call_timeout)


def test_shim_arguments_are_type_checked():
    with pytest.raises(TypeError):
        airlock.host_tool_shim("lookup")
    with pytest.raises(TypeError):
        airlock.host_tool_shim([1])
    with pytest.raises(TypeError, match="call_timeout"):
        airlock.host_tool_shim(call_timeout="300")


def test_the_shim_carries_the_call_patience_and_compiles():
    shim = airlock.host_tool_shim(["lookup", "ｏｐｅｎ"], call_timeout=2.5)
    compile(shim, airlock.SHIM_MODULE, "exec")
    assert "], 2.500)" in shim
    assert '("lookup", "lookup")' in shim
    assert "ｏｐｅｎ" not in shim and "\\U0000ff4f" not in shim  # `open` after NFKC: no wrapper


def test_the_launcher_starts_the_program_detached_with_the_shim_first_on_pythonpath():
    layout = airlock.guest_run_layout("/runs/x")
    script = airlock.launcher_script(layout, interpreter="/usr/bin/python3")
    assert script.startswith("#!/bin/sh\n")
    assert "mkdir -p '/runs/x/work' && cd '/runs/x/work' || exit 1" in script
    # The inner script travels single-quoted inside `sh -c '…'`, so its own quotes are escaped.
    assert "airlock_path='\\''/runs/x/host_tools'\\''" in script
    assert "PYTHONUNBUFFERED=1 PYTHONNOUSERSITE=1 " in script
    assert "setsid nohup sh -c" in script
    with pytest.raises(TypeError, match="layout"):
        airlock.launcher_script({"directory": "/x"})


def test_the_supervisors_bounds_must_be_finite_and_positive(testing_router):
    sandbox = testing_router.acquire(airlock.SandboxKey("pytest", "bounds", "x"),
                                     airlock.SandboxSpec(kind="bounds"))
    run = airlock.HostToolRun(airlock.HostToolRegistry())
    layout = airlock.guest_run_layout("/maf-sandbox/work/run")
    for bad in (0, -1, math.nan, math.inf):
        with pytest.raises(ValueError, match="timeout"):
            airlock.dispatch_over_exec(sandbox, run, layout, timeout=bad)
        with pytest.raises(ValueError, match="poll_interval"):
            airlock.dispatch_over_exec(sandbox, run, layout, timeout=5, poll_interval=bad)
        with pytest.raises(ValueError, match="timeout"):
            airlock.reclaim_run(sandbox, layout, timeout=bad)
    with pytest.raises(TypeError, match="HostToolRun"):
        airlock.dispatch_over_exec(sandbox, airlock.HostToolRegistry(), layout, timeout=5)


def test_reclaim_refuses_a_layout_that_leaves_its_own_directory(testing_router):
    sandbox = testing_router.acquire(airlock.SandboxKey("pytest", "reclaim", "x"),
                                     airlock.SandboxSpec(kind="reclaim"))
    layout = airlock.guest_run_layout("/maf-sandbox/work/run")
    import dataclasses
    escaping = dataclasses.replace(layout, work="/etc")
    assert airlock.reclaim_run(sandbox, escaping) is False


# ---- end to end, real sandboxes ---------------------------------------------------------------

# Names that break a naive shim: builtins and modules it uses, its own API and helpers,
# keywords, dunders, spellings equal only after NFKC, names that are no identifier.
HOSTILE = ["open", "json", "os", "time", "call", "HostToolError", "print", "Exception",
           "isinstance", "dict", "_airlock_install", "_claim", "ｏｐｅｎ", "ｐｒｉｎｔ", "class",
           "None", "__getattr__", "__file__", "with space", "lookup", "über", "_private"]

HOSTILE_PROGRAM = "import airlock_host_tools as tools\nNAMES = " + json.dumps(HOSTILE) + """
wrong = [n for i, n in enumerate(NAMES) if tools.call(n, x=i) != [n, i]]
print("call:", wrong)
print(tools.print(x=1), tools.isinstance(x=2), tools.dict(x=3), tools.lookup(x=4))
print(tools.ｐｒｉｎｔ(x=5), tools.über(x=6), tools._private(x=7))
print(sorted(n for n in ["open", "json", "os", "time", "Exception", "_claim", "__getattr__",
                         "None", "class"] if n in vars(tools)))
try:
    tools.call("missing")
except tools.HostToolError as error:
    print(type(error).__name__, error)
"""


def hostile_registry():
    registry = airlock.HostToolRegistry(max_dispatches_per_run=100)
    for name in HOSTILE:
        registry.register(DECLARED(lambda x, _name=name: [_name, x]), name=name)
    return registry


def require_channel(sandbox, channel):
    if channel == "socket":
        assert sandbox.socket_channel() is not None, "this linux sandbox offers no socket channel"


@pytest.mark.parametrize("channel", CHANNELS)
def test_tools_named_like_the_shims_own_names_all_answer(linux_sandbox, channel):
    require_channel(linux_sandbox, channel)
    ran = airlock.run_program_with_host_tools(
        linux_sandbox, hostile_registry(), HOSTILE_PROGRAM, run_directory=WORK + "/hostile",
        timeout=60, channel=channel)
    result = ran["result"]
    assert ran["channel"] == channel
    assert result.exit_code == 0, result.stdout + result.stderr
    assert result.stdout == (
        "call: []\n"
        "['print', 1] ['isinstance', 2] ['dict', 3] ['lookup', 4]\n"
        "['print', 5] ['über', 6] ['_private', 7]\n"
        "[]\n"
        "HostToolError Error: 'missing' is not a registered host tool\n")
    assert ran["dispatched"] == len(HOSTILE) + 7 + 1


def write_run(sandbox, layout, code, names, call_timeout=30):
    made = sandbox.exec(["mkdir", "-p", layout.work], working_directory="/", timeout=30)
    assert made.exit_code == 0, made.stderr
    sandbox.write_file(layout.program, code, working_directory=layout.directory)
    sandbox.write_file(layout.shim, airlock.host_tool_shim(names, call_timeout=call_timeout),
                       working_directory=layout.directory)


def relative(layout, path):
    return path[len(WORK) + 1:]


def test_dispatch_over_exec_leaves_work_for_the_caller_and_removes_only_the_transport(
        linux_sandbox):
    @DECLARED
    def add(x: int, y: int):
        return x + y

    registry = airlock.HostToolRegistry()
    registry.register(add)
    layout = airlock.guest_run_layout(WORK + "/over-exec", program="main.py")
    write_run(linux_sandbox, layout, "import os, airlock_host_tools as tools\n"
                                     "open('answer.txt', 'w').write(str(tools.add(x=40, y=2)))\n"
                                     "print(os.path.basename(__file__))\n", ["add"])
    run = airlock.HostToolRun(registry)
    result = airlock.dispatch_over_exec(linux_sandbox, run, layout, timeout=60, poll_interval=0.05)
    assert (result.exit_code, result.stdout) == (0, "main.py\n"), result.stderr
    assert (run.dispatched, run.delivered) == (1, 1)
    assert linux_sandbox.read_file(relative(layout, layout.work) + "/answer.txt",
                                   working_directory=WORK) == b"42"
    assert linux_sandbox.stat_file(relative(layout, layout.directory) + "/host_tools",
                                   working_directory=WORK) is None
    assert airlock.reclaim_run(linux_sandbox, layout) is True
    assert linux_sandbox.stat_file(relative(layout, layout.directory),
                                   working_directory=WORK) is None


def test_a_run_kept_for_collection_keeps_work_until_reclaimed(linux_sandbox):
    ran = airlock.run_program_with_host_tools(
        linux_sandbox, airlock.HostToolRegistry(), "open('report.txt', 'w').write('kept')\n",
        run_directory=WORK + "/kept", timeout=60, channel="files", reclaim=False,
        program="report.py")
    layout = ran["layout"]
    assert layout.program.endswith("/host_tools/report.py")
    assert ran["result"].exit_code == 0, ran["result"].stderr
    assert isinstance(ran["run"], airlock.HostToolRun) and ran["run"].dispatched == 0
    assert linux_sandbox.read_file("kept/work/report.txt", working_directory=WORK) == b"kept"
    assert linux_sandbox.stat_file("kept/host_tools", working_directory=WORK) is None
    assert airlock.reclaim_run(linux_sandbox, layout, timeout=30) is True
    assert linux_sandbox.stat_file("kept", working_directory=WORK) is None


@pytest.mark.parametrize("channel", CHANNELS)
def test_a_program_timeout_quotes_what_the_program_printed(linux_sandbox, channel):
    require_channel(linux_sandbox, channel)
    code = "import time\nprint('got as far as step 3', flush=True)\ntime.sleep(300)\n"
    with pytest.raises(airlock.SandboxProgramTimeout) as expired:
        airlock.run_program_with_host_tools(linux_sandbox, airlock.HostToolRegistry(), code,
                                            run_directory=WORK + "/slow", timeout=2,
                                            channel=channel, poll_interval=0.05)
    error = expired.value
    assert isinstance(error, TimeoutError)
    assert "got as far as step 3" in error.output
    assert str(error).startswith("the program ran past the run's 2s")
    assert "what it printed (at most 2000 characters):\ngot as far as step 3" in str(error)
    assert error.signal == "sent", str(error)
    assert " and its process group was sent SIGKILL" in str(error)


@pytest.mark.parametrize("channel", CHANNELS)
@pytest.mark.asyncio
async def test_an_async_tool_is_awaited_on_the_hosts_loop_through_aio(linux_sandbox, channel):
    require_channel(linux_sandbox, channel)
    host_loop = asyncio.get_running_loop()
    seen = []

    @DECLARED
    async def rate(currency: str):
        seen.append(asyncio.get_running_loop())
        await asyncio.sleep(0.01)
        return {"currency": currency, "rate": 1.08}

    registry = airlock.HostToolRegistry()
    registry.register(rate)
    ran = await airlock.aio.run_program_with_host_tools(
        linux_sandbox, registry, "import airlock_host_tools as tools\n"
                                 "print(tools.rate(currency='EUR'))\n",
        run_directory=WORK + "/async-" + channel, timeout=60, channel=channel)
    assert ran["result"].stdout == "{'currency': 'EUR', 'rate': 1.08}\n", ran["result"].stderr
    assert seen == [host_loop]


def test_an_async_tool_is_awaited_by_a_host_without_a_loop(linux_sandbox):
    @DECLARED
    async def slow_double(n: int):
        await asyncio.sleep(0.01)
        return n * 2

    registry = airlock.HostToolRegistry()
    registry.register(slow_double)
    ran = airlock.run_program_with_host_tools(
        linux_sandbox, registry, "import airlock_host_tools as tools\n"
                                 "print(tools.slow_double(n=21))\n",
        run_directory=WORK + "/async-sync-host", timeout=60)
    assert ran["result"].stdout == "42\n", ran["result"].stderr


@pytest.mark.asyncio
async def test_codeact_awaited_through_aio_awaits_a_coroutine_tool_on_the_hosts_loop(
        linux_router):
    host_loop = asyncio.get_running_loop()
    seen, audit = [], []

    @DECLARED
    async def rate(currency: str):
        seen.append(asyncio.get_running_loop())
        return 1.08

    def observer(run, name):
        audit.append((name, run is not None))
        return contextlib.nullcontext(lambda outcome: audit.append(outcome.value_json))

    registry = airlock.HostToolRegistry(dispatch_observer=observer)
    registry.register(rate)
    thread = "codeact-async"
    context = airlock.CallerContext(lambda: "pytest", lambda: thread)
    tool = airlock.make_codeact_tool(linux_router, context=context, image="host",
                                     host_tools=registry, exec_timeout=60)
    try:
        text = await airlock.aio.invoke(tool, {
            "code": "import airlock_host_tools as tools\nprint('rate', tools.rate(currency='EUR'))"})
    finally:
        linux_router.dispose_scope("pytest", thread)
    assert "rate 1.08" in text, text
    assert seen == [host_loop]
    assert audit == [("rate", True), "1.08"]
