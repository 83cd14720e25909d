"""A worker process for the map crash test: ``python -m tests.e2e.map_child DB``.

It opens the engine on *DB* through the real composition root (``open_engine``, which
takes a worker slot on the file) with the ``mapping`` workflow, prints ``ready``, and
serves until every task in the database is terminal: then it prints ``terminal`` and
exits 0. The test kills it with SIGKILL from outside while a map is half done.
"""

import sys
from pathlib import Path

import anyio

from taskloom import bootstrap
from taskloom.config import TaskloomSettings
from taskloom.engine.worker import WorkerSettings
from taskloom.persistence.sqlite import SqliteSettings

SERVE_LIMIT_S = 60.0


def settings(database: Path) -> TaskloomSettings:
    """How both the killed and the restarted worker open the database."""
    return TaskloomSettings(
        database=SqliteSettings(path=database),
        workflow_modules=("tests.e2e.map_flow",),
        load_entry_points=False,
        run_sweeper=False,
        worker=WorkerSettings(poll_s=0.1, progress_interval_s=0.05),
    )


async def serve(database: Path) -> int:
    """Serve until every task is terminal; the exit status."""
    async with bootstrap.open_engine(settings(database)) as engine:
        manager = engine.manager
        print("ready", flush=True)
        with anyio.fail_after(SERVE_LIMIT_S):
            for task in (await manager.list(limit=1000)).tasks:
                await manager.wait_until_terminal(task.id)
    print("terminal", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(serve, Path(sys.argv[1]), backend="asyncio"))
