"""The guest-path helpers (reference §2.1, §2.2, §4.8), through the Python module.

A stat here is any callable from an absolute guest path to a SandboxEntry or None: a fake
guest described by a dict, or a real sandbox's own stat."""

import pytest

import airlock
from airlock import EntryKind

WORK = "/maf-sandbox/work"


class FakeGuest:
    """What an unconfined, no-follow stat sees, with every call recorded."""

    def __init__(self, kinds):
        self.kinds = kinds
        self.asked = []

    def __call__(self, path):
        self.asked.append(path)
        kind = self.kinds.get(path)
        return None if kind is None else airlock.SandboxEntry(path, kind, None)


def directories(*paths):
    return {path: EntryKind.DIRECTORY for path in paths}


def test_confine_guest_path_resolves_inside_and_refuses_outside():
    assert airlock.confine_guest_path("a/../b.txt", "/work") == "/work/b.txt"
    assert airlock.confine_guest_path("/work/x", "/work/") == "/work/x"
    assert airlock.confine_guest_path(".", "/work") == "/work"
    with pytest.raises(ValueError, match="outside"):
        airlock.confine_guest_path("../etc/passwd", "/work")
    with pytest.raises(airlock.ConfinementError, match="backslash"):
        airlock.confine_guest_path("a\\b", "/work")
    with pytest.raises(ValueError):
        airlock.confine_guest_path("/work-outside/x", "/work")


def test_guest_path_relative_to_avoids_the_sibling_prefix_trap():
    assert airlock.guest_path_relative_to("/work-outside", "/work") is None
    assert airlock.guest_path_relative_to("/work/", "/work") == ""
    assert airlock.guest_path_relative_to("/work/a/./b", "/work") == "a/b"
    assert airlock.guest_path_relative_to("/other", "/work") is None


def test_guest_directory_chain_starts_above_the_working_directory():
    assert airlock.guest_directory_chain("/a/b/c/d", "/a/b") == ("/a", "/a/b", "/a/b/c", "/a/b/c/d")
    assert airlock.guest_directory_chain("/a/b", "/a/b/") == ("/a", "/a/b")
    # "/" itself is never in the chain.
    assert airlock.guest_directory_chain("/x", "/") == ("/x",)


def test_a_link_in_a_parent_is_refused_as_confinement():
    guest = FakeGuest({**directories("/maf-sandbox", WORK), WORK + "/out": EntryKind.SYMLINK})
    with pytest.raises(airlock.ConfinementError) as refused:
        airlock.refuse_symlinked_parents(guest, WORK + "/out/report.txt", WORK)
    assert isinstance(refused.value, ValueError)
    assert WORK + "/out" in str(refused.value)


def test_a_link_above_the_working_directory_is_refused_too():
    guest = FakeGuest({"/maf-sandbox": EntryKind.SYMLINK, WORK: EntryKind.DIRECTORY})
    with pytest.raises(ValueError):
        airlock.refuse_symlinked_parents(guest, WORK + "/a.txt", WORK)


def test_a_file_standing_as_a_parent_is_not_a_directory_not_an_escape():
    guest = FakeGuest({**directories("/maf-sandbox", WORK), WORK + "/plain": EntryKind.FILE})
    with pytest.raises(NotADirectoryError) as refused:
        airlock.refuse_symlinked_parents(guest, WORK + "/plain/deeper.txt", WORK)
    assert not isinstance(refused.value, ValueError)


def test_the_walk_stops_at_the_first_missing_component():
    guest = FakeGuest(directories("/maf-sandbox"))
    airlock.refuse_symlinked_parents(guest, WORK + "/a/b/c.txt", WORK)
    assert guest.asked == ["/maf-sandbox", WORK]


def test_include_self_walks_the_path_itself():
    guest = FakeGuest({**directories("/maf-sandbox", WORK), WORK + "/listed": EntryKind.SYMLINK})
    airlock.refuse_symlinked_parents(guest, WORK + "/listed", WORK)  # only its parents
    with pytest.raises(airlock.ConfinementError):
        airlock.refuse_symlinked_parents(guest, WORK + "/listed", WORK, include_self=True)
    with pytest.raises(TypeError):
        airlock.refuse_symlinked_parents(guest, WORK + "/listed", WORK, True)  # keyword-only


def test_confine_guest_write_path_refuses_the_directory_itself_and_a_linked_leaf():
    guest = FakeGuest({**directories("/maf-sandbox", WORK), WORK + "/link.txt": EntryKind.SYMLINK})
    assert airlock.confine_guest_write_path(guest, "new/file.txt", WORK) == WORK + "/new/file.txt"
    with pytest.raises(airlock.ConfinementError, match="working directory itself"):
        airlock.confine_guest_write_path(guest, ".", WORK)
    with pytest.raises(airlock.ConfinementError, match="link"):
        airlock.confine_guest_write_path(guest, "link.txt", WORK)
    with pytest.raises(ValueError):
        airlock.confine_guest_write_path(guest, "../escape.txt", WORK)


def test_a_stat_answering_something_else_is_a_type_error_and_its_own_error_propagates():
    with pytest.raises(TypeError, match="SandboxEntry or None"):
        airlock.refuse_symlinked_parents(lambda path: "directory", WORK + "/a", WORK)

    class Unreachable(Exception):
        pass

    def failing(path):
        raise Unreachable(path)

    with pytest.raises(Unreachable, match="/maf-sandbox"):
        airlock.refuse_symlinked_parents(failing, WORK + "/a", WORK)
    with pytest.raises(TypeError, match="callable"):
        airlock.refuse_symlinked_parents(None, WORK + "/a", WORK)


def test_a_real_sandboxs_stat_drives_the_walk(testing_router):
    spec = airlock.SandboxSpec(kind="paths", requires={"exec", "files_in"})
    sandbox = testing_router.acquire(airlock.SandboxKey("s", "paths-walk", "a"), spec)
    sandbox.write_file("plain", b"x", working_directory=WORK)

    def stat(path):
        return sandbox.stat_file(path, working_directory="/")

    airlock.refuse_symlinked_parents(stat, WORK + "/plain", WORK)
    with pytest.raises(NotADirectoryError):
        airlock.refuse_symlinked_parents(stat, WORK + "/plain/deeper", WORK)
