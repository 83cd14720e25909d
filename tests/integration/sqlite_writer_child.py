"""One of several processes writing one SQLite file at once, for test_sqlite_processes.py.

``python -m tests.integration.sqlite_writer_child DB NAME COUNT BUSY_TIMEOUT_MS SHARED``

It prints ``ready``, waits for a line on stdin (so that every process starts together),
then opens the store and, in ``LANES`` concurrent lanes, creates COUNT tasks owned by
NAME and moves each through start, progress and completion; meanwhile it tries to
complete every task listed (one id a line) in the file SHARED, which the other
processes try too. Last it prints one JSON line: the ids it ``created``, the shared ids
it ``won``, and how many ``transient`` lock errors the store met (and retried).
"""

import json
import random
import sys
from pathlib import Path

import anyio
import pytest

from taskloom.engine.errors import IllegalTransitionError
from taskloom.engine.manager import TaskManager
from taskloom.persistence.sqlite import SqliteSettings, SqliteTaskStore, driver

LANES = 8


class _Transient:
    """Counts the lock errors that the store's retry loop sees."""

    seen = 0

    @classmethod
    def check(cls, error: BaseException) -> bool:
        transient = _is_transient(error)
        cls.seen += transient
        return transient


_is_transient = driver.is_transient


async def _own(manager: TaskManager, name: str, numbers: range, created: list[str]) -> None:
    for number in numbers:
        task = await manager.create(
            "write", {"n": number}, owner=name, idempotency_key=f"{name}-{number}"
        )
        created.append(task.id)
        await manager.start(task.id)
        await manager.report_progress(task.id, completed=1, total=1, message="written")
        await manager.complete(task.id, {"by": name, "n": number})


async def _race(manager: TaskManager, name: str, shared: list[str], won: list[str]) -> None:
    for task_id in shared:
        try:
            await manager.complete(task_id, {"by": name})
        except IllegalTransitionError:
            continue  # another process completed it first
        won.append(task_id)


async def work(
    database: Path, name: str, count: int, busy_timeout_ms: int, shared_ids: list[str]
) -> None:
    """Wait for the start line, then write; print what was written."""
    print("ready", flush=True)
    await anyio.to_thread.run_sync(sys.stdin.readline)
    created: list[str] = []
    won: list[str] = []
    settings = SqliteSettings(path=database, busy_timeout_ms=busy_timeout_ms)
    async with SqliteTaskStore.open(settings) as store:
        manager = TaskManager(store)
        async with anyio.create_task_group() as task_group:
            for lane in range(LANES):
                task_group.start_soon(_own, manager, name, range(lane, count, LANES), created)
            task_group.start_soon(_race, manager, name, shared_ids, won)
    print(json.dumps({"created": created, "won": won, "transient": _Transient.seen}), flush=True)


def main(argv: list[str]) -> int:
    """Entry point: ``DB NAME COUNT BUSY_TIMEOUT_MS SHARED``."""
    database, name, count, busy_timeout_ms, shared = argv
    shared_ids = Path(shared).read_text(encoding="utf-8").split()
    random.Random(name).shuffle(shared_ids)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(driver, "is_transient", _Transient.check)
        anyio.run(
            work,
            Path(database),
            name,
            int(count),
            int(busy_timeout_ms),
            shared_ids,
            backend="asyncio",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
