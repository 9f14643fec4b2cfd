"""Conformance runs from Python, against the in-process `testing` backend: the harness's rules
(the gate, the skips, a raising probe, every probe run), the failure summary, and measurement —
results without a verdict."""

import asyncio

import pytest

import airlock
import airlock.testing

WORK = "/srv/conformance/work"
EVERYTHING = ["exec", "files_in", "files_out", "files_list", "files_delete"]


@pytest.fixture
def sandbox(testing_router, request):
    key = airlock.SandboxKey("conformance", request.node.name, "python")
    return testing_router.acquire(key, airlock.SandboxSpec(kind="conformance"))


def outcomes(results):
    return {result["probe"]: result["outcome"] for result in results}


def test_a_suite_without_its_gate_is_a_value_error_never_a_green_run(sandbox):
    with pytest.raises(ValueError, match="files_out") as refused:
        airlock.run_conformance(sandbox, "files_out", working_directory=WORK,
                                capabilities=["exec", "files_in"])
    assert isinstance(refused.value, airlock.InvalidArgument)
    assert sandbox.commands == [], "a refused suite touched the sandbox"
    with pytest.raises(ValueError, match="capabilities"):
        airlock.run_conformance(sandbox, "files_out", working_directory=WORK)


def test_a_probe_needing_an_undeclared_capability_is_skipped_with_the_reason(sandbox):
    results = airlock.run_conformance(sandbox, "files_out", working_directory=WORK,
                                      capabilities=["exec", "files_in", "files_out"])
    skipped = [r for r in results if r["outcome"] == "skipped"]
    assert [r["probe"] for r in skipped] == [
        "listing-a-linked-directory", "listing-through-a-linked-parent",
        "listing-under-a-linked-ancestor", "a-listing-names-its-links"]
    assert {r["detail"] for r in skipped} == {"backend does not declare [files_list]"}
    assert all(r["outcome"] == "passed" for r in results if r not in skipped)


def test_a_failed_run_raises_conformance_failure_with_results_failures_and_a_count(sandbox):
    # A backend whose stat misreports a file's size fails the positive control, and the probe
    # that checks the sandbox still serves it after refusing overlong paths.
    sandbox.misreport_size(WORK + "/real/inside.txt", 3)
    with pytest.raises(airlock.ConformanceFailure) as failed:
        airlock.run_conformance(sandbox, "files_out", working_directory=WORK,
                                capabilities=EVERYTHING, raise_on_failure=True)
    failure = failed.value
    assert isinstance(failure, AssertionError)
    assert str(failure).startswith("2 of 20 conformance probes failed:"), str(failure)
    assert "files_out/a-legitimate-read-still-works (stat gives a regular file of the exact " \
        "size" in str(failure)
    assert failure.total == 20
    assert len(failure.results) == 20
    assert outcomes(failure.results)["a-link-is-never-read"] == "passed"
    assert [f["probe"] for f in failure.failures] == [
        "files_out/a-legitimate-read-still-works",
        "files_out/a-path-of-4096-bytes-is-refused-cleanly"]
    assert failure.failures[0]["why"].startswith("stat gives a regular file")
    assert "size 3" in failure.failures[0]["failure"]
    assert [r["probe"] for r in failure.results if r["outcome"] == "failed"] == [
        f["probe"].split("/", 1)[1] for f in failure.failures]


def test_a_probe_that_raises_fails_with_its_type_and_message_and_every_probe_still_runs(sandbox):
    sandbox.raise_on_exec("BackendError", "the provider went away")
    results = airlock.run_conformance(sandbox, "exec", working_directory=WORK,
                                      capabilities=EVERYTHING)
    assert len(results) == 9
    assert all(r["outcome"] == "failed" for r in results), results
    by_probe = {r["probe"]: r["detail"] for r in results}
    assert by_probe["an-argv-sequence-runs"] == "raised BackendError: the provider went away"
    assert "raised BackendError: the provider went away; expected Timeout" in \
        by_probe["a-timeout-raises-timeout-error"]
    # The suite planted its working directory through the file plane, then every probe's exec
    # was recorded even though each one raised.
    assert len(sandbox.commands) >= 9


def test_the_exec_suite_holds_the_timeout_window(sandbox):
    results = airlock.run_conformance(sandbox, "exec", working_directory=WORK,
                                      capabilities=EVERYTHING)
    assert outcomes(results)["a-timeout-raises-timeout-error"] == "passed"
    probe = next(r for r in airlock.describe_probes()
                 if r["probe"] == "a-timeout-raises-timeout-error")
    assert "between 0.5 s and 4 s" in probe["why"]
    # The probe's command and its 1 s bound, as the sandbox was asked.
    assert ("'sleep' '30'", WORK, 1.0) in sandbox.commands


def test_a_measurement_reads_no_gate_skips_nothing_and_never_raises(sandbox):
    # Nothing declared at all: a verdict would be refused; a measurement runs every probe.
    results = airlock.run_conformance(sandbox, "files_out", working_directory=WORK,
                                      measure=True)
    assert len(results) == 20
    assert all(r["measured"] for r in results)
    assert all(r["outcome"] != "skipped" for r in results), results
    assert outcomes(results)["a-listing-names-its-links"] == "passed"
    # A failing mechanism is measured, not judged.
    sandbox.misreport_size(WORK + "/real/inside.txt", None)
    measured = airlock.run_conformance(sandbox, "files_out", working_directory=WORK,
                                       capabilities=[], measure=True)
    assert outcomes(measured)["a-legitimate-read-still-works"] == "failed"


def test_a_measurement_cannot_also_raise_a_verdict(sandbox):
    with pytest.raises(ValueError, match="measure"):
        airlock.run_conformance(sandbox, "files_delete", working_directory=WORK,
                                capabilities=EVERYTHING, measure=True, raise_on_failure=True)


def test_measure_files_delete_probes_runs_the_delete_probes_undeclared(sandbox):
    results = airlock.measure_files_delete_probes(sandbox, working_directory=WORK)
    assert len(results) == 12
    assert all(r["measured"] and r["suite"] == "files_delete" for r in results)
    assert all(r["outcome"] == "passed" for r in results), results
    # Whatever the sandbox does, it reports: a removal mechanism that is not there fails each
    # probe with its own words, and nothing raises.
    sandbox.raise_on_exec(airlock.errors.NotSupported, "no exec here")
    broken = airlock.measure_files_delete_probes(sandbox, working_directory=WORK)
    assert any(r["outcome"] == "failed" for r in broken)
    assert "raised NotSupported: no exec here" in {r["detail"] for r in broken}


def test_verdict_results_are_not_marked_measured(sandbox):
    results = airlock.run_conformance(sandbox, "files_in", working_directory=WORK,
                                      capabilities=EVERYTHING, raise_on_failure=True)
    assert results and not any(r["measured"] for r in results)


def test_the_awaitable_spellings_measure_too(sandbox):
    async def measure():
        return (await airlock.aio.run_conformance(sandbox, "files_delete",
                                                  working_directory=WORK, measure=True),
                await airlock.aio.measure_files_delete_probes(sandbox, working_directory=WORK))

    by_suite, by_name = asyncio.run(measure())
    assert [r["probe"] for r in by_suite] == [r["probe"] for r in by_name]
    assert all(r["measured"] for r in by_suite + by_name)
