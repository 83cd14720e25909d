"""PostgreSQL scale-out with I/O-bound nodes: 1, 2 and 4 worker processes on one database.

Each run of ``io_wait`` (``pg_flows.py``) is one node that awaits 20 ms of simulated I/O
(``anyio.sleep``: the node holds a run slot, not a core). Every worker process has the
same run slots (``WorkerSettings.max_runs``). For each worker count, on a fresh database:

1. the worker processes open the engine (without their worker) and say ``ready``;
2. the runs are submitted (16 submitters at once), so the queue is full before any
   worker claims;
3. the submitting engine is closed, every worker is told ``go`` and starts its worker;
   the clock runs from ``go`` to the last run's completion as its history row records
   it, the database being asked every 50 ms whether all have completed (that
   connection's backend is left out of PostgreSQL's CPU). (Until session
   26 the submitting process followed each task to its end through LISTEN/NOTIFY and a
   read of each: 0.5 to 0.8 ms of its CPU per run, on the cores the workers need.)

Beside each figure: the machine's CPU over the timed window (``/proc/stat``: the share
of all cores busy, whoever used them), the worker processes' own CPU per run
(``/proc/PID/stat``) and the PostgreSQL server's (every process named ``postgres`` on
this machine: its backends, WAL writer and checkpointer; whoever else uses the server
counts too, so measure on a machine where nothing else does). Worker counts are interleaved, round by round; each ratio is to one
worker in the same round. Targets (issue 25): 2 workers at least 1.9x one worker, 4 at
least 3.6x, over the whole window (from ``go`` to the last completion), and in the steady
state: the runs completed between the 10th and the 90th percentile of the completion
times, over the time between them, which leaves out the first and the last tenth of the
completions: each worker's start (its first claims) with a few cycles of ramp-up, and the
drain of the last runs (300 runs on 8 slots end with a half-full cycle), fixed costs
that weigh four times more in the 4-worker window.

    python bench/pg_scaleout.py                       # the full figures
    python bench/pg_scaleout.py worker URL SLOTS      # one worker process (internal)
"""

import os
import statistics
import subprocess
import sys
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Final, TypeVar

import anyio
import psycopg

import figures
import pg_flows
from postgres import SCHEMA, migrate, scratch_database, settings
from taskloom.bootstrap import open_engine
from taskloom.engine.submit import submit
from taskloom.engine.worker import Worker, WorkerSettings

Row = figures.Row
WAIT_S: Final = 120.0
POLL_S: Final = 0.05
SUBMITTERS: Final = 16
TARGETS: Final = {2: 1.9, 4: 3.6}
_Found = TypeVar("_Found")


@dataclass(frozen=True)
class Sizes:
    runs: int
    workers: tuple[int, ...]
    rounds: int
    slots: int


QUICK: Final = Sizes(10, (1, 2), 1, 2)
FULL: Final = Sizes(300, (1, 2, 4), 2, 2)


@dataclass(frozen=True)
class Window:
    """One timed window: runs/s, the machine's busy share, the workers' and the
    database server's CPU per run."""

    rate: float
    machine_busy: float
    steady_rate: float
    """Runs/s between the completions of the 10th and the 90th percentile: the window
    without its first and last tenth of completions (the start and ramp-up, the drain)."""
    worker_cpu_ms_per_run: float
    database_cpu_ms_per_run: float


def machine_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of every core since boot, from ``/proc/stat``."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def process_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def database_cpu_s() -> dict[str, float]:
    """The CPU (user + system) of each ``postgres`` process on this machine so far, by pid."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            head, tail = stat.read_text().rsplit(")", 1)
        except OSError:  # ended meanwhile
            continue
        if head.endswith("(postgres"):
            fields = tail.split()
            found[stat.parent.name] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return found


def database_cpu_used(before: dict[str, float], after: dict[str, float]) -> float:
    """The CPU the ``postgres`` processes used between two readings (a process that
    ended in between is not counted: keep the window's connections open through it)."""
    return sum(used - before.get(pid, 0.0) for pid, used in after.items())


@contextmanager
def workers(
    url: str, count: int, slots: int, *, script: Path = Path(__file__)
) -> Iterator[list[subprocess.Popen[str]]]:
    """*count* worker processes on *url* (``script worker URL SLOTS``; this bench's: engines
    open, workers not yet started), each having said ``ready``."""
    with ExitStack() as stack:
        started = []
        for _ in range(count):
            child = subprocess.Popen(
                [sys.executable, str(script), "worker", url, str(slots)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            stack.callback(_stop, child)
            started.append(child)
        for child in started:
            line = child.stdout.readline() if child.stdout else ""
            if line.strip() != "ready":
                raise RuntimeError(f"a worker process did not start (it said {line!r})")
        yield started


def _stop(child: subprocess.Popen[str]) -> None:
    child.terminate()
    try:
        child.wait(timeout=10)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


async def _measure(url: str, children: list[subprocess.Popen[str]], *, runs: int) -> Window:
    async with open_engine(settings(url, run_worker=False)) as engine:

        async def submitter(share: int) -> None:
            for _ in range(share):
                await submit(engine.manager, pg_flows.io_wait)

        async with anyio.create_task_group() as task_group:
            for index in range(SUBMITTERS):
                task_group.start_soon(submitter, runs // SUBMITTERS + (index < runs % SUBMITTERS))
    # The submitting engine is closed before the clock starts: following each task (its
    # notifications, a read of each) cost this process 0.5 to 0.8 ms of CPU a run on
    # the cores the workers need. The end is read from the database instead.
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as watcher:
        own = str(watcher.info.backend_pid)  # its polls are the harness's, not the runs'
        cpu_before = sum(process_cpu_s(child.pid) for child in children)
        database_before = database_cpu_s()
        busy_before, total_before = machine_ticks()
        started = datetime.now(UTC)
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        with anyio.fail_after(WAIT_S):
            ends = await _ends(watcher, runs)
            ended = ends[-1]
        busy_after, total_after = machine_ticks()
        database_after = database_cpu_s()
        cpu_after = sum(process_cpu_s(child.pid) for child in children)
    return Window(
        rate=runs / (ended - started).total_seconds(),
        steady_rate=steady_rate(ends),
        machine_busy=(busy_after - busy_before) / max(total_after - total_before, 1),
        worker_cpu_ms_per_run=(cpu_after - cpu_before) * 1000 / runs,
        database_cpu_ms_per_run=database_cpu_used(
            {pid: used for pid, used in database_before.items() if pid != own},
            {pid: used for pid, used in database_after.items() if pid != own},
        )
        * 1000
        / runs,
    )


async def _ends(watcher: psycopg.AsyncConnection[Any], runs: int) -> list[datetime]:
    """When each of *runs* runs completed (its history row), in order, once all have
    (asked every ``POLL_S``: the times come from the rows, so the poll's period does not
    count)."""
    await all_completed(watcher, runs, POLL_S)
    cursor = await watcher.execute(
        f"SELECT at FROM {SCHEMA}.task_history WHERE state = 'completed' ORDER BY at"
    )
    return [row[0] for row in await cursor.fetchall()]


def steady_rate(ends: Sequence[datetime]) -> float:
    """Completions per second between the 10th and the 90th percentile of *ends*."""
    first, last = len(ends) // 10, len(ends) - 1 - len(ends) // 10
    return (last - first) / max((ends[last] - ends[first]).total_seconds(), 1e-9)


async def all_completed(watcher: psycopg.AsyncConnection[Any], runs: int, poll_s: float) -> None:
    """Return once *runs* runs of the bench's schema have completed, asking every
    *poll_s* (one small query); raise on one that failed or was cancelled."""
    while True:
        cursor = await watcher.execute(
            f"SELECT count(*) FILTER (WHERE state = 'completed'),"
            f" count(*) FILTER (WHERE state IN ('failed', 'cancelled')) FROM {SCHEMA}.tasks"
        )
        completed, failed = await cursor.fetchone() or (0, 0)
        if failed:
            raise RuntimeError(f"{failed} run(s) did not complete")
        if completed >= runs:
            return
        await anyio.sleep(poll_s)


def by_worker_count(
    rounds: int,
    counts: Sequence[int],
    slots: int,
    measure: Callable[[str, list[subprocess.Popen[str]]], Awaitable[_Found]],
    *,
    script: Path = Path(__file__),
) -> dict[int, list[_Found]]:
    """What *measure* found with each count of worker processes (*script*'s) on a fresh,
    migrated database, *rounds* times, the counts interleaved so that each sees the same
    load; by count."""
    found: dict[int, list[_Found]] = defaultdict(list)
    for _ in range(rounds):
        for count in counts:
            with scratch_database() as url:
                anyio.run(migrate, url)
                with workers(url, count, slots, script=script) as children:
                    found[count].append(anyio.run(measure, url, children))
    return found


def run(quick: bool) -> list[Row]:
    """Runs (one I/O-bound node each) completed per second by 1, 2 and 4 workers."""
    sizes = QUICK if quick else FULL
    measure = partial(_measure, runs=sizes.runs)
    return _rows(sizes, by_worker_count(sizes.rounds, sizes.workers, sizes.slots, measure))


def _rows(sizes: Sizes, found: dict[int, list[Window]]) -> list[Row]:
    rows = []
    ideal = sizes.slots / pg_flows.IO_S
    for count, windows in found.items():
        row = figures.row(
            f"I/O-bound runs/s, {count} worker process(es) x {sizes.slots} slots",
            [window.rate for window in windows],
            "/s",
        )
        ratio = statistics.median(
            mine.rate / one.rate for mine, one in zip(windows, found[1], strict=True)
        )
        busy = statistics.median(window.machine_busy for window in windows)
        cpu = statistics.median(window.worker_cpu_ms_per_run for window in windows)
        database = statistics.median(window.database_cpu_ms_per_run for window in windows)
        row["note"] = (
            f"{ratio:.2f}x one worker; ideal {count * ideal:,.0f}/s; machine CPU {busy:.0%} "
            f"of {os.cpu_count()} cores; workers' CPU {cpu:.2f} ms per run; "
            f"PostgreSQL's {database:.2f} ms"
        )
        if count in TARGETS:
            row["target"] = f">= {TARGETS[count]}x one worker"
            row["passed"] = ratio >= TARGETS[count]
        rows.append(row)
    rows[-1]["note"] += f"; {sizes.runs} runs each, 20 ms of awaited I/O per node"
    for count in (count for count in TARGETS if count in found):
        ratios = [
            mine.steady_rate / one.steady_rate
            for mine, one in zip(found[count], found[1], strict=True)
        ]
        row = figures.row(
            f"steady state, {count} worker processes against 1 (runs/s between the 10th"
            " and 90th percentile of completions)",
            ratios,
            "x",
        )
        row["target"] = f">= {TARGETS[count]}x one worker"
        row["passed"] = statistics.median(ratios) >= TARGETS[count]
        row["note"] = "the window above less its first and last tenth of completions"
        rows.append(row)
    return rows


async def _work(url: str, slots: int) -> None:
    update = {"freeze_start_up": True, "worker_only": True}
    frozen = settings(url, run_worker=False).model_copy(update=update)
    async with open_engine(frozen) as engine:  # as `taskloom worker`: frozen, hears its work
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)  # "go"
        worker = Worker(
            engine.manager, dict(engine.workflows), settings=WorkerSettings(max_runs=slots)
        )
        async with anyio.create_task_group() as task_group:
            await task_group.start(worker.run)
            await anyio.sleep_forever()


if __name__ == "__main__":
    match sys.argv[1:]:
        case ["worker", url, slots]:
            anyio.run(_work, url, int(slots))
        case _:
            from run import render

            print(render(run(quick="--quick" in sys.argv)))
