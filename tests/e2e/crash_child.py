"""A worker process for the crash tests: ``python -m tests.e2e.crash_child DB [KILL_POINT]``.

It opens the engine on *DB* through the real composition root (``open_engine``, which
takes a worker slot) with the ``crash`` workflow, and serves until every task in the
database is terminal: then it prints ``terminal`` and exits 0. With a *KILL_POINT* it
SIGKILLs itself there instead (and exits 3 if the point is never reached). Before dying
it appends one JSON line to ``DB.kill`` saying where: ``point``, ``task``, ``node``,
``attempt`` (the last three may be null).

The kill points are injected here, test-side only: ``open_engine`` is handed subclasses
of the store, and a clock, that kill the process around one commit.

- ``after_claim``: right after the first claim of runs committed.
- ``before_start:N`` / ``after_start:N``: right before / after the N-th node start commits.
- ``before_end:N`` / ``after_end:N``: right before / after the N-th node completion (output
  and state) commits on its own; "before" is after the node body has returned. The node
  that completes a run is not counted: its end commits with the run's result.
- A suffix ``@NODE`` counts only the commits of the nodes named NODE (``after_start@flaky``).
- ``backoff``: inside the first retry wait, after the failed attempt was recorded.
- ``input``: once every run waits for an answer.
- ``before_finish:N`` / ``after_finish:N``: right before / after the N-th run's last node
  end and result commit together (``finish_run``); "before" is after the body returned.
"""

import json
import os
import signal
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import ClassVar, NoReturn, Unpack

import anyio
import pytest

from taskloom import bootstrap
from taskloom.config import TaskloomSettings
from taskloom.engine.clock import SystemClock
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task, TaskMutation
from taskloom.engine.runs import (
    ClaimedRun,
    ClaimTerms,
    Lease,
    NodeEnd,
    NodeRun,
    NodeStart,
    NodeState,
)
from taskloom.engine.states import TaskState
from taskloom.engine.worker import WorkerSettings
from taskloom.persistence import factory
from taskloom.persistence.sqlite import SqliteSettings, SqliteTaskStore

SERVE_LIMIT_S = 30.0
NOT_REACHED = 3


POINTS = frozenset(
    {
        "after_claim",
        "before_start",
        "after_start",
        "before_end",
        "after_end",
        "backoff",
        "input",
        "before_finish",
        "after_finish",
    }
)


class _KillPoint:
    """Where to die: a kind of commit, and which one of that kind (the ``at``-th, counting
    only the commits of node ``node`` if it is set)."""

    name: ClassVar[str | None] = None
    at: ClassVar[int] = 1
    node: ClassVar[str | None] = None
    record: ClassVar[Path] = Path("/dev/null")
    _seen: ClassVar[dict[str, int]] = {}

    @classmethod
    def configure(cls, spec: str | None, database: Path) -> None:
        if spec is not None:
            spec, _, node = spec.partition("@")
            name, _, at = spec.partition(":")
            if name not in POINTS:
                raise SystemExit(f"unknown kill point {name!r}; known: {sorted(POINTS)}")
            cls.name, cls.at, cls.node = name, int(at or 1), node or None
        cls.record = database.with_name(database.name + ".kill")

    @classmethod
    def reached(cls, kind: str, node: str) -> bool:
        """Count one commit of *kind* for *node*; true if it is the one to die around."""
        if cls.node not in (None, node):
            return False
        cls._seen[kind] = cls._seen.get(kind, 0) + 1
        return cls._seen[kind] == cls.at

    @classmethod
    def die(cls, task: str | None = None, node: str | None = None, attempt: int = 0) -> NoReturn:
        entry = {"point": cls.name, "task": task, "node": node, "attempt": attempt or None}
        with cls.record.open("a", encoding="utf-8") as record:
            record.write(json.dumps(entry) + "\n")
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable: the process was killed")


class KillingStore(SqliteTaskStore):
    """The SQLite store, dying around the chosen commit."""

    async def claim_runs(self, **terms: Unpack[ClaimTerms]) -> Sequence[ClaimedRun]:
        claimed = await super().claim_runs(**terms)
        if claimed and _KillPoint.name == "after_claim":
            _KillPoint.die()
        return claimed

    async def start_node(self, lease: Lease, start: NodeStart, now: datetime) -> NodeRun:
        point = _KillPoint.name
        hit = point in {"before_start", "after_start"} and _KillPoint.reached("start", start.node)
        if hit and point == "before_start":
            _KillPoint.die(lease.task_id, start.node, start.attempt)
        run = await super().start_node(lease, start, now)
        if hit:
            _KillPoint.die(lease.task_id, start.node, start.attempt)
        return run

    async def end_node(self, lease: Lease, end: NodeEnd, now: datetime) -> NodeRun:
        point = _KillPoint.name
        completes = end.state is NodeState.COMPLETED
        hit = (
            completes
            and point in {"before_end", "after_end"}
            and _KillPoint.reached("end", end.node)
        )
        if hit and point == "before_end":
            _KillPoint.die(lease.task_id, end.node, end.attempt)
        run = await super().end_node(lease, end, now)
        if hit:
            _KillPoint.die(lease.task_id, end.node, end.attempt)
        return run

    async def finish_run(
        self, lease: Lease, end: NodeEnd, now: datetime, mutate: TaskMutation
    ) -> tuple[NodeRun, Task]:
        point = _KillPoint.name
        hit = point in {"before_finish", "after_finish"} and _KillPoint.reached("finish", end.node)
        if hit and point == "before_finish":
            _KillPoint.die(lease.task_id, end.node, end.attempt)
        finished = await super().finish_run(lease, end, now, mutate)
        if hit:
            _KillPoint.die(lease.task_id, end.node, end.attempt)
        return finished


class KillingClock(SystemClock):
    """The system clock; its sleeps are the runner's retry waits, where it may die."""

    async def sleep(self, seconds: float) -> None:
        if _KillPoint.name == "backoff":
            _KillPoint.die()
        await super().sleep(seconds)


def settings(database: Path) -> TaskloomSettings:
    """How both the crashing and the restarted worker open the database."""
    return TaskloomSettings(
        database=SqliteSettings(path=database),
        workflow_modules=("tests.e2e.crash_flow",),
        load_entry_points=False,
        run_sweeper=False,
        worker=WorkerSettings(poll_s=0.1, progress_interval_s=0.05, input_recheck_s=0.1),
    )


async def _all_tasks(manager: TaskManager) -> list[Task]:
    tasks: list[Task] = []
    cursor: str | None = None
    while True:
        page = await manager.list(cursor=cursor)
        tasks += page.tasks
        cursor = page.next_cursor
        if cursor is None:
            return tasks


async def _die_once_every_run_asks(manager: TaskManager) -> None:
    with manager.subscribe() as changes:
        while not all(t.state is TaskState.INPUT_REQUIRED for t in await _all_tasks(manager)):
            await changes.receive()
    _KillPoint.die()


async def serve(database: Path) -> int:
    """Serve until every task is terminal; the exit status."""
    async with bootstrap.open_engine(settings(database), clock=KillingClock()) as engine:
        manager = engine.manager
        with anyio.fail_after(SERVE_LIMIT_S):
            async with anyio.create_task_group() as task_group:
                if _KillPoint.name == "input":
                    task_group.start_soon(_die_once_every_run_asks, manager)
                for task in await _all_tasks(manager):
                    await manager.wait_until_terminal(task.id)
                task_group.cancel_scope.cancel()
    print("terminal", flush=True)
    return NOT_REACHED if _KillPoint.name is not None else 0


def main(argv: list[str]) -> int:
    """Entry point: ``DB [KILL_POINT]``."""
    database = Path(argv[0])
    _KillPoint.configure(argv[1] if len(argv) > 1 else None, database)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(factory, "SqliteTaskStore", KillingStore)  # what open_engine opens
        return anyio.run(serve, database, backend="asyncio")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
