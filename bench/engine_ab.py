"""Engine throughput before and after, in one sitting (issue 25's third target).

The same three workloads run against two source trees, alternately, each run in a fresh
process: this checkout and another revision (``--base``, default ``main``), unpacked with
``git archive`` into a temporary folder and put first on ``PYTHONPATH`` (the workloads
and this harness are this checkout's, so both trees run the same code around the engine).

- the 1,000-node static fan-out of ``workflows_sqlite`` (64 at a time) on SQLite;
- the 10,000-item map of ``fanout_sqlite`` (64 at a time) on SQLite;
- 50 runs of the 20-node ``wide`` (``pg_flows``) on PostgreSQL with one worker process
  (``postgres.py``'s workers, a database of its own per run).

Figures: node completions per second, and the CPU each node costs: on SQLite the whole
process (its event loop and the writer's thread), on PostgreSQL the worker process and
the server's processes (every ``postgres`` process of the machine, so other users of the
server count too). The machine is shared: compare the two trees' figures round by round
(the ratios), with the load average beside them.

With ``--observers`` the SQLite workloads run with the observers ``taskloom serve --http``
has (spans, lifecycle logs at its default level, metrics and the dashboard's hub);
without it, with none: an engine no observer listens to reports no attempt (ADR 0051).
A full garbage collection runs before the measured part: the observers' imports would
otherwise leave one full pass (some 30 ms) to fall inside it.

    python bench/engine_ab.py [--base REV] [--rounds N] [--no-postgres | --no-sqlite]
        [--observers]
"""

import argparse
import gc
import glob
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from taskloom.engine.observe import Observer

BENCH: Final = Path(__file__).resolve().parent
ROOT: Final = BENCH.parent
HZ: Final = os.sysconf("SC_CLK_TCK")
CASES: Final = (("static", 1000), ("map", 10_000))
PG_RUNS: Final = 50


def _unpack(revision: str, into: Path) -> Path:
    """The tree of *revision* under *into*; its ``src`` folder."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", revision, "src"], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def _child(src: Path | None, *arguments: str) -> dict[str, float]:
    """Run this file with *arguments* in a fresh process on *src* (``None``: this tree's,
    named: the venv's install may be another checkout's, as in a git worktree)."""
    environment = dict(os.environ)
    path = src if src is not None else ROOT / "src"
    environment["PYTHONPATH"] = os.pathsep.join([str(path), str(BENCH)])
    done = subprocess.run(
        [sys.executable, str(Path(__file__)), "--child", *arguments],
        check=True,
        capture_output=True,
        text=True,
        cwd=BENCH,
        env=environment,
    )
    found: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def _sqlite_child(kind: str, width: int, observed: bool = False) -> dict[str, float]:
    import anyio

    import fanout_sqlite
    from fanout_sqlite import FAST, mapped
    from taskloom.engine.manager import TaskManager
    from taskloom.engine.states import TaskState
    from taskloom.engine.submit import submit
    from taskloom.engine.worker import Worker
    from taskloom.persistence.sqlite import SqliteTaskStore
    from workflows_sqlite import fan_out

    async def measure(path: Path) -> dict[str, float]:
        flow = mapped() if kind == "map" else fan_out(width)
        arguments = {"items": width} if kind == "map" else {}
        async with SqliteTaskStore.open(path) as store:
            manager = TaskManager(store, observer=_served_observer() if observed else None)
            worker = Worker(manager, {flow.name: flow}, settings=FAST)
            async with anyio.create_task_group() as task_group:
                await task_group.start(worker.run)
                gc.collect()  # what setting up left (imports, the flow) is not the nodes'
                cpu, started = time.process_time(), time.perf_counter()
                task = await submit(manager, flow, arguments)
                done = await manager.wait_until_terminal(task.id)
                elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
                task_group.cancel_scope.cancel()
        assert done.state is TaskState.COMPLETED, done.error
        nodes = width + 2
        return {"rate": nodes / elapsed, "cpu_us": 1e6 * cpu / nodes}

    assert fanout_sqlite  # the workloads are this checkout's
    with tempfile.TemporaryDirectory() as folder:
        return anyio.run(measure, Path(folder) / "ab.db")


def _served_observer() -> "Observer":
    """The observers of ``taskloom serve --http`` (``bootstrap.serve_http``); the root
    logger left at Python's default, WARNING, as ``configure_logging`` sets it."""
    from taskloom.engine.observe import Observers
    from taskloom.observability import standard_observer
    from taskloom.observability.metrics import Metrics
    from taskloom.server.dashboard.hub import ChangeHub

    return Observers([standard_observer(Metrics()), ChangeHub()])


def _cpu_s(pid: int | str) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def _server_cpu_s() -> float:
    total = 0.0
    for folder in glob.glob("/proc/[0-9]*"):
        try:
            with open(f"{folder}/comm") as comm:
                if comm.read().startswith("postgres"):
                    total += _cpu_s(folder.rsplit("/", 1)[1])
        except (OSError, IndexError, ValueError):
            continue  # ended meanwhile
    return total


def _postgres_child() -> dict[str, float]:
    import anyio

    import pg_flows
    import postgres

    nodes = PG_RUNS * len(pg_flows.wide.nodes)
    with postgres.scratch_database() as url:
        anyio.run(postgres.migrate, url)
        worker = subprocess.Popen(
            [sys.executable, str(BENCH / "postgres.py"), "worker", url],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            said = worker.stdout.readline().strip() if worker.stdout is not None else ""
            if said != "ready":
                raise RuntimeError(f"the worker did not start (it said {said!r})")
            own, server = _cpu_s(worker.pid), _server_cpu_s()
            elapsed = anyio.run(postgres._submit_all, url, PG_RUNS)
            own, server = _cpu_s(worker.pid) - own, _server_cpu_s() - server
        finally:
            worker.terminate()
            worker.wait(timeout=30)
    return {
        "rate": nodes / elapsed,
        "cpu_us": 1e6 * own / nodes,
        "server_cpu_us": 1e6 * server / nodes,
    }


def _table(results: dict[str, dict[str, list[dict[str, float]]]], loads: list[float]) -> str:
    lines = [
        "| workload | tree | node completions/s (median, min..max) | ratio | CPU per node |",
        "|---|---|---:|---:|---:|",
    ]
    for case, trees in results.items():
        base, new = trees["base"], trees["new"]
        ratios = [n["rate"] / b["rate"] for b, n in zip(base, new, strict=True)]
        for tree, runs in (("before", base), ("after", new)):
            rates = [run["rate"] for run in runs]
            cpu = statistics.median(run["cpu_us"] for run in runs)
            cpu_text = f"{cpu:,.0f} us"
            if "server_cpu_us" in runs[0]:
                server = statistics.median(run["server_cpu_us"] for run in runs)
                cpu_text += f" + server {server:,.0f} us"
            ratio = f"{statistics.median(ratios):.2f}x" if tree == "after" else ""
            lines.append(
                f"| {case} | {tree} | {statistics.median(rates):,.0f} /s "
                f"({min(rates):,.0f}..{max(rates):,.0f}) | {ratio} | {cpu_text} |"
            )
    lines.append(f"\nLoad average (1 min) at each round: {', '.join(f'{x:.1f}' for x in loads)}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="main")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--observers", action="store_true")
    options = parser.parse_args()
    cases = [] if options.no_sqlite else [f"{kind} {width}" for kind, width in CASES]
    if not options.no_postgres:
        cases.append("postgres")
    results: dict[str, dict[str, list[dict[str, float]]]] = {
        case: {"base": [], "new": []} for case in cases
    }
    loads = []
    with tempfile.TemporaryDirectory() as folder:
        base = _unpack(options.base, Path(folder))
        for _ in range(options.rounds):
            loads.append(os.getloadavg()[0])
            for case in cases:
                arguments = ("postgres",) if case == "postgres" else ("sqlite", *case.split())
                if options.observers and case != "postgres":
                    arguments += ("observed",)
                for tree, src in (("base", base), ("new", None)):
                    results[case][tree].append(_child(src, *arguments))
    names = {"static 1000": "1,000-node static fan-out (SQLite)"}
    names |= {"map 10000": "10,000-item map (SQLite)", "postgres": "PostgreSQL, one worker"}
    print(_table({names[case]: trees for case, trees in results.items()}, loads))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        match sys.argv[2:]:
            case ["sqlite", kind, width]:
                print(json.dumps(_sqlite_child(kind, int(width))))
            case ["sqlite", kind, width, "observed"]:
                print(json.dumps(_sqlite_child(kind, int(width), observed=True)))
            case ["postgres"]:
                print(json.dumps(_postgres_child()))
            case other:
                raise SystemExit(f"unknown child {other}")
    else:
        main()
