"""What eager start saves: a trivial run's CPU with it on and off, and its claim's share.

In-process, on SQLite (``synchronous=FULL``), one process's CPU (``time.process_time``:
every thread, the writer's included) per trivial one-node run:

- **create**: ``submit`` of the run, 16 creators at once, the worker off (the durable
  create: validation, the insert, its fsync, the change feed);
- **claim**: ``TaskManager.claim`` of the one queued run, timed alone (the claim
  transaction, the writer's batch, the publish), after a create that is not timed: a
  short queue, as when a worker claims runs as they come (a deep queue costs more per
  claim: the fair claim ranks the queue);
- **whole run**: create, then the worker claims it (or the create claims it: eager
  start, ADR 0046), runs its node and commits its end with the result; one at a time
  and 16 in flight, with ``eager_start`` off and on, interleaved in each round, so the
  ratio on/off is measured in one sitting.

``python bench/eager_estimate.py`` prints the table (not part of ``make bench``).
"""

import argparse
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

import anyio

import figures
from flows import noop
from taskloom.engine.manager import TaskManager
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.worker import Worker, WorkerSettings
from taskloom.persistence.sqlite import SqliteTaskStore

Row = figures.Row
CONCURRENCY: Final = 16
RUNS: Final = 2000
ROUNDS: Final = 3


async def _created(manager: TaskManager, count: int, concurrency: int = CONCURRENCY) -> list[str]:
    ids: list[str] = []

    async def creator(share: int) -> None:
        for _ in range(share):
            ids.append((await submit(manager, noop)).id)  # noqa: PERF401

    async with anyio.create_task_group() as task_group:
        for index in range(concurrency):
            task_group.start_soon(creator, count // concurrency + (index < count % concurrency))
    return ids


async def create_and_claim(path: Path, count: int) -> tuple[float, float]:
    """CPU ms per create (worker off), then per claim of one queued run."""
    async with SqliteTaskStore.open(path) as store:
        manager = TaskManager(store, runs=store)
        await _created(manager, 64)  # warm up
        started = time.process_time()
        await _created(manager, count)
        create = (time.process_time() - started) * 1000 / count
    async with SqliteTaskStore.open(path.with_suffix(".claims.db")) as store:
        manager = TaskManager(store, runs=store)
        spent = 0.0
        for _ in range(count):  # a short queue, as when runs are claimed as they come
            await submit(manager, noop)
            started = time.process_time()
            claimed = await manager.claim(
                worker="bench",
                workflows=frozenset({noop.name}),
                lease_for=timedelta(seconds=60),
                limit=1,
            )
            spent += time.process_time() - started
            if len(claimed) != 1:
                raise RuntimeError("the queued run was not claimed")
            await manager.cancel(claimed[0].task.id)  # not timed: no run or lease piles up
            await store.release_lease(claimed[0].lease)
        claim = spent * 1000 / count
    return create, claim


class CountingManager(TaskManager):
    """A manager that counts the worker's claim transactions (empty ones included) and
    the creates that claimed their run (eager starts)."""

    claims = 0
    eager = 0

    async def claim(self, **arguments: Any) -> Any:
        self.claims += 1
        return await super().claim(**arguments)

    async def _create_claimed(self, *arguments: Any) -> Any:
        self.eager += 1
        return await super()._create_claimed(*arguments)


async def whole_run(
    path: Path, count: int, sequential: bool, eager: bool = False
) -> tuple[float, float, float]:
    """CPU ms per run (created, claimed, run and finished by a worker), the worker's
    claim transactions per run, and the share of runs started eagerly."""
    async with SqliteTaskStore.open(path) as store:
        manager = CountingManager(store, runs=store)
        settings = WorkerSettings(max_runs=100, eager_start=eager)
        worker = Worker(manager, {noop.name: noop}, settings=settings)
        async with anyio.create_task_group() as task_group:
            await task_group.start(worker.run)
            for task_id in await _created(manager, 64):  # warm up
                await manager.wait_until_terminal(task_id)
            started, claims, eagerly = time.process_time(), manager.claims, manager.eager
            batches = [1] * count if sequential else [count]
            for size in batches:  # sequential: each run ends before the next is created
                for task_id in await _created(manager, size, min(size, CONCURRENCY)):
                    done = await manager.wait_until_terminal(task_id)
                    if done.state is not TaskState.COMPLETED:
                        raise RuntimeError(f"a run ended {done.state.value}")
            spent = (time.process_time() - started) * 1000 / count
            task_group.cancel_scope.cancel()
    return spent, (manager.claims - claims) / count, (manager.eager - eagerly) / count


def run(quick: bool, runs: int | None = None, rounds: int | None = None) -> list[Row]:
    count, rounds = (100, 1) if quick else (runs or RUNS, rounds or ROUNDS)
    found: dict[str, list[float]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as folder:
        for number in range(rounds):
            create, claim = anyio.run(create_and_claim, Path(folder) / f"c{number}.db", count)
            found["create"].append(create)
            found["claim"].append(claim)
            for mode in ("sequential", "concurrent"):
                for eager in (False, True):
                    key = f"{mode} eager" if eager else mode
                    path = Path(folder) / f"{key.replace(' ', '-')}{number}.db"
                    whole, claims, share = anyio.run(
                        whole_run, path, count, mode == "sequential", eager
                    )
                    found[f"whole {key}"].append(whole)
                    found[f"claims {key}"].append(claims)
                    found[f"eager {key}"].append(share)
    rows = [
        figures.row("CPU per run: create (durable, worker off)", found["create"], "ms"),
        figures.row("CPU per claim transaction of one queued run", found["claim"], "ms"),
    ]
    for mode, title in (("sequential", "one run at a time"), ("concurrent", "16 in flight")):
        wholes, per_run = found[f"whole {mode}"], found[f"claims {mode}"]
        saved = [claim * n for claim, n in zip(found["claim"], per_run, strict=True)]
        share = statistics.median(a / b for a, b in zip(saved, wholes, strict=True))
        rows.append(figures.row(f"CPU per run, whole: {title}", wholes, "ms"))
        rows.append(figures.row(f"claim transactions per run: {title}", per_run, ""))
        rows.append(figures.row(f"CPU per run in claims: {title}", saved, "ms"))
        rows[-1]["note"] = f"{share:.0%} of the whole run"
        on, claims_on = found[f"whole {mode} eager"], found[f"claims {mode} eager"]
        ratio = statistics.median(a / b for a, b in zip(on, wholes, strict=True))
        started = statistics.median(found[f"eager {mode} eager"])
        rows.append(figures.row(f"CPU per run, whole, eager start on: {title}", on, "ms"))
        rows[-1]["note"] = f"{ratio:.2f}x of eager start off; {started:.0%} started eagerly"
        rows.append(figures.row(f"claim transactions per run, eager on: {title}", claims_on, ""))
    load = Path("/proc/loadavg").read_text().split()[0]
    sizes = f"{count} runs x {rounds} rounds; load average {load} (1 min)"
    rows[-1]["note"] = "; ".join(filter(None, [rows[-1].get("note"), sizes]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, help=f"runs per measure (default {RUNS})")
    parser.add_argument("--rounds", type=int, help=f"rounds (default {ROUNDS})")
    args = parser.parse_args()
    from run import render

    print(render(run(args.quick, args.runs, args.rounds)))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
