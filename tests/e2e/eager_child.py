"""A process for the eager-start crash test: ``python -m tests.e2e.eager_child MODE DB``.

Both modes open the engine on *DB* through the real composition root (``open_engine``,
which takes a worker slot) with the ``crash`` workflow and a lease of ``LEASE_S``.

- ``create``: once its worker's first claim has found the queue empty, submits one run
  of ``crash`` (its marks next to *DB*); the create claims it for this process's worker
  (eager start), and the process SIGKILLs itself as the commit returns, before any node
  starts. It appends the task's id and its lease to ``DB.kill`` first; it exits 3 if
  the create was not eager.
- ``serve``: prints ``ready`` once its worker runs, then serves until the database holds
  a task and every task in it is terminal; prints ``terminal`` and exits 0.
"""

import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, Final, NoReturn, Unpack

import anyio
import pytest

from taskloom import bootstrap
from taskloom.config import TaskloomSettings
from taskloom.engine.claims import ClaimAtCreate
from taskloom.engine.models import Task
from taskloom.engine.runs import ClaimedRun, ClaimTerms, Instant
from taskloom.engine.submit import submit
from taskloom.engine.worker import WorkerSettings
from taskloom.persistence import factory
from taskloom.persistence.sqlite import SqliteSettings, SqliteTaskStore
from tests.e2e.crash_flow import crash

LEASE_S: Final = 1.5
SERVE_LIMIT_S: Final = 30.0
NOT_EAGER: Final = 3


class DyingStore(SqliteTaskStore):
    """The SQLite store; its first claim says when the worker is idle, and a create that
    claims its run kills the process once it has committed."""

    looked: ClassVar[anyio.Event | None] = None

    async def claim_runs(self, **terms: Unpack[ClaimTerms]) -> Sequence[ClaimedRun]:
        claimed = await super().claim_runs(**terms)
        if DyingStore.looked is not None:
            DyingStore.looked.set()
        return claimed

    async def create_claimed(
        self, task: Task, claim: ClaimAtCreate, now: Instant
    ) -> tuple[Task, ClaimedRun | None]:
        stored, run = await super().create_claimed(task, claim, now)
        if run is not None:
            _die(self.settings.path, run)
        return stored, run


def _die(database: Path, run: ClaimedRun) -> NoReturn:
    record = {
        "task": run.task.id,
        "worker": run.lease.worker,
        "expires_at": run.lease.expires_at.isoformat(),
    }
    with database.with_name(database.name + ".kill").open("a", encoding="utf-8") as file:
        file.write(json.dumps(record) + "\n")
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable: the process was killed")


def settings(database: Path) -> TaskloomSettings:
    """How both processes open the database."""
    return TaskloomSettings(
        database=SqliteSettings(path=database),
        workflow_modules=("tests.e2e.crash_flow",),
        load_entry_points=False,
        run_sweeper=False,
        worker=WorkerSettings(
            poll_s=0.1, lease_s=LEASE_S, progress_interval_s=0.05, input_recheck_s=0.1
        ),
    )


async def create(database: Path) -> int:
    """Create one run eagerly and die as its create commits."""
    looked = DyingStore.looked = anyio.Event()
    async with bootstrap.open_engine(settings(database)) as engine:
        with anyio.fail_after(SERVE_LIMIT_S):
            await looked.wait()
        marks = str(database.with_name("marks"))
        await submit(engine.manager, crash, {"marks": marks, "number": 1})
    return NOT_EAGER


async def serve(database: Path) -> int:
    """Serve until there is a task and every task is terminal."""
    async with bootstrap.open_engine(settings(database)) as engine:
        print("ready", flush=True)
        with anyio.fail_after(SERVE_LIMIT_S):
            while True:
                tasks = (await engine.manager.list(limit=100)).tasks
                if tasks and all(task.is_terminal for task in tasks):
                    break
                await anyio.sleep(0.05)  # another process writes them: no event here
    print("terminal", flush=True)
    return 0


def main(argv: list[str]) -> int:
    """Entry point: ``MODE DB``."""
    mode, database = argv[0], Path(argv[1])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(factory, "SqliteTaskStore", DyingStore)  # what open_engine opens
        return anyio.run({"create": create, "serve": serve}[mode], database, backend="asyncio")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
