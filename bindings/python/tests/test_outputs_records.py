"""The records of reference §1.2 as the reference constructs them (positional field order,
defaults, the construction checks), and the windows-family spec of issue #18."""

import pytest

import airlock
from airlock import EntryKind, OsFamily, OutputDisposition

WINDOWS_BACKEND = {
    "type": "testing",
    "isolation": "container",
    "capabilities": ["exec", "files_in", "files_out"],
    "egress_modes": ["closed"],
    "os_families": ["windows"],
}


# ---- positional construction and defaults -----------------------------------------------------


def test_a_spec_takes_its_fields_positionally_in_the_reference_order():
    outputs = [airlock.DeclaredOutput("a.txt")]
    limits = airlock.TransferLimits(1, 2, 3)
    spec = airlock.SandboxSpec(
        "k", "img", "sha256:abc", ["pypi.org"], "/w", {"team": "a"}, {"exec", "files_out"},
        "container", outputs, limits, limits, True, {"app"}, "allowlist", "posix")
    assert (spec.kind, spec.image, spec.image_id, spec.egress_allow, spec.work_dir) == (
        "k", "img", "sha256:abc", ("pypi.org",), "/w")
    assert spec.labels == {"team": "a"} and spec.requires == {"exec", "files_out"}
    assert spec.min_isolation is airlock.Isolation.CONTAINER
    assert spec.declared_outputs == tuple(outputs)
    assert spec.files_in == limits and spec.files_out == limits
    assert spec.outputs_named_at_call_time is True
    assert spec.identities == {"app"} and spec.egress == "allowlist"
    assert spec.requires_os_family is OsFamily.POSIX
    assert airlock.SandboxSpec("k", "img") == airlock.SandboxSpec(kind="k", image="img")


def test_a_spec_refuses_what_a_dataclass_would():
    with pytest.raises(TypeError, match="kind"):
        airlock.SandboxSpec()
    with pytest.raises(TypeError, match="multiple values for argument 'image'"):
        airlock.SandboxSpec("k", "img", image="other")
    with pytest.raises(TypeError, match="at most 16"):
        airlock.SandboxSpec(*(["k"] + [None] * 16))


def test_egress_allow_without_an_allowlist_names_the_hosts():
    with pytest.raises(ValueError, match="a.example, b.example"):
        airlock.SandboxSpec("k", None, None, ["a.example", "b.example"])


def test_declared_output_fields_and_defaults_are_positional():
    output = airlock.DeclaredOutput("out/r.txt", "consume", "text/plain", False, "r.txt")
    assert (output.path, output.disposition, output.media_type, output.required, output.name) == (
        "out/r.txt", OutputDisposition.CONSUME, "text/plain", False, "r.txt")
    plain = airlock.DeclaredOutput("a.txt")
    assert (plain.disposition, plain.media_type, plain.required, plain.name) == (
        OutputDisposition.LAND, None, True, None)
    assert plain.delivered_name == "a.txt"
    assert {plain, airlock.DeclaredOutput("a.txt")} == {plain}  # frozen records hash by value


def test_a_sandbox_entry_is_built_from_its_three_required_fields():
    entry = airlock.SandboxEntry("a/b.txt", "file", 12)
    assert (entry.path, entry.kind, entry.size_bytes) == ("a/b.txt", EntryKind.FILE, 12)
    link = airlock.SandboxEntry("l", EntryKind.SYMLINK, None)
    assert link.size_bytes is None
    assert entry == airlock.SandboxEntry("a/b.txt", EntryKind.FILE, 12)
    assert hash(entry) == hash(airlock.SandboxEntry("a/b.txt", "file", 12))
    with pytest.raises(TypeError):
        airlock.SandboxEntry("a", "file")  # size_bytes is required: None is its "unknown"
    with pytest.raises(ValueError, match="allowed"):
        airlock.SandboxEntry("a", "pipe", None)
    with pytest.raises(TypeError):
        airlock.SandboxEntry("a", "file", 1.5)


def test_exec_result_defaults_follow_the_reference():
    result = airlock.ExecResult("out")
    assert (result.stdout, result.stderr, result.exit_code) == ("out", "", 0)
    raw = airlock.ExecResult(b"\xff", stderr="err", exit_code=7)
    assert raw.stdout_bytes == b"\xff" and raw.stderr == "err" and raw.exit_code == 7


def test_landed_artifacts_and_artifacts_compare_by_value():
    landed = airlock.LandedArtifact("a.txt", "a.txt (1 bytes)")
    assert landed.handle is None
    assert landed == airlock.LandedArtifact("a.txt", "a.txt (1 bytes)", None)
    assert landed != airlock.LandedArtifact("a.txt", "a.txt (1 bytes)", "sas://token")
    artifact = airlock.Artifact("a.txt", b"x", "k", "text/plain")
    assert artifact == airlock.Artifact("a.txt", b"x", "k", "text/plain")
    assert len({artifact, airlock.Artifact("a.txt", b"x", "k", "text/plain")}) == 1


def test_a_reclaim_failure_is_built_from_its_four_fields():
    key = airlock.SandboxKey("s", "t", "a")
    failure = airlock.ReclaimFailure("execute_code", key, "/w/abc123", "rm exited 1")
    assert (failure.tool, failure.key, failure.path, failure.reason) == (
        "execute_code", key, "/w/abc123", "rm exited 1")
    assert airlock.ReclaimFailure("t", ("s", "t", "a"), "/p", "r").key == key


def test_sandbox_limits_default_to_the_default_transfer_limits():
    assert airlock.SandboxLimits() == airlock.DEFAULT_SANDBOX_LIMITS
    assert airlock.SandboxLimits().files_in == airlock.DEFAULT_TRANSFER_LIMITS
    assert hash(airlock.SandboxLimits()) == hash(airlock.DEFAULT_SANDBOX_LIMITS)


# ---- TransferLimits: a non-int leg is a TypeError ---------------------------------------------


@pytest.mark.parametrize("leg", [1.0, "1", True, False, None, [1]])
def test_a_transfer_limit_leg_that_is_not_an_int_is_a_type_error(leg):
    for legs in ((leg, 1, 1), (1, leg, 1), (1, 1, leg)):
        with pytest.raises(TypeError, match="expected an int"):
            airlock.TransferLimits(*legs)


def test_a_transfer_limit_leg_out_of_range_is_a_value_error():
    with pytest.raises(ValueError, match="max_total_bytes"):
        airlock.TransferLimits(1, -1, 1)
    with pytest.raises(ValueError, match="max_bytes_per_file"):
        airlock.TransferLimits(2 ** 64, 1, 1)
    assert airlock.TransferLimits(2 ** 64 - 1, 0, 0).max_bytes_per_file == 2 ** 64 - 1


def test_isolation_process_stays_refused():
    with pytest.raises(ValueError):
        airlock.Isolation("process")
    with pytest.raises(ValueError):
        airlock.SandboxSpec("k", min_isolation="process")


# ---- a windows-family spec reaches the router's os-family check -------------------------------


@pytest.mark.parametrize("work_dir", ["C:/work", "D:\\work"])
def test_a_windows_spec_is_refused_by_the_router_for_its_os_family(testing_router, work_dir):
    spec = airlock.SandboxSpec(kind="k", work_dir=work_dir, requires_os_family="windows")
    assert spec.work_dir == work_dir  # kept exactly as written
    with pytest.raises(airlock.SandboxOsFamilyNotSupported) as refused:
        testing_router.ensure_can_serve(spec)
    assert isinstance(refused.value, RuntimeError) and refused.value.check == "os-family"
    with pytest.raises(airlock.SandboxOsFamilyNotSupported):
        testing_router.acquire(airlock.SandboxKey("s", "windows", "a"), spec)


def test_a_windows_spec_survives_every_round_trip():
    spec = airlock.SandboxSpec(kind="k", work_dir="D:\\work", requires_os_family="windows")
    assert airlock.SandboxSpec.from_dict(spec.to_dict()) == spec
    assert spec.to_dict()["work_dir"] == "D:\\work"
    assert spec.replace(image="img").work_dir == "D:\\work"
    assert "D:" in repr(spec)


def test_a_windows_work_dir_needs_the_windows_family_and_an_absolute_drive_path():
    with pytest.raises(ValueError, match="requires_os_family"):
        airlock.SandboxSpec(kind="k", work_dir="C:/work")
    with pytest.raises(ValueError):
        airlock.SandboxSpec(kind="k", work_dir="C:/work", requires_os_family="posix")
    for bad in ["work", "C:work", "C:/w\x00x"]:
        with pytest.raises(ValueError, match="work_dir"):
            airlock.SandboxSpec(kind="k", work_dir=bad, requires_os_family="windows")
    windows = airlock.SandboxSpec(kind="k", requires_os_family="windows")
    assert windows.work_dir == "/maf-sandbox/work"  # the default keeps the POSIX rules


def test_a_backend_declaring_windows_gets_the_spec_and_its_posix_file_plane_refuses_cleanly():
    router = airlock.SandboxRouter({"backends": [WINDOWS_BACKEND], "min_isolation": "container"})
    spec = airlock.SandboxSpec(kind="k", work_dir="C:/work", requires_os_family="windows",
                               requires={"exec", "files_in", "files_out"},
                               declared_outputs=[airlock.DeclaredOutput("a.txt")])
    sandbox = router.acquire(airlock.SandboxKey("s", "windows-served", "a"), spec)
    # A POSIX file plane handed a drive path refuses it as bad input — never a crash.
    with pytest.raises(ValueError, match="working_directory"):
        sandbox.write_file("a.txt", b"x", working_directory=spec.work_dir)
    with pytest.raises(ValueError):
        airlock.collect_outputs(sandbox, spec, airlock.OutputSink(
            lambda a: airlock.LandedArtifact(a.name, a.name)))
