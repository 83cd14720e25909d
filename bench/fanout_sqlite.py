"""Dynamic fan-out (``Workflow.map``, ADR 0024) against today's static fan-out, on SQLite
(``synchronous=FULL``), one worker in one process.

- a 10,000-item map: a root returns ``list(range(10_000))``, the map runs a trivial
  function per item (64 at a time), a sink sums the list; every item is a checkpointed
  node run (start and end committed) like any node;
- the same map with 1,000 items, and the fixed 1,000-node fan-out of
  ``workflows_sqlite`` (64 at a time), for a like-for-like comparison.

Each run is a fresh process (so its peak RSS, from ``wait4``, is the run's own) on a
fresh database; figures: wall time from submit to the task completed, node completions
per second (items plus the root and the sink), and the process's peak RSS.
Target: the 10,000-item map completes >= 1,000 nodes/s (the static fan-out's target).
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from pydantic import BaseModel

import figures
from taskloom.engine.dag import MapContext, NodeContext, Workflow
from taskloom.engine.manager import TaskManager
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.worker import Worker, WorkerSettings
from taskloom.persistence.sqlite import SqliteTaskStore
from workflows_sqlite import fan_out

Row = figures.Row
FAST = WorkerSettings(poll_s=0.05, progress_interval_s=0.1)


class Count(BaseModel):
    """How many items to map over."""

    items: int


def mapped() -> Workflow[Count]:
    """A root listing ``range(items)``, a map over it (64 at a time), and a sum."""
    flow = Workflow("bench-map", version="1", input=Count, max_concurrency=64)

    @flow.node(phase="list")
    async def seed(ctx: NodeContext[Count]) -> list[int]:
        return list(range(ctx.input.items))

    @flow.map(over=seed, phase="spread", concurrency=64)
    async def leaf(ctx: MapContext[Count, int]) -> int:
        return ctx.item

    @flow.node(phase="sum", deps=[leaf])
    async def total(ctx: NodeContext[Count]) -> int:
        values: list[int] = ctx.output(leaf)
        return sum(values)

    return flow


async def _run(path: Path, kind: str, width: int) -> float:
    flow: Workflow[BaseModel] = mapped() if kind == "map" else fan_out(width)  # type: ignore[assignment]
    arguments = {"items": width} if kind == "map" else {}
    async with SqliteTaskStore.open(path) as store:
        manager = TaskManager(store)
        worker = Worker(manager, {flow.name: flow}, settings=FAST)
        async with anyio.create_task_group() as task_group:
            await task_group.start(worker.run)
            started = time.perf_counter()
            task = await submit(manager, flow, arguments)
            done = await manager.wait_until_terminal(task.id)
            elapsed = time.perf_counter() - started
            task_group.cancel_scope.cancel()
    assert done.state is TaskState.COMPLETED, done.error
    if kind == "map":
        assert done.result == width * (width - 1) // 2, done.result
    return elapsed


def _child(kind: str, width: int, path: str) -> None:
    """In the measured process: one run, its wall time printed as JSON."""
    print(json.dumps({"elapsed": anyio.run(_run, Path(path), kind, width)}), flush=True)


def _measure(kind: str, width: int, folder: Path, n: int) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one run in a fresh process."""
    path = folder / f"{kind}{width}-{n}.db"
    process = subprocess.Popen(
        [sys.executable, __file__, "--child", kind, str(width), str(path)],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).parent,
    )
    assert process.stdout is not None
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{kind} {width}: the measured process exited {process.returncode}")
    return json.loads(output)["elapsed"], usage.ru_maxrss / 1024


def run(quick: bool) -> list[Row]:
    """The static fan-out and maps of 1,000 and 10,000 items, each run in its own process."""
    big, small = (200, 50) if quick else (10_000, 1_000)
    repeats = 1 if quick else 3
    cases = [("static", small), ("map", small), ("map", big)]
    times: dict[tuple[str, int], list[float]] = {case: [] for case in cases}
    peaks: dict[tuple[str, int], list[float]] = {case: [] for case in cases}
    with tempfile.TemporaryDirectory() as folder:
        for n in range(repeats):
            for kind, width in cases:
                elapsed, peak = _measure(kind, width, Path(folder), n)
                times[kind, width].append(elapsed)
                peaks[kind, width].append(peak)
    rows: list[Row] = []
    for kind, width in cases:
        label = f"{width:,}-node static fan-out" if kind == "static" else f"{width:,}-item map"
        nodes = width + 2
        target = ">= 1000" if (kind, width) == ("map", big) else None
        rates = [nodes / elapsed for elapsed in times[kind, width]]
        rows.append(figures.row(f"node completions/s, {label}", rates, "/s", target))
        rows.append(figures.row(f"wall time, {label}", times[kind, width], "s"))
        rows.append(figures.row(f"peak RSS of the process, {label}", peaks[kind, width], "MiB"))
    return rows


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        for row in run(quick="--quick" in sys.argv):
            print(row)
