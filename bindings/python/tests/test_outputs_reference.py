"""Files out (reference §4.1–§4.7), scenario for scenario, through the Python module: the phase
order, the tally, the error translation, the name rules and the sinks."""

import pathlib

import pytest

import airlock
from airlock import OutputDisposition

WORK = "/maf-sandbox/work"
FILES_OUT = {"exec", "files_in", "files_out"}


def sandbox_for(router, spec, thread):
    return router.acquire(airlock.SandboxKey("tenant", thread, "outputs"), spec)


def spec_with(*outputs, files_out=None, named_at_call_time=False):
    return airlock.SandboxSpec(kind="k", requires=FILES_OUT, declared_outputs=list(outputs),
                               files_out=files_out,
                               outputs_named_at_call_time=named_at_call_time)


class Recorder:
    """A Python sink that records what it was handed, and can refuse the n-th delivery."""

    def __init__(self, refuse_at=None):
        self.delivered = []
        self.refuse_at = refuse_at

    def __call__(self, artifact):
        if self.refuse_at is not None and len(self.delivered) == self.refuse_at:
            raise RuntimeError(f"quota: {artifact.name}")
        self.delivered.append(artifact)
        return airlock.LandedArtifact(artifact.name, f"{artifact.name} landed")


# ---- §4.1 the phase order ---------------------------------------------------------------------


def test_collect_outputs_returns_an_immutable_tuple(testing_router):
    spec = spec_with(airlock.DeclaredOutput("a.txt"), airlock.DeclaredOutput("b.txt"))
    sandbox = sandbox_for(testing_router, spec, "tuple")
    sandbox.write_file("a.txt", b"1", working_directory=WORK)
    sandbox.write_file("b.txt", b"22", working_directory=WORK)
    landed = airlock.collect_outputs(sandbox, spec, airlock.OutputSink(Recorder()))
    assert isinstance(landed, tuple)
    assert [a.name for a in landed] == ["a.txt", "b.txt"]
    nothing = airlock.collect_outputs(sandbox, spec_with(), None)
    assert nothing == ()


def test_call_time_outputs_are_named_outputs_and_share_the_caps(testing_router):
    spec = spec_with(airlock.DeclaredOutput("a.txt"), files_out=airlock.TransferLimits(10, 10, 1),
                     named_at_call_time=True)
    sandbox = sandbox_for(testing_router, spec, "call-time")
    sandbox.write_file("a.txt", b"1", working_directory=WORK)
    sandbox.write_file("late.txt", b"2", working_directory=WORK)
    sink = airlock.OutputSink(Recorder())
    # One file fits the caps; the call-time one is the second and breaks max_files.
    with pytest.raises(airlock.SandboxTransferCapExceeded) as refused:
        airlock.collect_outputs(sandbox, spec, sink, outputs=[airlock.DeclaredOutput("late.txt")])
    assert refused.value.cap == "files_out.max_files" and refused.value.file == "late.txt"
    roomy = spec.replace(files_out=airlock.TransferLimits(10, 10, 2))
    landed = airlock.collect_outputs(sandbox, roomy, sink=sink,
                                     outputs=(airlock.DeclaredOutput("late.txt"),))
    assert [a.name for a in landed] == ["a.txt", "late.txt"]


def test_call_time_outputs_without_the_flag_are_a_value_error(testing_router):
    spec = spec_with()
    sandbox = sandbox_for(testing_router, spec, "no-flag")
    with pytest.raises(ValueError, match="outputs_named_at_call_time"):
        airlock.collect_outputs(sandbox, spec, airlock.OutputSink(Recorder()),
                                outputs=[airlock.DeclaredOutput("x.txt")])
    with pytest.raises(TypeError, match="DeclaredOutput"):
        airlock.collect_outputs(sandbox, spec, None, outputs=["x.txt"])


def test_names_are_judged_before_the_sandbox_is_touched(testing_router):
    # Nothing exists in the sandbox: a stat would say "missing". The name refusal comes first.
    spec = spec_with(airlock.DeclaredOutput("ok.txt"), airlock.DeclaredOutput("a/../b"))
    sandbox = sandbox_for(testing_router, spec, "names-first")
    with pytest.raises(airlock.SandboxArtifactNameInvalid) as refused:
        airlock.collect_outputs(sandbox, spec, airlock.OutputSink(Recorder()))
    assert refused.value.check == "parent-segment"
    # A consume output's path is judged too, whatever its disposition.
    consumed = spec_with(airlock.DeclaredOutput("x//y", OutputDisposition.CONSUME))
    with pytest.raises(airlock.SandboxArtifactNameInvalid):
        airlock.collect_outputs(sandbox, consumed, None)


def test_the_stat_phase_counts_consume_outputs_against_the_caps(testing_router):
    spec = spec_with(airlock.DeclaredOutput("parsed.json", OutputDisposition.CONSUME),
                     airlock.DeclaredOutput("small.txt"),
                     files_out=airlock.TransferLimits(100, 5, 10))
    sandbox = sandbox_for(testing_router, spec, "consume-counts")
    sandbox.write_file("parsed.json", b"{}{}", working_directory=WORK)  # 4 bytes, never read
    sandbox.write_file("small.txt", b"xx", working_directory=WORK)
    recorder = Recorder()
    with pytest.raises(airlock.SandboxTransferCapExceeded) as refused:
        airlock.collect_outputs(sandbox, spec, airlock.OutputSink(recorder))
    assert refused.value.cap == "files_out.max_total_bytes"
    assert refused.value.file == "small.txt"
    assert "files_out.max_total_bytes" in str(refused.value) and "small.txt" in str(refused.value)
    assert recorder.delivered == []


def test_the_tally_checks_the_per_file_cap_before_the_count(testing_router):
    spec = spec_with(airlock.DeclaredOutput("a.txt"), airlock.DeclaredOutput("big.txt"),
                     files_out=airlock.TransferLimits(3, 100, 1))
    sandbox = sandbox_for(testing_router, spec, "tally-order")
    sandbox.write_file("a.txt", b"1", working_directory=WORK)
    sandbox.write_file("big.txt", b"1234", working_directory=WORK)
    with pytest.raises(airlock.SandboxTransferCapExceeded) as refused:
        airlock.collect_outputs(sandbox, spec, airlock.OutputSink(Recorder()))
    # big.txt breaks both the per-file cap and the count; the per-file cap is named.
    assert refused.value.cap == "files_out.max_bytes_per_file"
    assert (refused.value.file, refused.value.limit, refused.value.size) == ("big.txt", 3, 4)


def test_a_missing_optional_output_is_skipped_and_a_required_one_refused(testing_router):
    spec = spec_with(airlock.DeclaredOutput("maybe.txt", required=False),
                     airlock.DeclaredOutput("here.txt"))
    sandbox = sandbox_for(testing_router, spec, "optional")
    sandbox.write_file("here.txt", b"x", working_directory=WORK)
    landed = airlock.collect_outputs(sandbox, spec, airlock.OutputSink(Recorder()))
    assert [a.name for a in landed] == ["here.txt"]
    with pytest.raises(airlock.SandboxOutputMissing, match="must.txt"):
        airlock.collect_outputs(sandbox, spec_with(airlock.DeclaredOutput("must.txt")),
                                airlock.OutputSink(Recorder()))


def test_a_directory_output_is_not_regular(testing_router):
    spec = spec_with(airlock.DeclaredOutput("folder"))
    sandbox = sandbox_for(testing_router, spec, "not-regular")
    sandbox.write_file("folder/inner.txt", b"x", working_directory=WORK)
    with pytest.raises(airlock.SandboxOutputNotRegular, match="directory"):
        airlock.collect_outputs(sandbox, spec, airlock.OutputSink(Recorder()))


def test_a_sink_refusing_mid_way_leaves_the_earlier_deliveries_standing(testing_router):
    spec = spec_with(*(airlock.DeclaredOutput(f"{n}.txt") for n in ("one", "two", "three")))
    sandbox = sandbox_for(testing_router, spec, "partial")
    for n in ("one", "two", "three"):
        sandbox.write_file(f"{n}.txt", n.encode(), working_directory=WORK)
    recorder = Recorder(refuse_at=1)
    with pytest.raises(RuntimeError, match="quota: two.txt"):
        airlock.collect_outputs(sandbox, spec, airlock.OutputSink(recorder))
    assert [(a.name, a.content) for a in recorder.delivered] == [("one.txt", b"one")]


# ---- §4.3 error translation (and §12.3: every OSError is unreachable) -------------------------


def test_a_file_standing_where_a_directory_was_expected_is_unreachable_not_unconfined(
        testing_router):
    spec = spec_with(airlock.DeclaredOutput("plain.txt/deeper.txt"))
    sandbox = sandbox_for(testing_router, spec, "translate")
    sandbox.write_file("plain.txt", b"x", working_directory=WORK)
    with pytest.raises(airlock.SandboxOutputUnreachable) as refused:
        airlock.collect_outputs(sandbox, spec, airlock.OutputSink(Recorder()))
    assert not isinstance(refused.value, airlock.SandboxOutputNotConfined)
    assert isinstance(refused.value, airlock.SandboxOutputError)
    assert not isinstance(refused.value, ValueError)


# ---- §1.3 / §4.1 collisions and the sink-required refusal -------------------------------------


def test_a_collision_names_both_declared_paths_and_says_how_they_match(testing_router):
    spec = spec_with(airlock.DeclaredOutput("run-1/report.txt", name="report.txt"),
                     airlock.DeclaredOutput("run-2/report.txt", name="report.txt"))
    sandbox = sandbox_for(testing_router, spec, "collision")
    with pytest.raises(airlock.SandboxArtifactNameCollision) as identical:
        airlock.collect_outputs(sandbox, spec, airlock.OutputSink(Recorder()))
    message = str(identical.value)
    assert '"run-1/report.txt"' in message and '"run-2/report.txt"' in message
    assert "both are delivered as" in message and identical.value.check == "identical"

    by_case = spec_with(airlock.DeclaredOutput("Report.txt"), airlock.DeclaredOutput("report.txt"))
    with pytest.raises(airlock.SandboxArtifactNameCollision) as differ:
        airlock.collect_outputs(sandbox, by_case, airlock.OutputSink(Recorder()))
    assert '"Report.txt" and "report.txt"' in str(differ.value)
    assert "differ only by case or Unicode form" in str(differ.value)
    assert differ.value.check == "case-or-unicode-form"


def test_the_sink_required_refusal_names_the_landing_output(testing_router):
    spec = spec_with(airlock.DeclaredOutput("report.txt"),
                     airlock.DeclaredOutput("parsed.json", OutputDisposition.CONSUME))
    sandbox = sandbox_for(testing_router, spec, "no-sink")
    with pytest.raises(airlock.SandboxOutputSinkRequired) as refused:
        airlock.collect_outputs(sandbox, spec)
    assert '"report.txt"' in str(refused.value)
    assert "parsed.json" not in str(refused.value)


def test_missing_sink_refusal_is_returned_and_bounded():
    many = [airlock.DeclaredOutput(f"f{i}.txt") for i in range(8)]
    spec = spec_with(*many)
    refusal = airlock.missing_sink_refusal(spec, airlock.landing_outputs(spec),
                                           asked_by="my host")
    assert isinstance(refusal, airlock.SandboxOutputSinkRequired)
    assert refusal.type == "SandboxOutputSinkRequired"
    assert '"f4.txt" and 3 more' in str(refusal) and "f5.txt" not in str(refusal)
    assert "my host has no output sink" in str(refusal)
    late = airlock.missing_sink_refusal(spec_with(named_at_call_time=True), [], asked_by="x")
    assert "outputs named at call time" in str(late)
    with pytest.raises(TypeError):
        airlock.missing_sink_refusal(spec, [], "positional asked_by")


def test_landing_outputs_and_spec_lands_artifacts():
    land = airlock.DeclaredOutput("a.txt")
    consume = airlock.DeclaredOutput("b.json", OutputDisposition.CONSUME)
    spec = spec_with(land, consume)
    assert airlock.landing_outputs(spec) == (land,)
    assert airlock.spec_lands_artifacts(spec)
    assert not airlock.spec_lands_artifacts(spec_with(consume))
    assert airlock.spec_lands_artifacts(spec_with(named_at_call_time=True))
    assert airlock.landing_outputs(spec_with(named_at_call_time=True)) == ()


# ---- §4.4 the name invariant, and names that are not text -------------------------------------


def rule_of(name):
    try:
        airlock.validate_artifact_name(name)
    except airlock.SandboxArtifactNameInvalid as invalid:
        return invalid.check
    return None


def test_validate_artifact_name_checks_the_rules_in_the_reference_order():
    assert [rule_of(n) for n in ["", "a\\b", "/a", "a/../b", "a//b", "a\x1fb", "é" * 128]] == [
        "empty", "backslash", "absolute", "parent-segment", "empty-segment",
        "control-character", "length"]
    assert rule_of("/a\\b") == "backslash"       # a backslash outranks a leading slash
    assert rule_of("/a\udcff") == "absolute"     # and a leading slash outranks the encoding
    assert rule_of("del\x7f") is None            # DEL is not refused
    assert airlock.MAX_ARTIFACT_NAME_BYTES == 255
    assert rule_of("a" * 255) is None and rule_of("a" * 256) == "length"


LONE_SURROGATE = "a\udcff"


@pytest.mark.parametrize("cross", [
    airlock.validate_artifact_name,
    airlock.nfc_compose,
    airlock.artifact_collision_key,
    airlock.portable_name,
    lambda name: airlock.DeclaredOutput(name),
    lambda name: airlock.DeclaredOutput("ok.txt", name=name),
    lambda name: airlock.DeclaredOutput(path=name, disposition="consume"),
    lambda name: airlock.Artifact(name, b"", "k"),
], ids=["validate", "nfc_compose", "collision_key", "portable_name", "DeclaredOutput.path",
        "DeclaredOutput.name", "DeclaredOutput.consume", "Artifact.name"])
def test_a_lone_surrogate_name_is_an_invalid_name_naming_the_utf8_rule(cross):
    with pytest.raises(airlock.SandboxArtifactNameInvalid) as refused:
        cross(LONE_SURROGATE)
    assert refused.value.check == "utf8"
    assert "not encodable as UTF-8" in str(refused.value)
    assert not isinstance(refused.value, (TypeError, UnicodeError))


def test_a_lone_surrogate_call_time_output_never_reaches_the_sandbox(testing_router):
    spec = spec_with(named_at_call_time=True)
    sandbox = sandbox_for(testing_router, spec, "surrogate")
    with pytest.raises(airlock.SandboxArtifactNameInvalid, match="UTF-8"):
        airlock.collect_outputs(sandbox, spec, airlock.OutputSink(Recorder()),
                                outputs=[airlock.DeclaredOutput("fine.txt", name=LONE_SURROGATE)])


def test_a_name_that_is_not_a_str_is_a_type_error():
    for cross in (airlock.validate_artifact_name, airlock.portable_name,
                  lambda name: airlock.DeclaredOutput(name)):
        with pytest.raises(TypeError):
            cross(b"bytes.txt")


# ---- §4.5 portable_name -----------------------------------------------------------------------


def test_portable_name_rewrites_only_microsofts_documented_set():
    assert airlock.portable_name('a<b>:"|?*.txt') == "a_b______.txt"
    assert airlock.portable_name("dir/CON.tar.gz") == "dir/CON_.tar.gz"
    assert airlock.portable_name("lpt\u00b9.log") == "lpt\u00b9_.log"
    assert airlock.portable_name("COM\u2074") == "COM\u2074"
    assert airlock.portable_name("name. ") == "name"
    assert airlock.portable_name("a//b") == "a/_/b"


# ---- §4.6 the file-system sink ----------------------------------------------------------------


def test_the_file_system_sink_lands_with_parents_overwrites_and_the_default_display(tmp_path):
    sink = airlock.make_file_system_sink(tmp_path)  # any path-like root
    landed = sink.deliver(airlock.Artifact("deep/er/report.txt", b"first", "k"))
    assert landed.display == "deep/er/report.txt (5 bytes)"
    assert landed.handle == str(tmp_path / "deep/er/report.txt")
    sink.deliver(airlock.Artifact("deep/er/report.txt", b"2nd", "k"))
    assert (tmp_path / "deep/er/report.txt").read_bytes() == b"2nd"


def test_a_display_callable_gets_the_artifact_and_its_destination(tmp_path):
    seen = []

    def display(artifact, destination):
        seen.append(destination)
        return f"saved {artifact.name}"

    sink = airlock.make_file_system_sink(str(tmp_path), display=display)
    assert sink.deliver(airlock.Artifact("a.txt", b"x", "k")).display == "saved a.txt"
    assert seen == [pathlib.Path(tmp_path / "a.txt")]
    silly = airlock.make_file_system_sink(str(tmp_path), display=lambda a, d: 42)
    with pytest.raises(TypeError, match="display must return a str"):
        silly.deliver(airlock.Artifact("b.txt", b"x", "k"))


@pytest.mark.parametrize("name", ["../x", "../../etc/passwd", "/etc/passwd", "a/../../x", ".."])
def test_a_host_built_artifact_resolving_outside_the_root_is_not_confined(tmp_path, name):
    root = tmp_path / "root"
    root.mkdir()
    sink = airlock.make_file_system_sink(root)
    with pytest.raises(airlock.SandboxLandingNotConfined) as refused:
        sink.deliver(airlock.Artifact(name, b"escape", "k"))
    # The message names neither the root nor where the artifact would have gone.
    assert str(tmp_path) not in str(refused.value)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["root"]


def test_a_misspelled_name_inside_the_root_is_still_an_invalid_name(tmp_path):
    sink = airlock.make_file_system_sink(tmp_path)
    for name in ["a/../b", "a//b", "./x", ""]:
        with pytest.raises(airlock.SandboxArtifactNameInvalid):
            sink.deliver(airlock.Artifact(name, b"x", "k"))
    assert list(tmp_path.iterdir()) == []
