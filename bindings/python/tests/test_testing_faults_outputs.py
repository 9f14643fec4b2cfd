"""Faults of the `testing` backend driving collect_outputs: a stat that lies about a size or
cannot give one, a read that hangs, entries that are not files — each caught where airlock says
it is caught."""

import threading
import time

import pytest

import airlock
import airlock.testing
from airlock import EntryKind

WORK = "/maf-sandbox/work"
OUT_CAPS = {"exec", "files_in", "files_out"}


def landing_spec(*paths, files_out=None):
    options = {}
    if files_out is not None:
        options["files_out"] = files_out
    return airlock.SandboxSpec(kind="k", requires=OUT_CAPS,
                               declared_outputs=[airlock.DeclaredOutput(p) for p in paths],
                               **options)


class Sink:
    def __init__(self):
        self.delivered = []

    def deliver(self, artifact):
        self.delivered.append((artifact.name, artifact.content))
        return airlock.LandedArtifact(artifact.name, artifact.name + " landed")

    def sink(self):
        return airlock.OutputSink(self.deliver)


@pytest.fixture
def sandbox(testing_router, request):
    key = airlock.SandboxKey("faults", request.node.name, "outputs")
    acquired = testing_router.acquire(key, landing_spec("a.txt"))
    assert isinstance(acquired, airlock.testing.InProcessSandbox)
    return acquired


def test_a_stat_smaller_than_the_file_is_caught_when_the_bytes_are_counted(sandbox):
    sandbox.write_file("a.txt", b"x" * 100, working_directory=WORK)
    sandbox.misreport_size(WORK + "/a.txt", 10)
    sink = Sink()
    with pytest.raises(airlock.SandboxTransferCapExceeded) as refused:
        airlock.collect_outputs(sandbox, landing_spec("a.txt"), sink.sink())
    assert refused.value.limit == 10, "the read must be capped at the size the stat gave"
    assert sink.delivered == [], "nothing lands from a collection that failed"


def test_an_unknown_size_fails_closed_before_any_read(sandbox):
    sandbox.write_file("a.txt", b"fine", working_directory=WORK)
    sandbox.misreport_size(WORK + "/a.txt", None)
    sandbox.hang_reads(WORK + "/a.txt", bound=30)  # a read would be caught hanging
    started = time.monotonic()
    with pytest.raises(airlock.SandboxOutputSizeUnknown):
        airlock.collect_outputs(sandbox, landing_spec("a.txt"), Sink().sink())
    assert time.monotonic() - started < 10, "the collection read a file whose size it lacked"
    sandbox.release_reads()


def test_a_stat_over_the_cap_is_refused_at_the_stat(sandbox):
    sandbox.write_file("a.txt", b"tiny", working_directory=WORK)
    sandbox.misreport_size(WORK + "/a.txt", 10 * 1024 * 1024)
    with pytest.raises(airlock.SandboxTransferCapExceeded) as refused:
        airlock.collect_outputs(sandbox, landing_spec("a.txt"), Sink().sink())
    assert refused.value.check == "files_out.max_bytes_per_file"
    sandbox.report_true_sizes()
    sink = Sink()
    airlock.collect_outputs(sandbox, landing_spec("a.txt"), sink.sink())
    assert sink.delivered == [("a.txt", b"tiny")]


def test_a_hung_read_is_given_up_at_its_bound_as_unreachable(sandbox):
    sandbox.write_file("a.txt", b"slow", working_directory=WORK)
    sandbox.hang_reads(WORK + "/a.txt", bound=0.3)
    started = time.monotonic()
    with pytest.raises(airlock.SandboxOutputUnreachable) as refused:
        airlock.collect_outputs(sandbox, landing_spec("a.txt"), Sink().sink())
    assert time.monotonic() - started >= 0.3
    assert isinstance(refused.value, airlock.SandboxOutputError)


def test_a_hung_read_released_from_another_thread_lands(sandbox):
    sandbox.write_file("a.txt", b"at last", working_directory=WORK)
    sandbox.hang_reads(WORK + "/a.txt", bound=30)
    sink = Sink()
    outcome = {}

    def collect():
        try:
            outcome["landed"] = airlock.collect_outputs(sandbox, landing_spec("a.txt"),
                                                        sink.sink())
        except Exception as error:  # noqa: BLE001 — the assertion below reports it
            outcome["error"] = error

    collector = threading.Thread(target=collect)
    collector.start()
    deadline = time.monotonic() + 10
    while sandbox.hanging_reads == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sandbox.hanging_reads == 1, "the read never started hanging"
    assert collector.is_alive() and sink.delivered == []
    sandbox.release_reads()
    collector.join(10)
    assert not collector.is_alive()
    assert "error" not in outcome, outcome
    assert [a.display for a in outcome["landed"]] == ["a.txt landed"]
    assert sink.delivered == [("a.txt", b"at last")]


@pytest.mark.parametrize("kind", [EntryKind.SYMLINK, EntryKind.DIRECTORY, EntryKind.OTHER])
def test_a_seeded_entry_that_is_not_a_file_is_never_delivered(sandbox, kind):
    sandbox.seed(WORK + "/a.txt", kind)
    assert sandbox.kind_of(WORK + "/a.txt") is kind
    sink = Sink()
    with pytest.raises(airlock.SandboxOutputNotRegular):
        airlock.collect_outputs(sandbox, landing_spec("a.txt"), sink.sink())
    assert sink.delivered == []


def test_seeds_plant_files_links_and_directories_the_sandbox_then_serves(sandbox):
    sandbox.seed(WORK + "/text.txt", "naïve")
    sandbox.seed(WORK + "/blob.bin", b"\x00\xff")
    sandbox.seed(WORK + "/sub", EntryKind.DIRECTORY)
    sandbox.seed(WORK + "/link", EntryKind.SYMLINK, target="/etc/passwd")
    assert sandbox.contents(WORK + "/text.txt") == "naïve".encode()
    assert sandbox.read_file("blob.bin", working_directory=WORK) == b"\x00\xff"
    listed = {e.path: e.kind for e in sandbox.list_dir(".", working_directory=WORK)}
    assert listed["sub"] is EntryKind.DIRECTORY and listed["link"] is EntryKind.SYMLINK
    # A seeded link is a link to every plane: never read, never walked through.
    with pytest.raises(OSError):
        sandbox.read_file("link", working_directory=WORK)
    with pytest.raises(ValueError):
        sandbox.stat_file("link/passwd", working_directory=WORK)
    assert sandbox.exec(["test", "-L", WORK + "/link"], working_directory=WORK).exit_code == 0
    with pytest.raises(ValueError, match="absolute"):
        sandbox.seed("relative.txt", "x")
    with pytest.raises(ValueError, match="target"):
        sandbox.seed(WORK + "/f", "x", target="/elsewhere")


TESTING_BACKEND = {"type": "testing", "isolation": "container", "egress_modes": ["closed"],
                   "capabilities": sorted(OUT_CAPS)}


def test_faults_come_from_the_router_document_too():
    router = airlock.SandboxRouter({"backends": [dict(
        TESTING_BACKEND,
        stat_sizes={WORK + "/a.txt": None},
        seed_files={WORK + "/a.txt": "seeded", WORK + "/l": {"kind": "symlink", "target": "/"}})],
        "min_isolation": "container"})
    sandbox = router.acquire(airlock.SandboxKey("s", "t", "a"), landing_spec("a.txt"))
    assert sandbox.read_file("a.txt", working_directory=WORK) == b"seeded"
    assert sandbox.kind_of(WORK + "/l") is EntryKind.SYMLINK
    with pytest.raises(airlock.SandboxOutputSizeUnknown):
        airlock.collect_outputs(sandbox, landing_spec("a.txt"), Sink().sink())
    with pytest.raises(ValueError, match="stat_sizes"):
        airlock.SandboxRouter({"backends": [dict(TESTING_BACKEND, stat_sizes={"a.txt": 1})],
                               "min_isolation": "container"})
