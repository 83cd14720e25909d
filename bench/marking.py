"""The fleet's marking pass per period: 1, 4 and 16 workers behind 100,000 queued runs.

Every worker, each 15 s, records its versions and, when due, makes the pass that writes
"waiting for a process that has ..." on queued runs no live process can take (ADR 0039);
the pass reads every unfinished run. ADR 0068 has one process of a fleet make it: the
first live process record. This measures what one period of that costs the store, with
*N* workers simulated by one engine (their process records written, then each worker's
marking step taken in turn, as ``Worker._announce`` takes it when due):

- where ``taskloom.engine.versions.mark_if_first`` exists (ADR 0068), each worker's
  step is ``mark_if_first(manager, store, worker)``: the lowest id reads and marks,
  every other worker reads who is first (one row of ``processes``);
- otherwise (``main`` before ADR 0068), each worker's step is ``mark_waiting_runs``.

The same file measures both: copy it into a checkout of the older code and run it there
in the same sitting. For each store (SQLite, a temporary file with the default settings;
PostgreSQL, a fresh migrated database, vacuumed and analysed once filled, as autovacuum
would be) the queue is filled once through ``submit`` of ``stamp`` (``pg_flows.py``), 16
submitters at once, then 100 runs of a version no process has (``stamp`` version 0) are
created last (the pass finds them on its first page). For 1, 4 and 16 workers: records
written (live for the whole measurement), one warm-up period (the first marks the 100
runs), then ``PERIODS`` periods, each the sum of the *N* workers' steps (wall time of the
calls, one after another, which is the store's time plus the client's). The records are
forgotten before the next *N*.

Target: with the election, 16 workers' period costs at most 1.5 times one worker's (the
pass is made once a period whatever the fleet), at 100,000 queued (not judged in the
quick case, where a pass costs about what the 15 other workers' reads do). Without a reachable PostgreSQL
(``TASKLOOM_TEST_POSTGRES_URL``, default the local one) its rows are left out, with a note.

    python bench/marking.py            # the full figures, printed
    python bench/marking.py --quick    # 300 queued runs: the harness works
    python bench/run.py --only marking # the full figures, written into docs/benchmarks.md
"""

import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Final, cast

import anyio

import figures
import pg_flows
from postgres import migrate, scratch_database, settings, vacuum_analyze, with_postgres
from taskloom.bootstrap import Engine, open_engine
from taskloom.config import TaskloomSettings
from taskloom.engine import versions
from taskloom.engine.registry import loaded_versions
from taskloom.engine.submit import submit
from taskloom.engine.versions import VersionStore, mark_waiting_runs
from taskloom.persistence.sqlite import SqliteSettings

Row = figures.Row
SUBMITTERS: Final = 16
WAITING: Final = 100
"""Runs of a version no process has (``stamp`` version 0)."""
FLEETS: Final = (1, 4, 16)
ELECTED: Final = hasattr(versions, "mark_if_first")
"""This checkout has ADR 0068's election."""
CODE: Final = "first live process marks" if ELECTED else "every worker marks"


@dataclass(frozen=True)
class Sizes:
    queued: int
    periods: int
    judged: bool
    """Whether the target applies (at 300 queued a pass costs about what 15 reads of one
    row do, so the ratio says nothing)."""


QUICK: Final = Sizes(300, 3, judged=False)
FULL: Final = Sizes(100_000, 5, judged=True)


async def _fill(engine: Engine, queued: int) -> float:
    """*queued* runs of ``stamp`` through ``submit``, then ``WAITING`` of version 0;
    seconds taken."""
    started = time.perf_counter()

    async def submitter(share: int) -> None:
        for _ in range(share):
            await submit(engine.manager, pg_flows.stamp)

    async with anyio.create_task_group() as task_group:
        for index in range(SUBMITTERS):
            share = queued // SUBMITTERS + (index < queued % SUBMITTERS)
            task_group.start_soon(submitter, share)
    for _ in range(WAITING):
        await engine.manager.create("stamp", {}, workflow_version="0")
    return time.perf_counter() - started


async def _fill_store(store: TaskloomSettings, queued: int) -> float:
    async with open_engine(store) as engine:
        return await _fill(engine, queued)


async def _step(engine: Engine, store: VersionStore, worker: str) -> int | None:
    """One worker's marking step when it is due, as ``Worker._announce`` takes it."""
    if ELECTED:
        return await versions.mark_if_first(engine.manager, store, worker)
    return await mark_waiting_runs(engine.manager, store)


async def _periods(store: TaskloomSettings, fleet: int, periods: int) -> tuple[list[float], int]:
    """Per-period milliseconds of *fleet* workers' steps (``periods`` of them, after one
    warm-up), and how many runs the warm-up marked."""
    async with open_engine(store) as engine:
        versions_store = cast(VersionStore, engine.runs)
        loaded = list(loaded_versions(engine.workflows))
        workers = [f"bench-worker-{number:02}" for number in range(fleet)]
        now = engine.manager.clock.now()
        for worker in workers:
            await versions_store.record_loaded(worker, loaded, now, now + timedelta(hours=1))
        marked, times = 0, []
        for period in range(1 + periods):
            started = time.perf_counter()
            for worker in workers:
                wrote = await _step(engine, versions_store, worker)
                if not period:
                    marked += wrote or 0
            if period:
                times.append((time.perf_counter() - started) * 1000)
        for worker in workers:
            await versions_store.forget_process(worker)
        return times, marked


def _sqlite(folder: Path) -> Callable[[], AbstractContextManager[tuple[TaskloomSettings, None]]]:
    @contextmanager
    def fresh() -> Iterator[tuple[TaskloomSettings, None]]:
        yield (
            TaskloomSettings(
                database=SqliteSettings(path=folder / "marking.db"),
                workflow_modules=("pg_flows",),
                load_entry_points=False,
                run_worker=False,
                run_sweeper=False,
            ),
            None,
        )

    return fresh


@contextmanager
def _postgres() -> Iterator[tuple[TaskloomSettings, str]]:
    with scratch_database() as url:
        anyio.run(migrate, url)
        yield settings(url, run_worker=False), url


def _store_rows(
    name: str,
    fresh: Callable[[], AbstractContextManager[tuple[TaskloomSettings, str | None]]],
    sizes: Sizes,
) -> list[Row]:
    rows, medians = [], {}
    with fresh() as (store, url):
        fill_s = anyio.run(_fill_store, store, sizes.queued)
        if url is not None:
            vacuum_analyze(url, "tasks", "processes")
        for fleet in FLEETS:
            times, marked = anyio.run(_periods, store, fleet, sizes.periods)
            if marked != WAITING and fleet == FLEETS[0]:
                raise RuntimeError(f"the first pass marked {marked} runs, not {WAITING}")
            medians[fleet] = statistics.median(times)
            row = figures.row(
                f"{name}, {CODE}: {fleet} {'workers' if fleet > 1 else 'worker'}'"
                f"{'' if fleet > 1 else 's'} marking per period, {sizes.queued:,} queued",
                times,
                "ms",
            )
            row["note"] = f"queue filled in {fill_s:.0f} s" if fleet == FLEETS[0] else ""
            rows.append(row)
    most = FLEETS[-1]
    ratio = medians[most] / medians[FLEETS[0]]
    ratio_row = figures.row(
        f"{name}, {CODE}: {most} workers' period / 1 worker's (medians)", [ratio], "x"
    )
    if ELECTED and sizes.judged:
        ratio_row["target"] = "<= 1.5x"
        ratio_row["passed"] = ratio <= 1.5
    rows.append(ratio_row)
    return rows


def run(quick: bool) -> list[Row]:
    """One period's marking with 1, 4 and 16 workers on SQLite and PostgreSQL."""
    sizes = QUICK if quick else FULL
    with tempfile.TemporaryDirectory() as folder:
        rows = _store_rows("SQLite", _sqlite(Path(folder)), sizes)
    return with_postgres("marking", rows, lambda: _store_rows("PostgreSQL", _postgres, sizes))


if __name__ == "__main__":
    from run import render

    print(render(run(quick="--quick" in sys.argv)))
