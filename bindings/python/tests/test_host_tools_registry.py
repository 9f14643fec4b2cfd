"""The host-tool registry, runs and the one dispatch door, from Python (no sandbox needed):
construction and registration refusals in the reference's order, bodies sync and async, what a
value crosses as, binding refusals, the observer, and what reaches the host's log."""

import asyncio
import contextlib
import json
import logging
import math
import os
import subprocess
import sys
import threading

import pytest

import airlock
from airlock import Identity, SourceIntegrity

DECLARED = airlock.sandbox_tool(source=None, sink=None, identity=None)


def registry_with(*functions, **options):
    registry = airlock.HostToolRegistry(**options)
    for function in functions:
        registry.register(function)
    return registry


# ---- construction (§6.2) ----------------------------------------------------------------------


@pytest.mark.parametrize("cap", [True, 2.0, float("nan"), float("inf"), "4", None])
def test_a_dispatch_cap_that_is_not_a_plain_int_is_a_type_error(cap):
    with pytest.raises(TypeError, match="max_dispatches_per_run"):
        airlock.HostToolRegistry(max_dispatches_per_run=cap)


@pytest.mark.parametrize("cap", [0, -1])
def test_a_dispatch_cap_below_one_says_to_use_an_empty_registry(cap):
    with pytest.raises(ValueError, match="use an empty registry"):
        airlock.HostToolRegistry(max_dispatches_per_run=cap)


def test_a_dispatch_cap_larger_than_64_bits_is_still_a_cap():
    registry = registry_with(DECLARED(lambda: 1), max_dispatches_per_run=2**80)
    assert registry.dispatch("<lambda>").ok


def test_response_limits_must_be_one_transfer_limits_and_a_sandbox_limits_is_named():
    with pytest.raises(TypeError, match="SandboxLimits"):
        airlock.HostToolRegistry(response_limits=airlock.SandboxLimits())
    with pytest.raises(TypeError, match="TransferLimits"):
        airlock.HostToolRegistry(response_limits={"max_files": 1})
    with pytest.raises(ValueError):
        airlock.HostToolRegistry(response_limits=airlock.TransferLimits(0, 10, 10))


def test_the_observer_must_be_a_synchronous_callable():
    async def coroutine_observer(run, name):
        return contextlib.nullcontext()

    class AsyncCall:
        async def __call__(self, run, name):
            return contextlib.nullcontext()

    @contextlib.asynccontextmanager
    async def async_manager(run, name):
        yield

    for observer in (coroutine_observer, AsyncCall(), "not callable"):
        with pytest.raises(TypeError, match="dispatch_observer"):
            airlock.HostToolRegistry(dispatch_observer=observer)
    airlock.HostToolRegistry(dispatch_observer=lambda run, name: contextlib.nullcontext())
    # An async context manager factory is a plain function returning an object: accepted, and
    # its failure to be entered synchronously is the observer's failure, logged (tested below).
    airlock.HostToolRegistry(dispatch_observer=async_manager)


@pytest.mark.parametrize("identities", [[Identity.APP], {"app"}, Identity.APP, {Identity.APP, 1}])
def test_allowed_identities_must_be_a_set_of_identity_members(identities):
    with pytest.raises(TypeError, match="allowed_identities"):
        airlock.HostToolRegistry(allowed_identities=identities)


def test_construction_checks_run_in_the_reference_order():
    # A bad cap is reported before bad limits, bad limits before a bad observer, and that
    # before bad identities.
    with pytest.raises(TypeError, match="max_dispatches_per_run"):
        airlock.HostToolRegistry(max_dispatches_per_run=1.5, response_limits=1,
                                 dispatch_observer=2, allowed_identities=3)
    with pytest.raises(TypeError, match="response_limits"):
        airlock.HostToolRegistry(response_limits=1, dispatch_observer=2, allowed_identities=3)
    with pytest.raises(TypeError, match="dispatch_observer"):
        airlock.HostToolRegistry(dispatch_observer=2, allowed_identities=3)


def test_the_constants_are_the_references_numbers():
    assert airlock.DEFAULT_MAX_DISPATCHES_PER_RUN == 16
    assert airlock.RESPONSE_FRAMING_BYTES == len('{"value": ') + len("}")
    assert airlock.CALLS_DIRECTORY == "host_tool_calls"
    assert airlock.WORK_DIRECTORY == "work"
    assert airlock.SHIM_MODULE == "airlock_host_tools.py"


# ---- registration (§6.2) ----------------------------------------------------------------------


def test_registration_refusals_come_in_the_reference_order():
    registry = airlock.HostToolRegistry(require_declared=True)
    with pytest.raises(TypeError, match="callable"):
        registry.register(42)
    with pytest.raises(TypeError, match="name"):
        registry.register(DECLARED(lambda: 1), name=7)
    with pytest.raises(ValueError, match="needs a name"):
        registry.register(DECLARED(lambda: 1), name="")
    registry.register(DECLARED(lambda: 1), name="one")
    with pytest.raises(ValueError, match="'one' is already registered"):
        registry.register(lambda: 2, name="one")  # a duplicate is refused before the stamp is read
    with pytest.raises(airlock.HostToolNotDeclared):
        registry.register(lambda *, x: x, name="unstamped")
    registry.aggregate()
    with pytest.raises(ValueError, match="sealed"):
        registry.register(42)  # sealed comes first of all


def test_an_unstamped_tool_under_require_declared_is_told_which_decorator_declares_it():
    registry = airlock.HostToolRegistry(require_declared=True)
    with pytest.raises(airlock.HostToolNotDeclared) as refused:
        registry.register(lambda: 1, name="bare")
    message = str(refused.value)
    assert "'bare'" in message
    assert "@airlock.sandbox_tool(source=…, sink=…, identity=…)" in message
    assert refused.value.check == "require_declared"
    assert isinstance(refused.value, ValueError)


def test_an_identity_outside_the_allowed_set_is_refused_and_none_is_always_allowed():
    registry = airlock.HostToolRegistry()

    @airlock.sandbox_tool(source=None, sink=None, identity=Identity.USER)
    def mail():
        return 1

    with pytest.raises(airlock.HostToolIdentityNotAllowed, match="'user'"):
        registry.register(mail)
    registry.register(DECLARED(lambda: 1), name="pure")
    user_only = airlock.HostToolRegistry(allowed_identities={Identity.USER})
    with pytest.raises(airlock.HostToolIdentityNotAllowed, match="'app'"):
        user_only.register(lambda: 1, name="unstamped_is_app")


def test_reading_a_declaration_seals_the_registry():
    registry = airlock.HostToolRegistry()

    @airlock.sandbox_tool(source=SourceIntegrity.TRUSTED, sink="internal", identity=Identity.APP)
    def price():
        return 1

    registry.register(price)
    declared = registry.declaration_for("price")
    assert (declared.source, declared.sink, declared.identity) == (
        SourceIntegrity.TRUSTED, "internal", Identity.APP)
    assert registry.sealed
    with pytest.raises(ValueError, match="sealed"):
        registry.register(DECLARED(lambda: 2), name="late")
    assert registry.declaration_for("unknown") is None


def test_the_declaration_is_read_once_at_registration():
    registry = airlock.HostToolRegistry()

    @airlock.sandbox_tool(source=SourceIntegrity.TRUSTED, sink=None, identity=None)
    def tool():
        return 1

    registry.register(tool)
    airlock.sandbox_tool(source=SourceIntegrity.UNTRUSTED, sink="public", identity=None)(tool)
    assert registry.declaration_for("tool").source is SourceIntegrity.TRUSTED


def test_resolve_is_the_registered_function_or_none():
    def lookup(key: str):
        return key

    registry = registry_with(DECLARED(lookup))
    assert registry.resolve("lookup") is lookup
    assert registry.resolve("missing") is None
    assert registry.resolve(7) is None


def test_a_signature_no_guest_could_bind_is_refused_at_registration():
    registry = airlock.HostToolRegistry()

    def positional(a, /):
        return a

    with pytest.raises(TypeError, match="positional-only parameter 'a'"):
        registry.register(positional)
    with pytest.raises(TypeError, match="signature cannot be read"):
        registry.register(max)
    assert len(registry) == 0


def test_registration_warns_once_per_process():
    program = (
        "import warnings, airlock\n"
        "warnings.simplefilter('always')\n"
        "with warnings.catch_warnings(record=True) as seen:\n"
        "    warnings.simplefilter('always')\n"
        "    r = airlock.HostToolRegistry()\n"
        "    r.register(lambda: 1, name='a')\n"
        "    r.register(lambda: 2, name='b')\n"
        "    airlock.HostToolRegistry().register(lambda: 3, name='c')\n"
        "print([w.category.__name__ for w in seen])\n")
    ran = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, check=True)
    assert ran.stdout.strip().splitlines()[-1] == "['AirlockHostToolsWarning']"
    assert issubclass(airlock.AirlockHostToolsWarning, UserWarning)


# ---- dispatch: refusals (§6.3) ----------------------------------------------------------------


@pytest.mark.parametrize("name,type_name", [(7, "int"), (None, "NoneType"), (1.5, "float"),
                                            (True, "bool"), (["x"], "list"), ({}, "dict")])
def test_a_name_that_is_not_a_string_is_refused_with_its_python_type(name, type_name):
    result = registry_with(DECLARED(lambda: 1)).dispatch(name)
    assert result.refusal == f"Error: a host tool name must be a string, not {type_name}"


def test_an_unknown_name_is_quoted_as_python_quotes_it_and_bounded():
    registry = registry_with(DECLARED(lambda: 1))
    assert registry.dispatch("it's").refusal == "Error: \"it's\" is not a registered host tool"
    assert registry.dispatch("a\nb").refusal == "Error: 'a\\nb' is not a registered host tool"
    long = registry.dispatch("ü" * 500).refusal
    assert long == "Error: " + repr("ü" * 120 + " (truncated)") + " is not a registered host tool"


def test_a_binding_refusal_names_every_missing_and_every_unexpected_argument():
    calls = []

    @DECLARED
    def book(room: str, day: str, nights: int = 1):
        calls.append(room)
        return "booked"

    registry = registry_with(book)
    result = registry.dispatch("book", {"nights": 2, "guest": "x", "pay": 1})
    assert result.refusal == (
        "Error: arguments do not bind to host tool 'book': missing required arguments 'room', "
        "'day'; unexpected arguments 'guest', 'pay'")
    many = registry.dispatch("book", {"room": "r", "day": "d",
                                      **{f"extra{i}": i for i in range(10)}})
    assert "unexpected arguments 'extra0', 'extra1', 'extra2' and 7 more" in many.refusal
    assert calls == []


def test_arguments_are_typed_by_annotation_and_none_binds_where_none_is_allowed():
    import typing

    @DECLARED
    def find(text: typing.Optional[str], limit: int = 10, tag: str = None, ratio: float = 1.0):
        return [text, limit, tag, ratio]

    registry = registry_with(find)
    assert registry.dispatch("find", {"text": None, "tag": None, "ratio": 2}).value_json == \
        "[null, 10, null, 2]"
    refused = registry.dispatch("find", {"text": "a", "limit": None})
    assert "argument 'limit' must be an integer, not null" in refused.refusal
    assert "must be a string, not an integer" in registry.dispatch("find", {"text": 3}).refusal


def test_a_tool_taking_any_keyword_gets_them_and_star_args_are_ignored():
    @DECLARED
    def gather(first, *rest, **others):
        return {"first": first, "rest": list(rest), "others": others}

    result = registry_with(gather).dispatch("gather", {"first": 1, "b": 2, "a": 3})
    assert json.loads(result.value_json) == {"first": 1, "rest": [], "others": {"b": 2, "a": 3}}


# ---- dispatch: values (§6.3 steps 13–14) -------------------------------------------------------


def test_the_value_crosses_as_json_dumps_writes_it():
    @DECLARED
    def record():
        return {"zeta": 1, "alpha": ("ü", 2**70), 3: None}

    result = registry_with(record).dispatch("record")
    assert result.value_json == '{"zeta": 1, "alpha": ["ü", 1180591620717411303424], "3": null}'


@pytest.mark.parametrize("value", [{1, 2}, object(), math.nan, math.inf, [-math.inf], b"bytes",
                                   "\ud800", {"nested": {(1, 2): 3}}])
def test_a_value_json_cannot_carry_is_refused_as_such(value):
    registry = airlock.HostToolRegistry()
    registry.register(DECLARED(lambda: value), name="odd")
    result = registry.dispatch("odd")
    assert result.refusal == "Error: host tool 'odd' returned a value that cannot be carried as JSON"


def test_a_circular_value_is_refused_as_not_carried():
    loop = []
    loop.append(loop)
    registry = airlock.HostToolRegistry()
    registry.register(DECLARED(lambda: loop), name="circular")
    assert "cannot be carried as JSON" in registry.dispatch("circular").refusal


def test_a_failing_body_is_the_fixed_refusal_and_its_type_and_text_reach_the_log(caplog):
    @DECLARED
    def explode():
        raise KeyError("the secret database password is hunter2")

    registry = registry_with(explode)
    with caplog.at_level(logging.ERROR, logger="airlock.host_tools"):
        result = registry.dispatch("explode")
    assert result.refusal == "Error: host tool 'explode' failed — the reason is in the host's log"
    lines = [record.getMessage() for record in caplog.records]
    assert any("'explode' failed: KeyError: 'the secret database password is hunter2'" in line
               for line in lines), lines


def test_a_runs_own_logger_receives_its_failure_lines():
    @DECLARED
    def explode():
        raise ValueError("bad row")

    logger = logging.getLogger("test.host_tools.own")
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger.addHandler(handler)
    try:
        run = airlock.HostToolRun(registry_with(explode), logger=logger)
        assert not run.dispatch("explode").ok
    finally:
        logger.removeHandler(handler)
    assert any("ValueError: bad row" in record.getMessage() for record in records)
    with pytest.raises(TypeError, match="logger"):
        airlock.HostToolRun(registry_with(), logger="stdout")


# ---- async bodies -----------------------------------------------------------------------------


def test_an_async_tool_is_awaited_in_a_fresh_loop_when_the_host_has_none():
    seen = {}

    @DECLARED
    async def slow_add(x: int, y: int):
        await asyncio.sleep(0.01)
        seen["loop"] = asyncio.get_running_loop()
        return x + y

    result = registry_with(slow_add).dispatch("slow_add", {"x": 2, "y": 40})
    assert result.value_json == "42"
    assert seen["loop"] is not None


@pytest.mark.asyncio
async def test_an_async_tool_is_awaited_on_the_hosts_loop_from_a_worker_thread():
    host_loop = asyncio.get_running_loop()
    gate = asyncio.Event()  # bound to the host's loop: only that loop can await it
    seen = {}

    @DECLARED
    async def wait_for_gate():
        seen["loop"] = asyncio.get_running_loop()
        await gate.wait()
        return "opened"

    run = airlock.HostToolRun(registry_with(wait_for_gate))  # started here: captures this loop
    host_loop.call_later(0.05, gate.set)
    result = await asyncio.to_thread(run.dispatch, "wait_for_gate")
    assert result.value_json == '"opened"'
    assert seen["loop"] is host_loop


@pytest.mark.asyncio
async def test_a_synchronous_dispatch_inside_a_coroutine_does_not_deadlock_its_loop():
    @DECLARED
    async def nap():
        await asyncio.sleep(0.01)
        return threading.current_thread().name

    # The loop's own thread is blocked in this call: the body gets a loop of its own.
    result = registry_with(nap).dispatch("nap")
    assert json.loads(result.value_json) == "airlock-host-tool"


def test_an_async_tool_that_raises_is_the_failed_refusal():
    @DECLARED
    async def broken():
        raise RuntimeError("inside the coroutine")

    assert "failed — the reason is in the host's log" in \
        registry_with(broken).dispatch("broken").refusal


# ---- runs (§6.3) ------------------------------------------------------------------------------


def test_a_run_counts_dispatches_deliveries_and_bytes_read_only():
    registry = registry_with(DECLARED(lambda: "abc"), max_dispatches_per_run=3)
    run = airlock.HostToolRun(registry)
    assert run.dispatch("<lambda>", framing_bytes=airlock.RESPONSE_FRAMING_BYTES).ok
    assert not run.dispatch("missing").ok
    assert (run.dispatched, run.delivered, run.delivered_bytes) == (2, 1, 5 + 11)
    assert run.registry is registry
    for counter in ("dispatched", "delivered", "delivered_bytes"):
        with pytest.raises(AttributeError):
            setattr(run, counter, 0)
    run.dispatch("<lambda>")
    cap = run.dispatch("<lambda>")
    assert cap.refusal.startswith("Error: this run's host-tool dispatch cap (3) is exhausted")


@pytest.mark.parametrize("framing", [True, 1.0, "11", None])
def test_framing_bytes_must_be_a_plain_int(framing):
    run = airlock.HostToolRun(registry_with(DECLARED(lambda: 1)))
    with pytest.raises(TypeError, match="framing_bytes"):
        run.dispatch("<lambda>", framing_bytes=framing)
    assert run.dispatched == 0, "a transport error counted as a dispatch"


def test_negative_framing_is_a_value_error_and_a_huge_one_cannot_fit():
    run = airlock.HostToolRun(registry_with(DECLARED(lambda: 1)))
    with pytest.raises(ValueError, match="framing_bytes"):
        run.dispatch("<lambda>", framing_bytes=-1)
    assert "exhausted" in run.dispatch("<lambda>", framing_bytes=2**70).refusal


def test_a_run_needs_a_registry():
    with pytest.raises(TypeError, match="HostToolRegistry"):
        airlock.HostToolRun(object())


def test_dispatch_result_holds_exactly_one_of_value_and_refusal():
    assert airlock.DispatchResult(value_json="1").ok
    assert not airlock.DispatchResult(refusal="no").ok
    for bad in ({}, {"value_json": "1", "refusal": "no"}):
        with pytest.raises(ValueError):
            airlock.DispatchResult(**bad)


# ---- the observer -----------------------------------------------------------------------------


def test_the_observer_sees_every_dispatch_and_its_outcome():
    log = []

    @contextlib.contextmanager
    def audit(run, name):
        outcome = []
        log.append(("begin", name, run.dispatched))
        yield outcome.append
        log.append(("end", name, outcome[0].ok, outcome[0].refusal or outcome[0].value_json))

    @DECLARED
    def price(sku: str):
        log.append(("body", sku))
        return 4.5

    registry = registry_with(price, dispatch_observer=audit)
    run = airlock.HostToolRun(registry)
    run.dispatch("price", {"sku": "x1"})
    run.dispatch(7)
    assert log == [
        ("begin", "price", 0), ("body", "x1"), ("end", "price", True, "4.5"),
        ("begin", 7, 1), ("end", 7, False, "Error: a host tool name must be a string, not int"),
    ]


def test_the_observer_is_given_the_run_it_observes():
    runs = []
    registry = registry_with(DECLARED(lambda: 1),
                             dispatch_observer=lambda run, name: runs.append(run) or
                             contextlib.nullcontext())
    run = airlock.HostToolRun(registry)
    run.dispatch("<lambda>")
    assert runs == [run] and runs[0] is run
    registry.dispatch("<lambda>")  # a fresh run of its own
    assert isinstance(runs[1], airlock.HostToolRun) and runs[1] is not run


def test_observer_failures_are_logged_and_never_reach_the_dispatch(caplog):
    class Broken:
        def __init__(self, where):
            self.where = where

        def __enter__(self):
            if self.where == "enter":
                raise RuntimeError("enter broke")
            if self.where == "record":
                return lambda outcome: 1 / 0
            return None

        def __exit__(self, *exc):
            if self.where == "exit":
                raise asyncio.CancelledError()
            return True  # ignored: nothing to suppress, and the dispatch never raises

    for where in ("call", "enter", "record", "exit", "not a manager"):
        def observer(run, name, where=where):
            if where == "call":
                raise GeneratorExit()
            if where == "not a manager":
                return 42
            return Broken(where)

        registry = registry_with(DECLARED(lambda: 1), dispatch_observer=observer)
        with caplog.at_level(logging.WARNING, logger="airlock.host_tools"):
            assert registry.dispatch("<lambda>").value_json == "1", where
    messages = " ".join(record.getMessage() for record in caplog.records)
    assert "failed as the dispatch of '<lambda>' began" in messages
    assert "failed to take the outcome" in messages
    assert "failed as the dispatch of '<lambda>' ended" in messages


def test_tools_are_dispatched_from_foreign_threads_with_their_observer():
    seen = []
    lock = threading.Lock()

    @contextlib.contextmanager
    def audit(run, name):
        outcome = []
        yield outcome.append
        with lock:
            seen.append(outcome[0].ok)

    registry = registry_with(DECLARED(lambda n: n * 2), max_dispatches_per_run=100,
                             dispatch_observer=audit)
    run = airlock.HostToolRun(registry)
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(
        run.dispatch("<lambda>", {"n": i}).value_json)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(int(r) for r in results) == [i * 2 for i in range(16)]
    assert seen == [True] * 16
