"""Workflow runner benchmarks on the SQLite store (synchronous=FULL), in-process and
across a kill -9.

- checkpointed node completions per second on a 1,000-node fan-out (target >= 1,000/s);
- the runner's overhead per node over a plain function call;
- cancel latency: from the call of `cancel()` to the running node seeing the cancellation
  (target < 100 ms), and to a `repo_audit` batch hashing a huge file in its worker
  thread having stopped, thread and run ended (target < 100 ms);
- resume after kill -9 with 100 runs in flight: from the restarted process's start to
  every run having a new attempt running (target < 2 s).
"""

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel

import figures
from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.manager import TaskManager
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.worker import Worker, WorkerSettings
from taskloom.persistence.sqlite import SqliteTaskStore
from taskloom.workflows.repo_audit import repo_audit

Row = figures.Row
FAST = WorkerSettings(poll_s=0.05, progress_interval_s=0.1)


class Empty(BaseModel):
    """No input."""


def fan_out(width: int, name: str = "fan") -> Workflow[Empty]:
    """A root, *width* trivial leaves, and a sink that sums them."""
    flow = Workflow(name, version="1", input=Empty, max_concurrency=64)

    @flow.node(phase="seed")
    async def seed(ctx: NodeContext[Empty]) -> int:
        return 1

    leaves = []
    for index in range(width):

        async def leaf(ctx: NodeContext[Empty], index: int = index) -> int:
            return index

        leaves.append(flow.node(name=f"leaf_{index}", phase="spread", deps=[seed])(leaf))

    @flow.node(phase="sum", deps=leaves)
    async def total(ctx: NodeContext[Empty]) -> int:
        return sum(ctx.output(leaf) for leaf in leaves)

    return flow


async def _run_once(path: Path, flow: Workflow[Empty]) -> float:
    async with SqliteTaskStore.open(path) as store:
        manager = TaskManager(store)
        worker = Worker(manager, {flow.name: flow}, settings=FAST)
        async with anyio.create_task_group() as task_group:
            await task_group.start(worker.run)
            started = time.perf_counter()
            task = await submit(manager, flow)
            done = await manager.wait_until_terminal(task.id)
            elapsed = time.perf_counter() - started
            task_group.cancel_scope.cancel()
    assert done.state is TaskState.COMPLETED, done.error
    return elapsed


async def _plain_calls(flow: Workflow[Empty]) -> float:
    """The same node functions called directly, in order, with no engine at all."""
    started = time.perf_counter()
    for name in flow.order():
        function: Callable[[Any], Awaitable[Any]] = flow.nodes[name].function
        if name == "total":
            continue  # it reads outputs through a context
        await function(None)
    return time.perf_counter() - started


def node_throughput(quick: bool) -> list[Row]:
    """Node completions per second and per-node overhead on a fan-out."""
    width = 50 if quick else 1000
    repeats = 1 if quick else 5
    flow = fan_out(width)
    nodes = width + 2
    times: list[float] = []
    plain: list[float] = []
    with tempfile.TemporaryDirectory() as folder:
        for repeat in range(repeats):
            times.append(anyio.run(_run_once, Path(folder) / f"fan{repeat}.db", flow))
            plain.append(anyio.run(_plain_calls, flow))
    rates = [nodes / elapsed for elapsed in times]
    overhead_us = [(t - p) / nodes * 1e6 for t, p in zip(times, plain, strict=True)]
    return [
        figures.row(f"node completions/s, {width}-node fan-out", rates, "/s", ">= 1000"),
        figures.row("runner overhead per node (vs plain call)", overhead_us, "us", None),
    ]


async def _cancel_once(path: Path) -> float:
    flow = Workflow("stuck", version="1", input=Empty)
    entered = anyio.Event()
    stopped = anyio.Event()
    seen: list[float] = []

    @flow.node()
    async def block(ctx: NodeContext[Empty]) -> int:
        entered.set()
        try:
            await anyio.sleep_forever()
        finally:
            seen.append(time.perf_counter())
            stopped.set()
        return 0

    async with SqliteTaskStore.open(path) as store:
        manager = TaskManager(store)
        worker = Worker(manager, {flow.name: flow}, settings=FAST)
        async with anyio.create_task_group() as task_group:
            await task_group.start(worker.run)
            task = await submit(manager, flow)
            await entered.wait()
            cancelled_at = time.perf_counter()  # the node may see it before cancel() returns
            await manager.cancel(task.id)
            with anyio.fail_after(5):
                await stopped.wait()
            task_group.cancel_scope.cancel()
    return (seen[0] - cancelled_at) * 1000


async def _cancel_scan_once(folder: Path, n: int) -> float:
    """Cancel a repo_audit batch that is hashing a 64 GiB sparse file; milliseconds from
    cancel() returning to the run having ended (its worker thread stopped)."""
    tree = folder / f"tree{n}"
    tree.mkdir()
    (tree / "huge.bin").touch()
    os.truncate(tree / "huge.bin", 64 << 30)
    flow = repo_audit.configure({"allowed_roots": [str(tree)]})
    async with SqliteTaskStore.open(folder / f"s{n}.db") as store:
        manager = TaskManager(store)
        worker = Worker(manager, {flow.name: flow}, settings=FAST)
        async with anyio.create_task_group() as task_group:
            await task_group.start(worker.run)
            arguments = {"path": str(tree), "max_file_bytes": 1 << 40}
            task = await submit(manager, flow, {**arguments, "write_report": False})
            with anyio.fail_after(30):
                attempts = store.attempts  # rows with no event of their own: polled
                while not any(a.node == "analyse[0]" for a in await attempts(task.id)):  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            await anyio.sleep(0.3)  # well into the file
            await manager.cancel(task.id)
            cancelled_at = time.perf_counter()
            with anyio.fail_after(30):
                while worker.active_runs:  # noqa: ASYNC110  # measured to the millisecond
                    await anyio.sleep(0.001)
            ended = time.perf_counter()
            task_group.cancel_scope.cancel()
    return (ended - cancelled_at) * 1000


def cancel_latency(quick: bool) -> list[Row]:
    """From the call of cancel() to the node's cancel scope firing, and from cancel()
    returning to a scanning repo_audit's thread and run having ended, in milliseconds."""
    repeats = 3 if quick else 20
    with tempfile.TemporaryDirectory() as folder:
        latencies = [anyio.run(_cancel_once, Path(folder) / f"c{n}.db") for n in range(repeats)]
        scans = [anyio.run(_cancel_scan_once, Path(folder), n) for n in range(repeats)]
    return [
        figures.row("cancel reaches the running node", latencies, "ms", "< 100"),
        figures.row("cancel stops a repo_audit scan (thread ended)", scans, "ms", "< 100"),
    ]


_RESUME_SCRIPT = """
import sys, anyio
from pathlib import Path
sys.path.insert(0, {bench!r})
from taskloom.bootstrap import open_engine
from taskloom.config import TaskloomSettings
from taskloom.engine.registry import WorkflowRegistry
from taskloom.engine.worker import WorkerSettings
from taskloom.persistence.sqlite import SqliteSettings
from workflows_sqlite import blocking_flow

async def main():
    settings = TaskloomSettings(
        database=SqliteSettings(path=Path({db!r})),
        worker=WorkerSettings(poll_s=0.05, max_runs=200),
        workflow_modules=(), load_entry_points=False, run_sweeper=False,
        freeze_start_up=True,  # it stands for `taskloom worker`, which freezes
    )
    registry = WorkflowRegistry({{"block": blocking_flow()}})
    async with open_engine(settings, workflows=registry) as engine:
        if {submit}:
            from taskloom.engine.submit import submit
            for _ in range({runs}):
                await submit(engine.manager, registry["block"])
        print("READY", flush=True)
        await anyio.sleep_forever()

anyio.run(main)
"""


def blocking_flow() -> Workflow[Empty]:
    """One node that blocks forever (a run in flight)."""
    flow = Workflow("block", version="1", input=Empty)

    @flow.node()
    async def wait(ctx: NodeContext[Empty]) -> int:
        await anyio.sleep_forever()
        return 0

    return flow


def _started_attempts(path: Path, attempt: int) -> int:
    import sqlite3  # a plain read: the bench observes the file from outside

    try:
        with sqlite3.connect(path) as raw:
            found = raw.execute(
                "SELECT count(*) FROM node_attempts WHERE attempt = ?", (attempt,)
            ).fetchone()
    except sqlite3.OperationalError:  # not created or migrated yet
        return 0
    return int(found[0])


def _spawn(path: Path, runs: int, *, submit: bool) -> subprocess.Popen[bytes]:
    script = _RESUME_SCRIPT.format(
        bench=str(Path(__file__).parent), db=str(path), submit=submit, runs=runs
    )
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL)


def _wait_for(path: Path, attempt: int, count: int, within_s: float) -> float:
    deadline = time.perf_counter() + within_s
    while time.perf_counter() < deadline:
        if path.exists() and _started_attempts(path, attempt) >= count:
            return time.perf_counter()
        time.sleep(0.005)
    raise TimeoutError(
        f"only {_started_attempts(path, attempt)} of {count} runs at attempt {attempt}"
    )


def resume_after_kill(quick: bool) -> list[Row]:
    """Seconds from the restarted process's start until every run runs again."""
    runs = 10 if quick else 100
    repeats = 1 if quick else 3
    seconds: list[float] = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "resume.db"
            first = _spawn(path, runs, submit=True)
            try:
                _wait_for(path, 1, runs, within_s=60)
            finally:
                os.kill(first.pid, signal.SIGKILL)
                first.wait()
            restarted_at = time.perf_counter()
            second = _spawn(path, runs, submit=False)
            try:
                seconds.append(_wait_for(path, 2, runs, within_s=60) - restarted_at)
            finally:
                second.kill()
                second.wait()
    return [figures.row(f"resume after kill -9, {runs} runs in flight", seconds, "s", "< 2")]


def run(quick: bool) -> list[Row]:
    """Every workflow benchmark."""
    return node_throughput(quick) + cancel_latency(quick) + resume_after_kill(quick)


if __name__ == "__main__":
    for row in run(quick="--quick" in sys.argv):
        print(row)
