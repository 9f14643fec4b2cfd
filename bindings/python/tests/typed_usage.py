"""A host's use of airlock, checked by `mypy --strict` against the installed stubs
(scripts/test.d/55-python.sh); never run, never collected by pytest. Every line type-checks
only if the stubs give these calls the types a host relies on."""

import asyncio
import datetime

import airlock
import airlock.aio


def quick_start() -> str:
    with airlock.Sandbox.create("linux", min_isolation=airlock.Isolation.CONTAINER) as sandbox:
        result: airlock.ExecResult = sandbox.exec(["echo", "hi"], timeout=30)
        sandbox.write_file("notes.txt", "text")
        content: bytes = sandbox.read_file("notes.txt")
        entry = sandbox.stat_file("notes.txt")
        size: int | None = entry.size_bytes if entry is not None else None
        kind: airlock.EntryKind | None = entry.kind if entry is not None else None
        work_dir: str | None = sandbox.work_dir
        print(content, size, kind, work_dir)
        return result.stdout


def full_api(config: dict[str, object]) -> int:
    router = airlock.SandboxRouter(config)
    spec = airlock.SandboxSpec(kind="demo", image="host", work_dir="/srv/work")
    key = airlock.SandboxKey("tenant", "thread-1", "demo")
    floor: airlock.Isolation = router.min_isolation
    with airlock.scope(router, "tenant", "thread-1") as disposal:
        with router.acquire(key, spec) as sandbox:
            sandbox.exec("ls", working_directory=spec.work_dir, stop=airlock.StopSource())
            went: bool = sandbox.dispose()
            print(floor, went)
    disposed: int = disposal.disposed
    return disposed


def refused() -> str | None:
    try:
        airlock.Sandbox.create()
    except airlock.SandboxBackendNotPermitted as error:
        reason: str = error.message
        return reason
    return None


def snapshots(router: airlock.SandboxRouter) -> int:
    key = airlock.SandboxKey("tenant", "thread-1", "agent")
    spec = airlock.SandboxSpec(kind="k")
    record: airlock.SnapshotRecord = router.snapshot(key, spec, timeout=10)
    content: airlock.SnapshotContent = record.content
    when: datetime.datetime = record.created_at
    resumed: airlock.Sandbox = router.resume(key, spec, record.id)
    again: airlock.SnapshotRecord = resumed.snapshot()
    mine: list[airlock.SnapshotRecord] = router.list_snapshots("tenant", "thread-1")
    gone: bool = router.delete_snapshot(key, again)
    print(content, when.isoformat(), gone)
    return len(mine) + record.bytes


async def async_host(router: airlock.SandboxRouter) -> bytes:
    async with airlock.aio.AsyncSandbox.create(router=router) as sandbox:
        await sandbox.write_file("a.txt", b"bytes")
        result = await sandbox.exec(["cat", "a.txt"])
        assert result.exit_code == 0
    wrapped = airlock.aio.AsyncSandboxRouter(router)
    async with airlock.aio.scope(wrapped, "tenant", "thread-2") as disposal:
        async with await wrapped.acquire(("tenant", "thread-2", "k"), {"kind": "k"}) as other:
            data: bytes = await other.read_file("a.txt")
    print(disposal.disposed)
    return data


def main() -> None:
    print(quick_start(), full_api({"backends": []}), refused())
    asyncio.run(async_host(airlock.SandboxRouter({"backends": []})))
