"""The processes of the PostgreSQL chaos test, all on one database schema:

- ``python -m tests.integration.pg_chaos_child worker URL SCHEMA LEASE_S``: a worker (no
  server); prints ``ready`` once it listens and works, then runs until killed.
- ``python -m tests.integration.pg_chaos_child server URL SCHEMA MARKS FIRST STOP``: an
  engine without a worker that submits the ``chaos`` runs numbered FIRST to STOP - 1 (with
  idempotency keys ``run-<number>``), waits for each to end (woken by LISTEN/NOTIFY, not
  by polling), then prints one JSON object: ``{"<number>": [task id, state, result]}``.
"""

import json
import sys
from typing import Any, Final

import anyio

from taskloom.bootstrap import open_engine
from taskloom.config import TaskloomSettings
from taskloom.engine.submit import submit
from taskloom.engine.worker import WorkerSettings
from taskloom.persistence.postgres import PostgresSettings
from tests.integration.pg_chaos_flow import chaos

SERVER_LIMIT_S: Final = 80.0
MAX_RUNS: Final = 25
"""Runs one worker executes at once: a kill interrupts at most this many."""


def settings(url: str, schema: str, *, run_worker: bool, lease_s: float = 2.0) -> TaskloomSettings:
    """How every process of the test opens the engine."""
    return TaskloomSettings(
        database=PostgresSettings(url=url, schema_name=schema, max_connections=4),
        workflow_modules=("tests.integration.pg_chaos_flow",),
        load_entry_points=False,
        run_worker=run_worker,
        run_sweeper=False,
        worker=WorkerSettings(
            max_runs=MAX_RUNS, poll_s=0.25, lease_s=lease_s, progress_interval_s=0
        ),
    )


async def work(url: str, schema: str, lease_s: float) -> None:
    """Work until killed."""
    async with open_engine(settings(url, schema, run_worker=True, lease_s=lease_s)):
        print("ready", flush=True)
        await anyio.sleep_forever()


async def serve(url: str, schema: str, marks: str, first: int, stop: int) -> None:
    """Submit runs FIRST..STOP-1, wait for them all, print how each ended."""
    async with open_engine(settings(url, schema, run_worker=False)) as engine:
        manager = engine.manager
        ids: dict[int, str] = {}
        for number in range(first, stop):
            arguments = {"marks": marks, "number": number}
            task = await submit(manager, chaos, arguments, idempotency_key=f"run-{number}")
            ids[number] = task.id
        ended: dict[str, Any] = {}
        with anyio.fail_after(SERVER_LIMIT_S):
            for number, task_id in ids.items():
                task = await manager.wait_until_terminal(task_id)
                ended[str(number)] = [task.id, task.state.value, task.result]
    print(json.dumps(ended), flush=True)


def main(argv: list[str]) -> None:
    """Entry point (see the module's docstring)."""
    match argv:
        case ["worker", url, schema, lease_s]:
            anyio.run(work, url, schema, float(lease_s))
        case ["server", url, schema, marks, first, stop]:
            anyio.run(serve, url, schema, marks, int(first), int(stop))
        case _:
            raise SystemExit(f"usage: see {__doc__}")


if __name__ == "__main__":
    main(sys.argv[1:])
