"""MCP over stdio, side by side: taskloom, the in-memory floor, and fastmcp-tasks.

The same Python SDK client (``mcp_client``) and the same workload (``mcp_workload``: the
trivial task ``noop``, the sleeping task ``hold``) against:

- ``taskloom serve`` on a fresh SQLite database (``synchronous=FULL``), on 2025-11-25 and
  on 2026-07-28;
- the floor (``floor_server.py``): the smallest in-memory tasks server on the same SDK,
  in the same two generations; each taskloom figure is reported as a ratio to it;
- the peer, fastmcp 4.1.2 + fastmcp-tasks 4.1.2 (2026-07-28 only, which is all it
  speaks) on its default ``memory://`` backend, and on Redis when one answers on
  127.0.0.1:6379; only in the full run (it is installed into ``bench/.peers/venv``).

Measured: creations per second (sequential, and 16 requests in flight on the connection),
``tasks/get`` p50/p99, ``tools/call`` to ``completed``, ``tasks/cancel`` to ``cancelled``
(polling ``tasks/get`` back to back), a ``tasks/list`` page at 10,000 tasks (2025-11-25),
and whether a task survives SIGKILL of the server. Targets (issue 6): taskloom creates at
least 3x as fast as fastmcp-tasks in memory and at least 0.7x as fast as the floor; its
``tasks/get`` p50 is within 1.1x of the floor's (issue 25; issue 6 asked 1.2x).

``python bench/mcp_stdio.py --baseline SRC --no-peers --rounds N`` adds another
checkout's ``src`` as "taskloom before" on both generations in every round (before/after
in one sitting) and leaves the peer out.
"""

import argparse
import statistics
import sys
import tempfile
import uuid
from collections import defaultdict
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import anyio

import figures
import mcp_workload as work
import peers
from mcp_client import LEGACY, MODERN, BenchClient, ServerSpec, serving
from taskloom.engine.manager import TaskManager
from taskloom.persistence.sqlite import SqliteTaskStore

BENCH: Final = Path(__file__).resolve().parent
SRC: Final = BENCH.parent / "src"
"""This checkout's source, first on the servers' path: the venv's install may be another
checkout's (a git worktree shares the main checkout's venv)."""
Row = figures.Row
FLOOR, TASKLOOM = "floor", "taskloom"
QUEUE_ONLY = "taskloom, worker off"
BASELINE = "taskloom before"
PEER_MEMORY, PEER_REDIS = "fastmcp-tasks (memory)", "fastmcp-tasks (Redis)"


@dataclass(frozen=True)
class Sizes:
    rounds: int
    sequential: int
    concurrent: int
    gets: int
    completions: int
    cancels: int
    listed: int
    list_samples: int
    settle_s: float


QUICK: Final = Sizes(1, 20, 32, 20, 3, 2, 200, 5, 0.05)
FULL: Final = Sizes(3, 200, 480, 500, 30, 10, 10_000, 100, 0.3)
CONCURRENCY: Final = 16


@dataclass(frozen=True)
class Target:
    """One server in one generation; *spec* makes its command line for a state folder."""

    server: str
    generation: str
    spec: Callable[[Path], ServerSpec]
    runs_tasks: bool = True

    @property
    def label(self) -> str:
        return f"{self.server} {self.generation}"


def taskloom_spec(folder: Path) -> ServerSpec:
    command = [sys.executable, "-m", "taskloom", "serve", "--db", str(folder / "bench.db")]
    # No lingering worker: the kill -9 round's restart is what resumes the runs, and a
    # worker left behind would outlive the benchmark's temporary database.
    env = {"PYTHONPATH": f"{SRC}:{BENCH}", "TASKLOOM_LINGER": "0"}
    return ServerSpec(TASKLOOM, [*command, "--workflows", "flows"], env)


def baseline_spec(src: Path) -> Callable[[Path], ServerSpec]:
    """``taskloom serve`` from another checkout's *src* (first on ``PYTHONPATH``)."""

    def spec(folder: Path) -> ServerSpec:
        mine = taskloom_spec(folder)
        env = {**mine.env, "PYTHONPATH": f"{src}:{mine.env['PYTHONPATH']}"}
        return ServerSpec(BASELINE, mine.command, env)

    return spec


def queue_only_spec(folder: Path) -> ServerSpec:
    command = [sys.executable, str(BENCH / "queue_only_server.py"), str(folder / "bench.db")]
    return ServerSpec(QUEUE_ONLY, command, {"PYTHONPATH": f"{SRC}:{BENCH}"})


def floor_spec(folder: Path, prefill: int = 0) -> ServerSpec:
    env = {"FLOOR_PREFILL": str(prefill)}
    return ServerSpec(FLOOR, [sys.executable, str(BENCH / "floor_server.py")], env)


def peer_spec(python: Path, url: str) -> Callable[[Path], ServerSpec]:
    queue = f"taskloom-bench-{uuid.uuid4().hex[:12]}"  # never touches another user's queue

    def spec(folder: Path) -> ServerSpec:
        env = {"FASTMCP_DOCKET_URL": url, "FASTMCP_DOCKET_NAME": queue, "FASTMCP_ENV_FILE": ""}
        name = PEER_MEMORY if url.startswith("memory") else PEER_REDIS
        return ServerSpec(name, [str(python), str(BENCH / "peer_server.py")], env)

    return spec


def targets(
    quick: bool, baseline: Path | None = None, with_peers: bool = True
) -> tuple[list[Target], list[str]]:
    """Every server measured, and notes on those that could not be."""
    found = [
        Target(FLOOR, LEGACY, floor_spec),
        Target(TASKLOOM, LEGACY, taskloom_spec),
        Target(FLOOR, MODERN, floor_spec),
        Target(TASKLOOM, MODERN, taskloom_spec),
        Target(QUEUE_ONLY, MODERN, queue_only_spec, runs_tasks=False),
    ]
    if baseline is not None:
        found.insert(2, Target(BASELINE, LEGACY, baseline_spec(baseline)))
        found.append(Target(BASELINE, MODERN, baseline_spec(baseline)))
    notes: list[str] = []
    if quick or not with_peers:
        return found, notes
    python = peers.peer_python()
    found.append(Target(PEER_MEMORY, MODERN, peer_spec(python, "memory://")))
    if peers.redis_answers():
        found.append(Target(PEER_REDIS, MODERN, peer_spec(python, "redis://127.0.0.1:6379/0")))
    else:
        notes.append("no Redis answered on 127.0.0.1:6379: fastmcp-tasks measured in memory only")
    return found, notes


Samples = dict[str, dict[str, list[Any]]]  # target label -> measure -> one entry per round


async def measure_round(target: Target, sizes: Sizes, folder: Path, into: Samples) -> None:
    spec = target.spec(folder)
    async with serving(spec, target.generation, folder / "stderr.log") as client:
        seq, ids = await work.creations(client, sizes.sequential, 1)
        con, more = await work.creations(client, sizes.concurrent, CONCURRENCY)
        found = into[target.label]
        found["sequential"].append(seq)
        found["concurrent"].append(con)
        if not target.runs_tasks:  # the diagnostic: creations and reads only
            found["get"].append(await work.gets(client, ids + more, sizes.gets))
            return
        await work.drain(client, ids + more)  # reads are measured on a quiet server
        found["get"].append(await work.gets(client, ids + more, sizes.gets))
        found["completed"].append(await work.call_to_completed(client, sizes.completions))
        cancels = await work.cancel_to_cancelled(client, sizes.cancels, sizes.settle_s)
        found["cancelled"].append(cancels)


async def measure_kill(target: Target, sizes: Sizes, folder: Path) -> str:
    spec = target.spec(folder)

    def connect() -> AbstractAsyncContextManager[BenchClient]:
        return serving(spec, target.generation, folder / "stderr.log")

    return await work.survives_kill(connect, sizes.settle_s)


async def fill(path: Path, count: int) -> None:
    """*count* finished tasks, written through the engine's API (not over MCP)."""
    async with SqliteTaskStore.open(path) as store:
        manager = TaskManager(store)

        async def writer(share: int) -> None:
            for index in range(share):
                task = await manager.create("noop", {"index": index})
                await manager.cancel(task.id, reason="bench filler")

        async with anyio.create_task_group() as task_group:
            for index in range(32):
                task_group.start_soon(writer, count // 32 + (index < count % 32))


async def measure_lists(sizes: Sizes, folder: Path) -> dict[str, tuple[list[float], int]]:
    (folder / "list").mkdir()
    await fill(folder / "list" / "bench.db", sizes.listed)
    found: dict[str, tuple[list[float], int]] = {}
    specs = {
        TASKLOOM: taskloom_spec(folder / "list"),
        FLOOR: floor_spec(folder, prefill=sizes.listed),
    }
    for name, spec in specs.items():
        async with serving(spec, LEGACY, folder / "stderr.log") as client:
            found[name] = await work.list_pages(client, sizes.list_samples)
    return found


def run(
    quick: bool, baseline: Path | None = None, rounds: int | None = None, with_peers: bool = True
) -> list[Row]:
    """Every MCP benchmark; *quick* runs taskloom and the floor at tiny sizes only."""
    sizes = QUICK if quick else FULL
    if rounds is not None:
        sizes = replace(sizes, rounds=rounds)
    chosen, notes = targets(quick, baseline, with_peers)
    samples: Samples = defaultdict(lambda: defaultdict(list))
    kills: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        for number in range(sizes.rounds):  # interleaved: each round sees the same load
            for index, target in enumerate(chosen):
                state = base / f"r{number}t{index}"
                state.mkdir()
                anyio.run(measure_round, target, sizes, state, samples)
        for index, target in enumerate(chosen):
            wanted = target.generation == MODERN or (target.server == TASKLOOM and not quick)
            if wanted and target.runs_tasks and target.server != BASELINE:
                state = base / f"kill{index}"
                state.mkdir()
                kills[target.label] = anyio.run(measure_kill, target, sizes, state)
        lists = anyio.run(measure_lists, sizes, base)
        log = (base / "stderr.log").read_text() if (base / "stderr.log").exists() else ""
    if "Traceback" in log:
        raise RuntimeError(f"a server wrote a traceback:\n{log[-3000:]}")
    return rows(chosen, samples, kills, lists, notes)


def rows(
    chosen: list[Target],
    samples: Samples,
    kills: dict[str, str],
    lists: dict[str, tuple[list[float], int]],
    notes: list[str],
) -> list[Row]:
    """The table: one block per measure, the floor first, taskloom's ratios in the notes."""
    found = _creation_rows(chosen, samples) + _latency_rows(chosen, samples)
    for name, (values, size) in lists.items():
        found.append(figures.latency(f"tasks/list page of {size}: {name} {LEGACY}", values))
    _list_ratio(found, lists)
    for label, outcome in kills.items():
        survived = 1.0 if outcome.startswith("kept") else 0.0
        row = figures.row(f"survives kill -9: {label}", [survived], "")
        row["note"] = outcome
        found.append(row)
    if notes:
        found[-1]["note"] += "; " + "; ".join(notes)
    return found


def _creation_rows(chosen: list[Target], samples: Samples) -> list[Row]:
    found: list[Row] = []
    for measure, title in (
        ("sequential", "creations/s, sequential"),
        ("concurrent", f"creations/s, {CONCURRENCY} in flight"),
    ):
        for target in chosen:
            values = samples[target.label][measure]
            row = figures.row(f"{title}: {target.label}", values, "/s")
            if target.server in (TASKLOOM, BASELINE):
                _creation_target(row, target, samples)
            elif target.server == QUEUE_ONLY:
                floor = samples[f"{FLOOR} {target.generation}"][measure]
                ratio = _paired(values, floor, lambda v: v)
                row["note"] = f"diagnostic, tasks never run; {ratio:.2f}x the floor"
            found.append(row)
    return found


def _latency_rows(chosen: list[Target], samples: Samples) -> list[Row]:
    found: list[Row] = []
    for measure, title in (
        ("get", "tasks/get p50"),
        ("completed", "call to completed p50"),
        ("cancelled", "cancel to cancelled p50"),
    ):
        for target in chosen:
            mine = samples[target.label][measure]
            if not mine:
                continue  # not measured on this target
            row = figures.latency(
                f"{title}: {target.label}", [v for values in mine for v in values]
            )
            if target.server in (TASKLOOM, QUEUE_ONLY, BASELINE):
                ratio = _paired(mine, samples[f"{FLOOR} {target.generation}"][measure], figures.p50)
                row["note"] += f"; {ratio:.2f}x the floor"
                if measure == "get" and target.server == TASKLOOM:
                    row["target"], row["passed"] = "<= 1.1x the floor", ratio <= 1.1
            found.append(row)
    return found


def _creation_target(row: Row, target: Target, samples: Samples) -> None:
    measure = "sequential" if "sequential" in row["benchmark"] else "concurrent"
    mine = samples[target.label][measure]
    floor = _paired(mine, samples[f"{FLOOR} {target.generation}"][measure], lambda v: v)
    row["note"] = f"{floor:.2f}x the floor"
    row["target"] = ">= 0.7x the floor"
    passed = floor >= 0.7
    peer = samples.get(f"{PEER_MEMORY} {MODERN}", {}).get(measure)
    if peer and target.generation == MODERN:
        versus = _paired(mine, peer, lambda v: v)
        row["note"] += f"; {versus:.2f}x fastmcp-tasks (memory)"
        row["target"] += ", >= 3x fastmcp-tasks (memory)"
        passed = passed and versus >= 3.0
    row["passed"] = passed


def _list_ratio(found: list[Row], lists: dict[str, tuple[list[float], int]]) -> None:
    if TASKLOOM in lists and FLOOR in lists:
        ratio = figures.p50(lists[TASKLOOM][0]) / figures.p50(lists[FLOOR][0])
        for row in found:
            if row["benchmark"].endswith(f"{TASKLOOM} {LEGACY}") and "list" in row["benchmark"]:
                row["note"] += f"; {ratio:.2f}x the floor"


def _paired(mine: list[Any], theirs: list[Any], measure: Callable[[Any], float]) -> float:
    """The median over rounds of the ratio mine/theirs (each round saw the same load)."""
    return statistics.median(measure(a) / measure(b) for a, b in zip(mine, theirs, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--baseline", type=Path, help="another checkout's src folder")
    parser.add_argument("--rounds", type=int, help="rounds (default 3)")
    parser.add_argument("--no-peers", action="store_true", help="leave fastmcp-tasks out")
    args = parser.parse_args()
    from run import render  # only when run as a script

    found = run(args.quick, args.baseline, args.rounds, with_peers=not args.no_peers)
    print(render(found))


if __name__ == "__main__":
    main()
