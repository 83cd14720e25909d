"""Instructions per node of the engine's SQLite workloads, before and after (ADR 0054).

On this shared machine the rates and the CPU per node of ``engine_ab.py`` follow the load
average (a factor of two between load 1 and load 8), so a change of 5% cannot be seen in
them. valgrind's callgrind counts the instructions a process executes, which do not
depend on the load. Each workload runs under callgrind with its instrumentation off
until the store, the worker and the workflow are set up, on from the submit until the
task has completed (``callgrind_control`` switches it), in a fresh process, for this
checkout and for another revision (``--base``, unpacked as ``engine_ab.py`` does).

The workloads are ``engine_ab.py``'s, smaller (callgrind runs some 50 times slower): a
static fan-out of ``--width`` nodes and a map of ``--items`` items, 64 at a time, with no
progress writes (they follow the wall clock, which callgrind stretches). The count
includes the writer's thread, SQLite and the event loop; a batch's size still depends on
timing, so a tree repeats to within a few percent, not exactly.

``--runs N`` measures the cost per run instead (ADR 0056): the sequential eager case of
``eager_estimate.py``, N trivial one-node runs (``flows.noop``) created one at a time by
``submit`` with ``eager_start`` on, each awaited to its end before the next, after 64
unmeasured runs; instructions per run.

    python bench/engine_callgrind.py [--base REV] [--width 300] [--items 2000] [--observers]
    python bench/engine_callgrind.py [--base REV] --runs 300
"""

import argparse
import gc
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

from engine_ab import BENCH, ROOT, _served_observer, _unpack

POLL_S: Final = 0.1
WARM_RUNS: Final = 64


def _child(kind: str, width: int, gate: Path, observed: bool) -> None:
    """The workload, pausing for the driver before and after the measured part."""
    import anyio

    from fanout_sqlite import FAST, mapped
    from taskloom.engine.manager import TaskManager
    from taskloom.engine.states import TaskState
    from taskloom.engine.submit import submit
    from taskloom.engine.worker import Worker, WorkerSettings
    from taskloom.persistence.sqlite import SqliteTaskStore
    from workflows_sqlite import fan_out

    def wait_for(name: str) -> None:
        while not (gate / name).exists():
            time.sleep(POLL_S)

    async def one_at_a_time(path: Path) -> None:
        from flows import noop

        settings = WorkerSettings(max_runs=100, eager_start=True)  # as eager_estimate.py
        async with SqliteTaskStore.open(path) as store:
            manager = TaskManager(store, runs=store)
            worker = Worker(manager, {noop.name: noop}, settings=settings)
            async with anyio.create_task_group() as task_group:
                await task_group.start(worker.run)
                for _ in range(WARM_RUNS):
                    await manager.wait_until_terminal((await submit(manager, noop)).id)
                gc.collect()
                (gate / "ready").touch()
                wait_for("go")
                for _ in range(width):
                    done = await manager.wait_until_terminal((await submit(manager, noop)).id)
                    assert done.state is TaskState.COMPLETED, done.error
                (gate / "done").touch()
                wait_for("stop")
                task_group.cancel_scope.cancel()

    async def measure(path: Path) -> None:
        if kind == "runs":
            await one_at_a_time(path)
            return
        flow = mapped() if kind == "map" else fan_out(width)
        arguments = {"items": width} if kind == "map" else {}
        quiet = FAST.model_copy(update={"progress_interval_s": 1e6})
        async with SqliteTaskStore.open(path) as store:
            manager = TaskManager(store, observer=_served_observer() if observed else None)
            worker = Worker(manager, {flow.name: flow}, settings=quiet)
            async with anyio.create_task_group() as task_group:
                await task_group.start(worker.run)
                gc.collect()
                (gate / "ready").touch()
                wait_for("go")
                task = await submit(manager, flow, arguments)
                done = await manager.wait_until_terminal(task.id)
                (gate / "done").touch()
                wait_for("stop")
                task_group.cancel_scope.cancel()
        assert done.state is TaskState.COMPLETED, done.error

    with tempfile.TemporaryDirectory() as folder:
        anyio.run(measure, Path(folder) / "cg.db")


def _instructions(src: Path | None, kind: str, width: int, observed: bool) -> int:
    """Instructions of the measured part of one run on *src* (``None``: this tree)."""
    with tempfile.TemporaryDirectory() as folder:
        gate = Path(folder)
        environment = dict(os.environ)
        environment["PYTHONPATH"] = os.pathsep.join([str(src or ROOT / "src"), str(BENCH)])
        arguments = ["--child", kind, str(width), str(gate), *(["observed"] if observed else [])]
        child = subprocess.Popen(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={gate / 'callgrind.out'}",
                sys.executable,
                str(Path(__file__)),
                *arguments,
            ],
            stderr=subprocess.PIPE,
            text=True,
            cwd=BENCH,
            env=environment,
        )
        for step, switch in (("ready", "on"), ("done", "off")):
            while not (gate / step).exists():
                if child.poll() is not None:
                    raise RuntimeError(f"the child ended early: {child.returncode}")
                time.sleep(POLL_S)
            subprocess.run(
                ["callgrind_control", "-i", switch, str(child.pid)], check=True, capture_output=True
            )
            (gate / ("go" if switch == "on" else "stop")).touch()
        _, said = child.communicate(timeout=600)
    found = re.search(r"Collected : ([\d,]+)", said)
    if child.returncode != 0 or found is None:
        raise RuntimeError(f"callgrind failed: {said[-2000:]}")
    return int(found[1].replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="main")
    parser.add_argument("--width", type=int, default=300)
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--observers", action="store_true")
    parser.add_argument("--runs", type=int, help="instructions per run of N sequential runs")
    options = parser.parse_args()
    if options.runs:
        _per_run(options.base, options.runs)
        return
    print("| workload | before: instructions a node | after | ratio |")
    print("|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as folder:
        base = _unpack(options.base, Path(folder))
        for kind, width in (("static", options.width), ("map", options.items)):
            nodes = width + 2
            before, after = (
                _instructions(src, kind, width, options.observers) / nodes for src in (base, None)
            )
            name = f"{width:,}-node static fan-out" if kind == "static" else f"{width:,}-item map"
            print(f"| {name} | {before:,.0f} | {after:,.0f} | {after / before:.2f}x |")


def _per_run(base_revision: str, runs: int) -> None:
    """The table of instructions per trivial run created one at a time, eagerly."""
    print("| workload | before: instructions a run | after | ratio |")
    print("|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as folder:
        base = _unpack(base_revision, Path(folder))
        before, after = (_instructions(src, "runs", runs, False) / runs for src in (base, None))
    name = f"{runs:,} one-node runs, one at a time, eager start"
    print(f"| {name} | {before:,.0f} | {after:,.0f} | {after / before:.2f}x |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]), sys.argv[5:6] == ["observed"])
    else:
        main()
