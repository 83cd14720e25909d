"""Server CPU per trivial task over MCP stdio: taskloom on SQLite against the SDK floor.

The figure issue 25 defines. The same client (``mcp_client``: the Python SDK's
``ClientSession`` over stdio) drives each server as its own process; per task it sends
``tools/call`` of ``noop`` (16 in flight), lets the task run to its end, then sends one
``tasks/get`` (16 in flight again). The server's CPU is read from ``/proc`` (user +
system time of the server process, every thread it has or had, and every live process
descended from it) before and after, and divided by the number of tasks. The ends are
awaited by watching the server go idle, not by polling, so each task costs exactly one
read (a task not ended by then costs more reads, counted in the note).

Servers: ``taskloom serve`` (SQLite, ``synchronous=FULL``) and the floor
(``floor_server.py``, the smallest in-memory tasks server on the same SDK), on both
generations, interleaved round by round; each taskloom figure is paired with the floor's
of the same round. ``python bench/mcp_cpu.py --baseline SRC`` adds another checkout's
``src`` (put first on ``PYTHONPATH``) as a third server in every round, for before/after
ratios measured in one sitting.

Target (issue 25): taskloom's CPU per task at most 1.4x the floor's.
"""

import argparse
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

import anyio

import figures
import mcp_workload as work
from mcp_client import LEGACY, MODERN, ServerSpec, interleaved_rounds, serving
from mcp_stdio import BASELINE, FLOOR, TASKLOOM, baseline_spec, floor_spec, taskloom_spec

Row = figures.Row
CONCURRENCY: Final = 16
TARGET_RATIO: Final = 1.4


@dataclass(frozen=True)
class Sizes:
    rounds: int
    tasks: int
    warmup: int
    concurrency: int = CONCURRENCY


QUICK: Final = Sizes(1, 32, 16)
FULL: Final = Sizes(3, 960, 64)


async def measure(spec: ServerSpec, generation: str, sizes: Sizes, errlog: Path) -> work.CpuPerTask:
    async with serving(spec, generation, errlog) as client:
        await work.cpu_per_task(client, sizes.warmup, sizes.concurrency)  # imports, caches
        return await work.cpu_per_task(client, sizes.tasks, sizes.concurrency)


def run(
    quick: bool,
    baseline: Path | None = None,
    rounds: int | None = None,
    concurrency: int | None = None,
    tasks: int | None = None,
) -> list[Row]:
    """CPU per task of every server, both generations, interleaved rounds."""
    sizes = QUICK if quick else FULL
    sizes = replace(
        sizes,
        rounds=rounds or sizes.rounds,
        tasks=tasks or sizes.tasks,
        concurrency=concurrency or sizes.concurrency,
    )
    servers: dict[str, Callable[[Path], ServerSpec]] = {FLOOR: floor_spec, TASKLOOM: taskloom_spec}
    if baseline is not None:
        servers[BASELINE] = baseline_spec(baseline)
    loads: list[float] = []
    generations = (MODERN,) if quick else (MODERN, LEGACY)  # quick: the harness works
    found = interleaved_rounds(
        servers,
        generations,
        sizes.rounds,
        lambda spec, generation, log: anyio.run(measure, spec, generation, sizes, log),
        after_round=lambda: loads.append(_load()),
    )
    return _rows(servers, found, loads, generations, sizes.concurrency)


def _rows(
    servers: dict[str, Callable[[Path], ServerSpec]],
    found: dict[tuple[str, str], list[work.CpuPerTask]],
    loads: list[float],
    generations: tuple[str, ...],
    concurrency: int = CONCURRENCY,
) -> list[Row]:
    rows: list[Row] = []
    for generation in generations:
        floor = found[FLOOR, generation]
        for name in servers:
            mine = found[name, generation]
            row = figures.row(
                f"server CPU per task: {name} {generation}", [m.cpu_ms for m in mine], "ms"
            )
            extra = sum(m.extra_gets for m in mine)
            row["note"] = f"{mine[0].tasks} tasks x {len(mine)} rounds"
            if concurrency != CONCURRENCY:
                row["note"] += f", {concurrency} in flight"
            if extra:
                row["note"] += f"; {extra} tasks needed more than one tasks/get"
            if name != FLOOR:
                ratio = statistics.median(
                    m.cpu_ms / f.cpu_ms for m, f in zip(mine, floor, strict=True)
                )
                row["note"] += f"; {ratio:.2f}x the floor"
                if name == TASKLOOM:
                    row["target"] = f"<= {TARGET_RATIO}x the floor"
                    row["passed"] = ratio <= TARGET_RATIO
            if name == BASELINE:
                now = statistics.median(
                    m.cpu_ms / b.cpu_ms
                    for m, b in zip(found[TASKLOOM, generation], mine, strict=True)
                )
                row["note"] += f"; taskloom now uses {now:.2f}x this"
            rows.append(row)
    rows[-1]["note"] += f"; load average {min(loads):.1f} to {max(loads):.1f} (1 min)"
    return rows


def _load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--baseline", type=Path, help="another checkout's src folder")
    parser.add_argument("--rounds", type=int, help="rounds (default 3)")
    parser.add_argument("--concurrency", type=int, help=f"in flight (default {CONCURRENCY})")
    parser.add_argument("--tasks", type=int, help="tasks per server per round (default 960)")
    args = parser.parse_args()
    from run import render  # only when run as a script

    found = run(args.quick, args.baseline, args.rounds, args.concurrency, args.tasks)
    print(render(found))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
