"""What one claim costs as the queue grows: 1,000, 10,000 and 100,000 queued runs.

A worker's claim (``RunStore.claim_runs``) should cost the same whatever the depth of
the queue behind it. For each store (SQLite, a temporary file with the default settings,
``synchronous=FULL``; PostgreSQL, a fresh migrated database per measurement) and each
depth, on a store of its own:

1. the queue is filled through the engine's public path: ``submit`` of the one-node
   ``stamp`` workflow (``pg_flows.py``), 16 submitters at once, by an engine opened
   with ``open_engine(run_worker=False)`` (no worker claims meanwhile) and closed
   after; the runs have no owner (the local user's);
2. on PostgreSQL, the two tables are vacuumed and analysed (``VACUUM (ANALYZE)``), as
   autovacuum would soon after that many inserts (the test server runs without it):
   measured before, the claims were 2 to 2.5 times slower at 1,000 and 10,000 queued.
   SQLite keeps no statistics unless asked, and taskloom never asks;
3. another engine is opened (as a worker process would be) and one claim timed as a
   worker makes it (``Worker._claim`` through ``TaskManager.claim``): its worker id,
   every loaded workflow version, ``limit=2``, the default worker's lease
   (``WorkerSettings().lease_s``) and per-owner cap (``per_owner_limit(WorkerSettings())``,
   50), ``start=claim_start(now, "started")``: the wall time of the ``claim_runs``
   call, 3 warm-up claims, then the median of 30. Each takes 2 runs, which stay
   claimed: 66 of the queue's runs, the depth barely changes (a run whose 10 s lease
   lapses meanwhile is claimable again, as after a crash).

The fairness case (ADR 0028) at the deepest queue: every queued run belongs to one
principal (``hog``); before each claim, one run of another (``other``) is submitted, so
it is always the newest. A claim of 2 with the default per-owner cap must take it (the
bench raises otherwise: a wrong claim is not reported as fast); it is then completed,
outside the timing, as a short run would be.

Target, per store: the median claim at the deepest queue at most 2x the median at
1,000 (one run): a claim's cost should not grow with the backlog. Without a reachable
PostgreSQL (``TASKLOOM_TEST_POSTGRES_URL``, default the local one) its rows are left
out, with a note on the last row and on stderr. The full run takes 2 to 4 minutes on
2 cores, most of it filling PostgreSQL (some 1,000 to 2,700 submits/s).

    python bench/claims_backlog.py            # the full figures, printed
    python bench/claims_backlog.py --quick    # queues of 50 and 200: the harness works
    python bench/run.py --only claims_backlog # the full figures, written into docs/benchmarks.md
"""

import itertools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Final

import anyio

import figures
import pg_flows
from postgres import migrate, scratch_database, settings, vacuum_analyze, with_postgres
from taskloom.bootstrap import Engine, open_engine
from taskloom.config import TaskloomSettings
from taskloom.engine.manager import claim_start
from taskloom.engine.registry import loaded_versions
from taskloom.engine.submit import submit
from taskloom.engine.worker import WorkerSettings, default_worker_id, per_owner_limit
from taskloom.persistence.sql.leases import MOST_OWNERS
from taskloom.persistence.sqlite import SqliteSettings

Row = figures.Row
SUBMITTERS: Final = 16
LIMIT: Final = 2
WARM_UP: Final = 3
HOG: Final = "hog"
MANY: Final = "(many)"
"""As the owner to fill with: each run of an owner of its own."""
OTHER: Final = "other"


@dataclass(frozen=True)
class Sizes:
    depths: tuple[int, ...]
    claims: int
    owners: int
    """Owners of one queued run each, in the many owners' case (more than MOST_OWNERS)."""


QUICK: Final = Sizes((50, 200), 5, MOST_OWNERS + 44)
FULL: Final = Sizes((1_000, 10_000, 100_000), 30, 20_000)


@dataclass(frozen=True)
class Found:
    """One measurement: the timed claims (ms) and how long filling the queue took (s)."""

    claims: list[float]
    fill_s: float


@dataclass(frozen=True)
class Store:
    """How to open one store, and what the store's own upkeep does once it is filled."""

    settings: TaskloomSettings
    settle: Callable[[], None] = lambda: None


async def _fill(engine: Engine, depth: int, owner: str | None) -> float:
    """Submit *depth* ``stamp`` runs of *owner* (``MANY``: each of its own owner),
    ``SUBMITTERS`` at once; seconds taken."""
    started = time.perf_counter()
    numbers = itertools.count()

    async def submitter(share: int) -> None:
        for _ in range(share):
            whose = f"p{next(numbers)}" if owner == MANY else owner
            await submit(engine.manager, pg_flows.stamp, owner=whose)

    async with anyio.create_task_group() as task_group:
        for index in range(SUBMITTERS):
            task_group.start_soon(submitter, depth // SUBMITTERS + (index < depth % SUBMITTERS))
    return time.perf_counter() - started


async def _fill_store(store: Store, depth: int, owner: str | None) -> float:
    async with open_engine(store.settings) as engine:
        return await _fill(engine, depth, owner)


async def _claims(store: Store, depth: int, claims: int, *, fair: bool) -> list[float]:
    """Time ``WARM_UP`` + *claims* claims of a queue of *depth* runs (the last *claims*,
    ms); with *fair*, each claim must take a run of ``OTHER``'s submitted just before."""
    defaults = WorkerSettings()
    async with open_engine(store.settings) as engine:
        workflows = frozenset(loaded_versions(engine.workflows))
        worker, clock = default_worker_id(), engine.manager.clock
        times = []
        for number in range(WARM_UP + claims):
            newest = await submit(engine.manager, pg_flows.stamp, owner=OTHER) if fair else None
            now = clock.now()
            started = time.perf_counter()
            claimed = await engine.runs.claim_runs(
                worker=worker,
                workflows=workflows,
                now=now,
                lease_for=timedelta(seconds=defaults.lease_s),
                limit=LIMIT,
                start=claim_start(now, "started"),
                per_owner=per_owner_limit(defaults),
            )
            elapsed = (time.perf_counter() - started) * 1000
            if len(claimed) != LIMIT:
                raise RuntimeError(f"a claim of {LIMIT} among {depth:,} took {len(claimed)}")
            if newest is not None:
                taken = {run.task.id: run for run in claimed}
                if newest.id not in taken:
                    owners = [run.task.owner for run in claimed]
                    raise RuntimeError(f"the claim passed over {OTHER}'s run: took {owners}")
                await engine.manager.complete(newest.id, "done", lease=taken[newest.id].lease)
            if number >= WARM_UP:
                times.append(elapsed)
        return times


def _measure(store: Store, depth: int, claims: int, *, fair: bool, many: bool = False) -> Found:
    """Fill *store* with *depth* runs (``HOG``'s with *fair*, each of its own owner with
    *many*, else no owner's) and close that engine; settle the store; time the claims of
    a new engine, as a worker's."""
    fill_s = anyio.run(_fill_store, store, depth, MANY if many else HOG if fair else None)
    store.settle()
    return Found(anyio.run(partial(_claims, fair=fair), store, depth, claims), fill_s)


def _sqlite(folder: Path) -> Callable[[], AbstractContextManager[Store]]:
    """A new SQLite file in *folder* for each measurement (the default settings)."""
    files = itertools.count()

    @contextmanager
    def fresh() -> Iterator[Store]:
        yield Store(
            TaskloomSettings(
                database=SqliteSettings(path=folder / f"claims{next(files)}.db"),
                workflow_modules=("pg_flows",),
                load_entry_points=False,
                run_worker=False,
                run_sweeper=False,
            )
        )

    return fresh


@contextmanager
def _postgres() -> Iterator[Store]:
    """A scratch database, migrated, dropped after; vacuumed and analysed once filled."""
    with scratch_database() as url:
        anyio.run(migrate, url)
        # without it the claims were 2 to 2.5 times slower in a trial
        yield Store(
            settings(url, run_worker=False), partial(vacuum_analyze, url, "tasks", "leases")
        )


def _store_rows(
    name: str, fresh: Callable[[], AbstractContextManager[Store]], sizes: Sizes
) -> list[Row]:
    rows, medians = [], {}
    cases = [(depth, False) for depth in sizes.depths] + [(sizes.depths[-1], True)]
    for depth, fair in cases:
        with fresh() as store:
            found = _measure(store, depth, sizes.claims, fair=fair)
        who = f"one {HOG}'s, plus one run of {OTHER}'s, newest" if fair else "no owner"
        row = figures.row(
            f"{name}: a claim of {LIMIT} among {depth:,} queued ({who})", found.claims, "ms"
        )
        row["note"] = f"queue filled in {found.fill_s:.1f} s ({depth / found.fill_s:,.0f}/s)"
        if fair:
            row["note"] = f"took {OTHER}'s run every time; " + row["note"]
        else:
            medians[depth] = statistics.median(found.claims)
        rows.append(row)
    deepest, shallowest = sizes.depths[-1], sizes.depths[0]
    ratio = medians[deepest] / medians[shallowest]
    ratio_row = figures.row(
        f"{name}: claim at {deepest:,} / claim at {shallowest:,} (medians, one run)",
        [ratio],
        "x",
    )
    ratio_row["target"] = "<= 2x"
    ratio_row["passed"] = ratio <= 2
    rows.append(ratio_row)
    with fresh() as store:
        found = _measure(store, sizes.owners, sizes.claims, fair=False, many=True)
    row = figures.row(
        f"{name}: a claim of {LIMIT} among {sizes.owners:,} queued, one run each of"
        f" {sizes.owners:,} owners",
        found.claims,
        "ms",
    )
    row["note"] = (
        f"more than {MOST_OWNERS} owners: every claimable run ranked (ADR 0067); queue"
        f" filled in {found.fill_s:.1f} s"
    )
    rows.append(row)
    return rows


def run(quick: bool) -> list[Row]:
    """Claims at each queue depth on SQLite and PostgreSQL; *quick*: queues of 50 and 200."""
    sizes = QUICK if quick else FULL
    with tempfile.TemporaryDirectory() as folder:
        rows = _store_rows("SQLite", _sqlite(Path(folder)), sizes)
    return with_postgres(
        "claims_backlog", rows, lambda: _store_rows("PostgreSQL", _postgres, sizes)
    )


if __name__ == "__main__":
    from run import render

    print(render(run(quick="--quick" in sys.argv)))
