"""Several OS processes writing one SQLite file at the same time lose nothing.

Each process has its own store (its own group-committing writer); they contend for the
file's write lock, which SQLite's ``busy_timeout`` and the store's retry of "database is
locked" must absorb. With ``busy_timeout_ms=0`` every contention surfaces as an error at
once, so the retry alone must absorb it. A writer killed with SIGKILL mid-way holds
nobody up, and leaves every one of its transitions whole or absent.
"""

import json
import signal
import sqlite3
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack, closing
from pathlib import Path
from typing import Any, Final

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task
from taskloom.engine.states import TaskState
from taskloom.persistence.sqlite import SqliteTaskStore
from taskloom.persistence.sqlite.schema import APPLICATION_ID, latest_version
from tests.helpers import checkout_env, eventually

pytestmark = pytest.mark.slow

ROOT: Final = Path(__file__).resolve().parents[2]
PROCESSES: Final = ("alpha", "beta", "gamma")
COUNT: Final = 300
SHARED: Final = 60
LIMIT_S: Final = 60.0


async def _drain(stream: Any, into: list[bytes]) -> None:
    into.extend([chunk async for chunk in stream])


Meanwhile = Callable[[Callable[[int], None]], Awaitable[None]]


async def _run_together(
    commands: list[list[str]], meanwhile: Meanwhile | None = None
) -> list[dict[str, Any]]:
    """Start every command, let them all begin at once, and return their JSON reports.

    *meanwhile* runs once they have begun, with a function that SIGKILLs the process of
    an index (whose report is then empty).
    """
    env = checkout_env()
    reports: list[dict[str, Any]] = [{} for _ in commands]
    processes: list[Process] = []
    ready = [anyio.Event() for _ in commands]
    go = anyio.Event()
    killed: set[int] = set()

    def kill(index: int) -> None:
        killed.add(index)
        processes[index].kill()

    async def run(index: int, process: Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        assert process.stderr is not None
        errors: list[bytes] = []
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(_drain, process.stderr, errors)
            out = BufferedByteReceiveStream(process.stdout)
            try:
                line = await out.receive_until(b"\n", 100)
            except anyio.IncompleteRead:
                line = b""
            assert line == b"ready", b"".join(errors).decode()
            ready[index].set()
            await go.wait()
            await process.stdin.send(b"go\n")
            output: list[bytes] = [out.buffer]
            await _drain(out.receive_stream, output)
        returncode = await process.wait()
        if index in killed:
            assert returncode == -signal.SIGKILL, b"".join(errors).decode()
            return
        assert returncode == 0, b"".join(errors).decode()
        reports[index] = json.loads(b"".join(output))

    with anyio.fail_after(LIMIT_S):
        async with AsyncExitStack() as stack:
            try:
                async with anyio.create_task_group() as task_group:
                    for index, command in enumerate(commands):
                        process = await anyio.open_process(command, cwd=ROOT, env=env)
                        processes.append(await stack.enter_async_context(process))
                        task_group.start_soon(run, index, process)
                    for event in ready:
                        await event.wait()
                    go.set()
                    if meanwhile is not None:
                        await meanwhile(kill)
            finally:  # after a failure, stop the others rather than wait for them
                for process in processes:
                    if process.returncode is None:
                        process.kill()
    return reports


def _command(
    database: Path, name: str, count: int, busy_timeout_ms: int, shared: Path
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tests.integration.sqlite_writer_child",
        str(database),
        name,
        str(count),
        str(busy_timeout_ms),
        str(shared),
    ]


@pytest.mark.parametrize("busy_timeout_ms", [5_000, 0])
async def test_processes_writing_at_once_lose_nothing(tmp_path: Path, busy_timeout_ms: int) -> None:
    database = tmp_path / "shared.db"
    shared_file = tmp_path / "shared-ids"
    async with SqliteTaskStore.open(database) as store:
        manager = TaskManager(store)
        shared = [(await manager.create("race", {"i": i})).id for i in range(SHARED)]
        for task_id in shared:
            await manager.start(task_id)
    shared_file.write_text("\n".join(shared), encoding="utf-8")

    commands = [_command(database, name, COUNT, busy_timeout_ms, shared_file) for name in PROCESSES]
    reports = await _run_together(commands)

    async with SqliteTaskStore.open(database) as store:
        manager = TaskManager(store)
        assert (await manager.list(limit=1000)).next_cursor is None
        every = (await manager.list(limit=1000)).tasks
        assert len(every) == len(PROCESSES) * COUNT + SHARED
        for name, report in zip(PROCESSES, reports, strict=True):
            assert len(set(report["created"])) == COUNT
            numbers = []
            for task_id in report["created"]:
                task = await manager.get(task_id)
                assert (task.owner, task.state, task.version) == (name, TaskState.COMPLETED, 4)
                assert task.result == {"by": name, "n": task.arguments["n"]}
                numbers.append(task.arguments["n"])
            assert sorted(numbers) == list(range(COUNT))  # type: ignore[type-var]
        winners = Counter(task_id for report in reports for task_id in report["won"])
        assert sorted(winners) == sorted(shared)
        assert set(winners.values()) == {1}  # each shared task was completed exactly once
        for name, report in zip(PROCESSES, reports, strict=True):
            for task_id in report["won"]:
                task = await manager.get(task_id)
                assert (task.state, task.version, task.result) == (
                    TaskState.COMPLETED,
                    3,
                    {"by": name},
                )
    if busy_timeout_ms == 0:
        assert sum(report["transient"] for report in reports) > 0, "no lock contention met"
    with closing(sqlite3.connect(database)) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


async def test_processes_creating_the_same_new_file_at_once_share_one_schema(
    tmp_path: Path,
) -> None:
    database = tmp_path / "new.db"
    no_shared = tmp_path / "none"
    no_shared.write_text("", encoding="utf-8")
    names = [f"p{index}" for index in range(4)]
    reports = await _run_together([_command(database, name, 20, 0, no_shared) for name in names])
    assert [len(report["created"]) for report in reports] == [20] * len(names)
    with closing(sqlite3.connect(database)) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == latest_version()
        assert raw.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        owners = dict(raw.execute("SELECT owner, count(*) FROM tasks GROUP BY owner").fetchall())
        assert owners == dict.fromkeys(names, 20)


async def test_a_writer_killed_mid_write_blocks_and_damages_nothing(tmp_path: Path) -> None:
    database = tmp_path / "shared.db"
    no_shared = tmp_path / "none"
    no_shared.write_text("", encoding="utf-8")
    async with SqliteTaskStore.open(database):
        pass  # the schema exists before anyone polls it
    endless = 100 * COUNT  # the victim cannot finish before it is killed
    commands = [_command(database, "victim", endless, 5_000, no_shared)]
    commands += [_command(database, name, COUNT, 5_000, no_shared) for name in PROCESSES[1:]]

    def victims_tasks() -> int:
        with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as raw:
            found = raw.execute("SELECT count(*) FROM tasks WHERE owner = 'victim'").fetchone()
        return int(found[0])

    async def kill_the_victim_mid_way(kill: Callable[[int], None]) -> None:
        async def started() -> bool:
            return victims_tasks() >= 40

        await eventually(started, within_s=30)
        kill(0)

    reports = await _run_together(commands, kill_the_victim_mid_way)

    assert [len(report["created"]) for report in reports[1:]] == [COUNT, COUNT]
    with closing(sqlite3.connect(database)) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    async with SqliteTaskStore.open(database) as store:
        manager = TaskManager(store)
        victims: list[Task] = []
        cursor = None
        while True:
            page = await manager.list(owner="victim", limit=500, cursor=cursor)
            victims += page.tasks
            if (cursor := page.next_cursor) is None:
                break
    assert 40 <= len(victims) < endless
    for task in victims:  # every transition is whole: state, version and fields agree
        expected = {
            1: (TaskState.QUEUED, None, None),
            2: (TaskState.RUNNING, None, None),
            3: (TaskState.RUNNING, 1, None),
            4: (TaskState.COMPLETED, 1, {"by": "victim", "n": task.arguments["n"]}),
        }[task.version]
        completed = task.progress.completed if task.progress is not None else None
        assert (task.state, completed, task.result) == expected
