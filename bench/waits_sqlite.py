"""1,000 tasks waiting for answers hold no worker (issue 14, ADR 0021).

One process (SQLite, ``synchronous=FULL``): a ``TaskManager``, one ``Worker`` with its
default 100 run slots, 1,000 tasks whose one node asks a question. Measured once every
run is parked: the worker's runs held (slots), the leases in the database, the
process's resident set size (and its growth over the same process before the tasks),
and the end-to-end time of a plain task submitted while the 1,000 wait. Then every
question is answered and the runs finish.

Target: 0 worker slots and 0 leases held while 1,000 questions wait (before ADR 0021, a
worker held one slot per question and its 101st waiting task never started).
"""

import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import anyio
from pydantic import BaseModel

import figures
from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.manager import TaskManager
from taskloom.engine.submit import submit
from taskloom.engine.worker import Worker, WorkerSettings
from taskloom.persistence.sqlite import SqliteTaskStore

Row = figures.Row
WAITING: Final = 1_000


class Empty(BaseModel):
    pass


class Confirm(BaseModel):
    go: bool


asking = Workflow("bench-asking", version="1", input=Empty)
plain = Workflow("bench-plain", version="1", input=Empty)


@asking.node()
async def decide(ctx: NodeContext[Empty]) -> bool:
    return (await ctx.ask("Go?", Confirm)).go


@plain.node()
async def work(ctx: NodeContext[Empty]) -> int:
    return 1


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return float(line.split()[1]) / 1024
    return float("nan")


def _count(path: Path, sql: str) -> int:
    raw = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(raw.execute(sql).fetchone()[0])
    finally:
        raw.close()


async def _once(path: Path, waiting: int) -> dict[str, float]:
    before = _rss_mib()
    async with SqliteTaskStore.open(path) as store:
        manager = TaskManager(store)
        worker = Worker(
            manager,
            {asking.name: asking, plain.name: plain},
            settings=WorkerSettings(poll_s=0.2),
        )
        async with anyio.create_task_group() as task_group:
            await task_group.start(worker.run)
            started = time.perf_counter()
            tasks = [await submit(manager, asking) for _ in range(waiting)]

            async def all_parked() -> bool:
                sql = "SELECT count(*) FROM tasks WHERE parked = 1"
                return _count(path, sql) == waiting

            with anyio.fail_after(300):
                while not await all_parked():  # noqa: ASYNC110  # rows publish no event
                    await anyio.sleep(0.05)
            parked_s = time.perf_counter() - started
            figures_now: dict[str, Any] = {
                "slots": worker.active_runs,
                "leases": _count(path, "SELECT count(*) FROM leases"),
                "rss": _rss_mib(),
                "parked_s": parked_s,
            }
            started = time.perf_counter()
            with anyio.fail_after(60):
                await manager.wait_until_terminal((await submit(manager, plain)).id)
            figures_now["plain_ms"] = (time.perf_counter() - started) * 1000
            started = time.perf_counter()
            for task in tasks:
                await manager.provide_input(task.id, "decide#1", {"go": True})
            with anyio.fail_after(300):
                for task in tasks:
                    await manager.wait_until_terminal(task.id)
            figures_now["answered_s"] = time.perf_counter() - started
            task_group.cancel_scope.cancel()
    figures_now["growth"] = figures_now["rss"] - before
    return figures_now


def run(quick: bool) -> list[Row]:
    """The waiting benchmark; *quick* waits for 100 questions once."""
    waiting = 100 if quick else WAITING
    repeats = 1 if quick else 3
    with tempfile.TemporaryDirectory() as folder:
        samples = [anyio.run(_once, Path(folder) / f"waits{n}.db", waiting) for n in range(repeats)]

    def values(key: str) -> list[float]:
        return [sample[key] for sample in samples]

    label = f"{waiting:,} tasks waiting for answers"
    rows = [
        figures.row(f"{label}: worker slots held", values("slots"), "runs", "< 1"),
        figures.row(f"{label}: leases held", values("leases"), "rows", "< 1"),
        figures.row(f"{label}: process RSS", values("rss"), "MiB"),
        figures.row(f"{label}: RSS growth over the empty engine", values("growth"), "MiB"),
        figures.row(f"{label}: submit until all parked", values("parked_s"), "s"),
        figures.row(f"a plain task while {waiting:,} wait, end to end", values("plain_ms"), "ms"),
        figures.row(f"{waiting:,} answers until every run completed", values("answered_s"), "s"),
    ]
    rows[0]["note"] = "worker max_runs=100 (the default)"
    return rows
