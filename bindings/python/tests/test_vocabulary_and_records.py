"""The vocabulary and the records, as the seeds spell them."""

import pytest

import airlock
from airlock import Capability, Egress, Identity, Isolation


def test_enum_values_are_the_wire_strings():
    assert [m.value for m in Isolation] == [
        "none", "runtime", "os_process", "container", "hardened_container", "microvm", "vm"]
    assert str(Isolation.MICROVM) == "microvm"
    assert f"{Egress.ALLOWLIST}" == "allowlist"
    assert Capability("run_code") is Capability.RUN_CODE
    assert Egress.CLOSED == "closed"  # plain strings compare equal to members
    assert [m.value for m in Capability] == [
        "exec", "run_code", "host_tools", "files_in", "files_out", "files_list",
        "files_delete", "snapshot", "attached_identity"]


def test_process_is_refused_forever():
    with pytest.raises(ValueError):
        Isolation("process")
    with pytest.raises(AttributeError):
        Isolation.PROCESS  # noqa: B018
    with pytest.raises(airlock.InvalidArgument, match="allowed"):
        airlock.isolation_rank("process")


def test_ladder_order_is_data():
    assert airlock.isolation_rank(Isolation.NONE) == 0
    assert airlock.isolation_rank("vm") == 6
    assert airlock.meets_floor(Isolation.MICROVM, Isolation.CONTAINER)
    assert not airlock.meets_floor(Isolation.CONTAINER, "microvm")


def test_spec_defaults_follow_the_seeds():
    spec = airlock.SandboxSpec(kind="codeact")
    assert spec.egress is Egress.CLOSED
    assert spec.work_dir == "/maf-sandbox/work"
    assert spec.requires == airlock.DEFAULT_CAPABILITIES
    assert spec.files_in == airlock.DEFAULT_TRANSFER_LIMITS
    assert spec.files_in.max_bytes_per_file == 8 << 20
    assert spec.min_isolation is None
    assert spec.identities == frozenset()
    assert spec.declared_outputs == ()


def test_spec_keyword_construction_takes_members_and_records():
    spec = airlock.SandboxSpec(
        kind="k", image="host", egress=Egress.ALLOWLIST, egress_allow=["pypi.org"],
        requires={Capability.EXEC, Capability.FILES_OUT}, min_isolation=Isolation.CONTAINER,
        files_out=airlock.TransferLimits(1, 2, 3),
        declared_outputs=[airlock.DeclaredOutput("out/report.txt", name="report.txt")],
        labels={"team": "a"}, identities={Identity.APP})
    assert spec.egress_allow == ("pypi.org",)
    assert spec.requires == {Capability.EXEC, Capability.FILES_OUT}
    assert spec.min_isolation is Isolation.CONTAINER
    assert spec.files_out == airlock.TransferLimits(1, 2, 3)
    assert spec.declared_outputs[0].delivered_name == "report.txt"
    assert spec.labels == {"team": "a"}
    assert spec.egress_posture() == "allowlist:pypi.org"
    assert airlock.SandboxSpec.from_dict(spec.to_dict()) == spec


def test_host_list_without_allowlist_is_refused_naming_the_hosts():
    with pytest.raises(ValueError, match="example.invalid"):
        airlock.SandboxSpec(kind="k", egress_allow=["example.invalid"])


def test_bad_spec_fields_are_refused_by_name():
    with pytest.raises(airlock.InvalidArgument, match="SandboxSpec.nonsense"):
        airlock.SandboxSpec(kind="k", nonsense=1)
    with pytest.raises(airlock.InvalidArgument, match="allowed"):
        airlock.SandboxSpec(kind="k", egress="open")
    with pytest.raises(ValueError, match="kind"):
        airlock.SandboxSpec(kind="")
    with pytest.raises(ValueError, match="work_dir"):
        airlock.SandboxSpec(kind="k", work_dir="relative/dir")
    with pytest.raises(TypeError):
        airlock.SandboxSpec(kind="k", image=b"bytes")
    with pytest.raises(ValueError, match="max_files"):
        airlock.TransferLimits(1, 2, -3)


def test_records_are_read_only():
    spec = airlock.SandboxSpec(kind="k")
    with pytest.raises(AttributeError):
        spec.kind = "other"
    limits = airlock.TransferLimits(1, 2, 3)
    with pytest.raises(AttributeError):
        limits.max_files = 10
    key = airlock.SandboxKey("s", "t", "a")
    with pytest.raises(AttributeError):
        key.scope = "other"


def test_reprs_name_the_fields():
    assert repr(airlock.TransferLimits(1, 2, 3)) == \
        "TransferLimits(max_bytes_per_file=1, max_total_bytes=2, max_files=3)"
    assert "kind=\"k\"" in repr(airlock.SandboxSpec(kind="k"))
    assert repr(airlock.SandboxKey("s", "t", "a")) == \
        "SandboxKey(scope='s', thread_id='t', agent_dir='a')"
    landed = airlock.LandedArtifact("a.txt", "a.txt (3 bytes)", handle="https://secret?sig=1")
    assert "secret" not in repr(landed)


def test_within_compares_every_leg():
    ceiling = airlock.TransferLimits(10, 10, 10)
    assert airlock.TransferLimits(10, 10, 10).within(ceiling)
    assert not airlock.TransferLimits(10, 11, 10).within(ceiling)


def test_artifact_names_follow_the_narrow_invariant():
    airlock.validate_artifact_name("reports/q1.txt")
    for bad in ["", "/abs", "a/../b", "a//b", "back\\slash", "ctl\x01"]:
        with pytest.raises(airlock.SandboxArtifactNameInvalid):
            airlock.validate_artifact_name(bad)
    assert airlock.artifact_collision_key("Report.TXT") == airlock.artifact_collision_key("report.txt")
    assert airlock.portable_name("CON.txt") == "CON_.txt"
