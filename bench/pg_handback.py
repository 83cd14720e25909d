"""A run handed back on PostgreSQL: from its worker's stop to its next attempt elsewhere.

Two worker engines in this process on a fresh database, with the default settings (poll
every 1 s), and one engine without a worker that creates the runs. Each round starts a
third worker engine, creates a ``hang_once`` run (its first attempt never ends) until that
engine holds it, waits for the attempt to start, then closes that engine, as a deploy stops
a worker (SIGTERM: the run is handed back). The figure is the time from the start of the
close to the next attempt's start (its ``started_at``), taken by one of the other workers. Since ADR
0066 the hand-back is announced; before, the run waited for a worker's next poll.

    python bench/pg_handback.py    # or: python bench/run.py --only pg_handback
"""

import sys
import time
from typing import Final

import anyio

import figures
import pg_flows
from postgres import migrate, scratch_database, settings
from taskloom.bootstrap import Engine, open_engine
from taskloom.engine.models import Task, TaskId
from taskloom.engine.submit import submit

Row = figures.Row
WAIT_S: Final = 30.0


async def _held_by(stopping: Engine, others: list[Engine], creator: Engine) -> Task:
    """A ``hang_once`` run whose first attempt has started in *stopping* (runs that
    another worker took instead are cancelled and another is created)."""
    with anyio.fail_after(WAIT_S):
        while True:
            task = await submit(creator.manager, pg_flows.hang_once, {})
            holder = None
            while holder is None:
                holder = next(
                    (each for each in [stopping, *others] if _executes(each, task.id)), None
                )
                await anyio.sleep(0.002)
            if holder is stopping:
                while not await creator.manager.runs.attempts(TaskId(task.id)):  # noqa: ASYNC110  # a store: no event
                    await anyio.sleep(0.002)
                return task
            await creator.manager.cancel(task.id)


def _executes(engine: Engine, task_id: str) -> bool:
    return engine.worker is not None and engine.worker.executes(task_id)


async def _rounds(url: str, rounds: int) -> list[float]:
    await migrate(url)
    gaps: list[float] = []
    async with (
        open_engine(settings(url, run_worker=False)) as creator,
        open_engine(settings(url, run_worker=True)) as first,
        open_engine(settings(url, run_worker=True)) as second,
    ):
        for _ in range(rounds):
            async with open_engine(settings(url, run_worker=True)) as stopping:
                task = await _held_by(stopping, [first, second], creator)
                stopped = time.time()  # the engine closes: its worker stops

            with anyio.fail_after(WAIT_S):
                await creator.manager.wait_until_terminal(task.id, recheck_every=0.05)
            attempts = await creator.manager.runs.attempts(TaskId(task.id))
            (again,) = [each for each in attempts if each.attempt == 2]
            gaps.append(1000 * (again.started_at.timestamp() - stopped))
    return gaps


def run(quick: bool) -> list[Row]:
    """The hand-back latency over the rounds."""
    rounds = 2 if quick else 20
    with scratch_database() as url:
        gaps = anyio.run(_rounds, url, rounds, backend="asyncio")
    found = figures.latency("a worker's stop to its run's next attempt in another", gaps)
    found["note"] += f", max {max(gaps):.0f} ms; the workers poll every 1 s"
    return [found]


if __name__ == "__main__":
    for each in run(quick="--quick" in sys.argv):
        print(each)
