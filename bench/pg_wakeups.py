"""PostgreSQL wake-ups: what a new run costs the database in each idle worker.

``docs/postgresql.md`` models the database's CPU per second as ``R x (c_run + W x
c_wake)``: ``R`` runs per second, ``W`` worker processes with a free slot, ``c_wake`` what
a new run's NOTIFY costs the database in each of them (each reads the task and claims;
all claims but one find nothing). This bench measures ``c_run`` and ``c_wake``.

For each worker count ``W`` (interleaved, round by round), on a fresh database:

1. ``W`` worker processes start (``SLOTS`` run slots each) and say ``ready``;
2. warm-up: runs created as in 4, so that every pool has opened its connections and
   every backend has its caches and prepared statements (a backend's first statements
   and a connection's start-up cost several ms each: in the window, they were noise);
3. idle window: the PostgreSQL server's CPU per second with no run at all (the workers'
   polls, heartbeats and version records);
4. timed window: one process creates ``io_wait`` runs (``pg_flows.py``: one node that
   awaits 20 ms) ONE AT A TIME at a steady rate, far below what the workers can run, so
   every worker has a free slot when each run arrives; the window ends when the
   database says every run has completed (asked every 20 ms once the last is created).

Per window: the PostgreSQL server's CPU (every process named ``postgres`` on this
machine, as in ``pg_scaleout.py``: measure where nothing else uses the server; read to
the nanosecond from ``/proc/PID/schedstat``) per run,
the workers' CPU per run, and the claims and task reads per run as each worker counted
them (its manager's ``claim`` and ``get``). ``c_wake`` is the least-squares slope of the
server's CPU per run against ``W``, ``c_run`` its intercept (the create, the claim that
wins, the node's start and the run's end). The idle window says how much of the slope
the workers' own polls and heartbeats could be (an upper bound: while runs arrive every
50 ms, a worker's 1 s poll never comes due).

    python bench/pg_wakeups.py                        # the full figures
    python bench/pg_wakeups.py --split                # c_wake taken apart (see split)
    python bench/pg_wakeups.py worker URL SLOTS       # one worker process (internal)
"""

import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Final

import anyio
import psycopg

import figures
import pg_flows
from pg_scaleout import all_completed, by_worker_count, database_cpu_used, machine_ticks, workers
from postgres import migrate, scratch_database, settings
from taskloom.bootstrap import open_engine
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task
from taskloom.engine.runs import ClaimedRun
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.worker import Worker, WorkerSettings

Row = figures.Row
WAIT_S: Final = 60.0
POLL_S: Final = 0.02


@dataclass(frozen=True)
class Sizes:
    runs: int
    rate: float
    workers: tuple[int, ...]
    rounds: int
    slots: int
    warm_up: int
    settle_s: float
    idle_s: float


QUICK: Final = Sizes(10, 20.0, (1, 2), 1, 2, 5, 0.2, 0.5)
FULL: Final = Sizes(200, 20.0, (1, 2, 4, 8), 2, 2, 40, 1.0, 3.0)


@dataclass(frozen=True)
class Counts:
    """What one worker process did so far: claims, claims that took nothing, task reads."""

    claims: int
    empty: int
    reads: int

    def __sub__(self, other: "Counts") -> "Counts":
        return Counts(
            self.claims - other.claims, self.empty - other.empty, self.reads - other.reads
        )


@dataclass(frozen=True)
class Window:
    """One window of one worker count: per run, the server's and the workers' CPU (ms)
    and the workers' claims, empty claims and reads; the server's CPU per second with no
    run (ms); the creates' pace; the machine's busy share."""

    database_ms: float
    worker_ms: float
    claims: float
    empty: float
    reads: float
    idle_database_ms_per_s: float
    created_per_s: float
    machine_busy: float


def process_cpu_s(pid: int) -> float:
    """The CPU *pid* has used so far, to the nanosecond (``/proc/PID/schedstat``; the
    clock ticks of ``/proc/PID/stat`` are 10 ms, too coarse for a fraction of a ms per
    run summed over a dozen processes)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


def database_cpu_s() -> dict[str, float]:
    """The CPU of each ``postgres`` process on this machine so far, by pid."""
    found = {}
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == "postgres":
                found[comm.parent.name] = process_cpu_s(int(comm.parent.name))
        except OSError:  # ended meanwhile
            continue
    return found


def _counts(children: Sequence[Any]) -> Counts:
    """The sum of every worker process's counts (each asked on its stdin)."""
    total = Counts(0, 0, 0)
    for child in children:
        child.stdin.write("count\n")
        child.stdin.flush()
        claims, empty, reads = (int(field) for field in child.stdout.readline().split())
        total = Counts(total.claims + claims, total.empty + empty, total.reads + reads)
    return total


async def _measure(url: str, children: Sequence[Any], *, sizes: Sizes) -> Window:
    async with (
        open_engine(settings(url, run_worker=False)) as engine,
        await psycopg.AsyncConnection.connect(url, autocommit=True) as watcher,
    ):
        # Warm up first: every pool at its working size, every statement prepared.
        await _paced(engine.manager, watcher, sizes.warm_up, sizes.rate, sizes.warm_up)
        await anyio.sleep(sizes.settle_s)
        idle_before, idle_started = database_cpu_s(), time.perf_counter()
        await anyio.sleep(sizes.idle_s)
        idle = database_cpu_used(idle_before, database_cpu_s())
        idle_per_s = idle * 1000 / (time.perf_counter() - idle_started)

        counts_before = await anyio.to_thread.run_sync(_counts, children)
        cpu_before = sum(process_cpu_s(child.pid) for child in children)
        database_before = database_cpu_s()
        busy_before, total_before = machine_ticks()
        total = sizes.warm_up + sizes.runs
        created = await _paced(engine.manager, watcher, sizes.runs, sizes.rate, total)
        busy_after, total_after = machine_ticks()
        database_after = database_cpu_s()
        cpu_after = sum(process_cpu_s(child.pid) for child in children)
        done = await anyio.to_thread.run_sync(_counts, children) - counts_before
    runs = sizes.runs
    return Window(
        database_ms=database_cpu_used(database_before, database_after) * 1000 / runs,
        worker_ms=(cpu_after - cpu_before) * 1000 / runs,
        claims=done.claims / runs,
        empty=done.empty / runs,
        reads=done.reads / runs,
        idle_database_ms_per_s=idle_per_s,
        created_per_s=created,
        machine_busy=(busy_after - busy_before) / max(total_after - total_before, 1),
    )


async def _paced(
    manager: TaskManager, watcher: psycopg.AsyncConnection[Any], runs: int, rate: float, total: int
) -> float:
    """Create *runs* runs one at a time, *rate* a second, then wait until *total* runs of
    the database have completed: the pace the creates kept, runs a second."""
    started = time.perf_counter()
    for index in range(runs):
        await anyio.sleep(max(0.0, started + index / rate - time.perf_counter()))
        await submit(manager, pg_flows.io_wait)
    took = time.perf_counter() - started
    with anyio.fail_after(WAIT_S):
        await all_completed(watcher, total, POLL_S)
    return (runs - 1) / took if runs > 1 else rate


def run(quick: bool) -> list[Row]:
    """The server's CPU per run against the number of idle workers, and its fit."""
    sizes = QUICK if quick else FULL
    measure = partial(_measure, sizes=sizes)
    found = by_worker_count(
        sizes.rounds, sizes.workers, sizes.slots, measure, script=Path(__file__)
    )
    return _rows(sizes, found)


SPLIT: Final = {"workers": 2, "listeners": 0, "readers": -1}
"""The other processes of :func:`split`: their ``SLOTS`` (see :func:`_work`)."""


def split(quick: bool) -> list[Row]:
    """``c_wake`` taken apart: one worker alone, then with ``OTHERS`` other processes that
    only listen, that also read each new run, or that are workers too (and claim); per
    other process, what each adds to the server's CPU per run."""
    sizes, others = (QUICK, 1) if quick else (FULL, 6)
    found: dict[str, list[Window]] = defaultdict(list)
    script = Path(__file__)
    for _ in range(sizes.rounds):
        for kind in ("alone", *SPLIT):
            with scratch_database() as url:
                anyio.run(migrate, url)
                with ExitStack() as stack:
                    children = stack.enter_context(workers(url, 1, sizes.slots, script=script))
                    if kind != "alone":
                        children += stack.enter_context(
                            workers(url, others, SPLIT[kind], script=script)
                        )
                    found[kind].append(anyio.run(partial(_measure, sizes=sizes), url, children))
    alone = _median(found["alone"], "database_ms")
    rows = []
    for kind, windows in found.items():
        name = "one worker alone" if kind == "alone" else f"one worker and {others} {kind}"
        row = figures.row(f"PostgreSQL CPU per run, {name}", [w.database_ms for w in windows], "ms")
        each = (_median(windows, "database_ms") - alone) / others
        row["note"] = (
            f"{each:.3f} ms per other process; per run {_median(windows, 'claims'):.2f} claims,"
            f" {_median(windows, 'reads'):.2f} task reads; the processes' CPU"
            f" {_median(windows, 'worker_ms'):.2f} ms per run"
        )
        rows.append(row)
    return rows


def fit(points: Sequence[tuple[float, float]]) -> tuple[float, float, float]:
    """Least squares ``y = a + b x`` over *points*: ``(b, a, r2)``."""
    xs, ys = [x for x, _ in points], [y for _, y in points]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx
    intercept = mean_y - slope * mean_x
    residual = sum((y - intercept - slope * x) ** 2 for x, y in points)
    total = sum((y - mean_y) ** 2 for y in ys)
    return slope, intercept, 1 - residual / total if total else 1.0


def _median(windows: list[Window], field: str) -> float:
    return statistics.median(float(getattr(window, field)) for window in windows)


def _rows(sizes: Sizes, found: dict[int, list[Window]]) -> list[Row]:
    rows = []
    for count, windows in found.items():
        row = figures.row(
            f"PostgreSQL CPU per run, {count} idle worker(s) x {sizes.slots} slots",
            [window.database_ms for window in windows],
            "ms",
        )
        row["note"] = (
            f"workers' CPU {_median(windows, 'worker_ms'):.2f} ms per run; per run"
            f" {_median(windows, 'claims'):.2f} claims ({_median(windows, 'empty'):.2f} took"
            f" nothing), {_median(windows, 'reads'):.2f} task reads; no run (idle):"
            f" {_median(windows, 'idle_database_ms_per_s'):.2f} ms/s of PostgreSQL CPU;"
            f" created {_median(windows, 'created_per_s'):.1f}/s;"
            f" machine CPU {_median(windows, 'machine_busy'):.0%}"
        )
        rows.append(row)
    for field, whose in (("database_ms", "PostgreSQL's"), ("worker_ms", "the workers'")):
        rows += _fit_rows(sizes, found, field, whose)
    rows[-1]["note"] = (
        f"{sizes.runs} runs per window, created one at a time at {sizes.rate:.0f}/s (one node"
        f" awaiting {pg_flows.IO_S * 1000:.0f} ms); {sizes.rounds} round(s), W interleaved"
    )
    return rows


def _fit_rows(sizes: Sizes, found: dict[int, list[Window]], field: str, whose: str) -> list[Row]:
    """The slope (per idle worker) and intercept (W = 0) of *field* against W: the median
    and spread of each round's fit, and in the note the fit over every window."""
    rounds = [
        [(float(count), float(getattr(windows[index], field))) for count, windows in found.items()]
        for index in range(sizes.rounds)
    ]
    per_round = [fit(points) for points in rounds]
    slope, intercept, r2 = fit([point for points in rounds for point in points])
    residuals = ", ".join(
        f"W={count}: {_median(windows, field) - intercept - slope * count:+.3f}"
        for count, windows in found.items()
    )
    wake = figures.row(
        f"{'c_wake: ' if field == 'database_ms' else ''}{whose} CPU per run per idle worker"
        " (slope over W)",
        [one[0] for one in per_round],
        "ms",
    )
    wake["note"] = (
        f"one fit over all {sum(map(len, rounds))} windows: slope {slope:.3f} ms, intercept"
        f" {intercept:.3f} ms, R2 {r2:.3f}; medians minus that fit, ms: {residuals}"
    )
    base = figures.row(
        f"{'c_run: ' if field == 'database_ms' else ''}{whose} CPU per run at W = 0 (intercept)",
        [one[1] for one in per_round],
        "ms",
    )
    return [wake, base]


async def _work(url: str, slots: int) -> None:
    """A worker of *slots* slots; with 0, an engine that only listens (no worker); with
    -1, one that also reads each new run (as a worker with a free slot does), no claim."""
    update = {"freeze_start_up": True, "worker_only": True}
    frozen = settings(url, run_worker=False).model_copy(update=update)
    async with open_engine(frozen) as engine:  # as `taskloom worker`: frozen, hears its work
        tally = _tally(engine.manager)
        async with anyio.create_task_group() as task_group:
            if slots > 0:
                worker = Worker(
                    engine.manager, dict(engine.workflows), settings=WorkerSettings(max_runs=slots)
                )
                await task_group.start(worker.run)
            elif slots < 0:
                task_group.start_soon(_read_new_runs, engine.manager)
            print("ready", flush=True)
            while (await anyio.to_thread.run_sync(sys.stdin.readline)).strip() == "count":
                print(tally.claims, tally.empty, tally.reads, flush=True)
            task_group.cancel_scope.cancel()


async def _read_new_runs(manager: TaskManager) -> None:
    with manager.subscribe(wants=lambda task_id, state: state is TaskState.QUEUED) as changes:
        async for _ in changes:
            pass


@dataclass
class _Tally:
    claims: int = 0
    empty: int = 0
    reads: int = 0


def _tally(manager: TaskManager) -> _Tally:
    """Count *manager*'s claims (and those that took nothing) and task reads from now on."""
    tally = _Tally()
    claim, get = manager.claim, manager.get

    async def counted_claim(**arguments: Any) -> Sequence[ClaimedRun]:
        claimed = await claim(**arguments)
        tally.claims += 1
        tally.empty += not claimed
        return claimed

    async def counted_get(task_id: str, **arguments: Any) -> Task:
        tally.reads += 1
        return await get(task_id, **arguments)

    manager.claim = counted_claim  # type: ignore[method-assign]
    manager.get = counted_get  # type: ignore[method-assign]
    return tally


if __name__ == "__main__":
    match sys.argv[1:]:
        case ["worker", url, slots]:
            anyio.run(_work, url, int(slots))
        case ["--split", *_]:
            from run import render

            print(render(split(quick="--quick" in sys.argv)))
        case _:
            from run import render

            print(render(run(quick="--quick" in sys.argv)))
