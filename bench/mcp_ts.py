"""Issue 25's MCP figures with the TypeScript SDK's client: taskloom against the floor.

The issue measured with clients the team did not write. This benchmark drives each server
with the TypeScript MCP SDK's ``Client`` over stdio (``ts_client.cjs``, the SDK installed
by ``scripts/ensure-ts-host.sh`` into ``.ts-host/``), a client several times faster than
the Python SDK's: the server, not the client, sets the pace, so the floor's figures are
higher and taskloom's ratios to it lower than under ``mcp_stdio`` and ``mcp_cpu``.

Per server and generation, in one connection: 300 creates one at a time (the rate, and
the server's CPU per create with its run), 960 creates 16 in flight (the rate; then one
``tasks/get`` per task, 16 in flight, for the server's CPU per task: create, run and
read, from ``/proc``), and 500 ``tasks/get`` one at a time (p50). Servers: ``taskloom
serve`` (SQLite, ``synchronous=FULL``) and the floor (``floor_server.py``), interleaved
round by round on both generations; each ratio is the median over rounds of the ratio
within a round. ``--baseline SRC`` adds another checkout's ``src`` as a third server.

Targets (issue 25): creates at least 0.7x the floor one at a time and 16 in flight; CPU
per task at most 1.4x the floor's; ``tasks/get`` p50 at most 1.1x the floor's.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import figures
from mcp_client import LEGACY, MODERN, ServerSpec, interleaved_rounds
from mcp_stdio import BASELINE, FLOOR, TASKLOOM, baseline_spec, floor_spec, taskloom_spec

Row = figures.Row
BENCH: Final = Path(__file__).resolve().parent
SDK_DIR: Final = Path(os.environ.get("TS_HOST_DIR", BENCH.parent / ".ts-host"))
CLIENT: Final = BENCH / "ts_client.cjs"
IN_FLIGHT: Final = 16
RUN_LIMIT_S: Final = 600


@dataclass(frozen=True)
class Sizes:
    rounds: int
    sequential: int
    concurrent: int
    gets: int
    warmup: int


QUICK: Final = Sizes(1, 20, 32, 20, 5)
FULL: Final = Sizes(3, 300, 960, 500, 30)


@dataclass(frozen=True)
class Outcome:
    """One server's figures in one round."""

    sequential: float
    sequential_cpu_ms: float
    concurrent: float
    task_cpu_ms: float
    unended: int
    get_p50_ms: float


def missing() -> str | None:
    """Why the TypeScript client cannot run here, or ``None``."""
    if shutil.which("node") is None:
        return "no node on PATH"
    if not (SDK_DIR / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        return f"no TypeScript MCP SDK in {SDK_DIR} (scripts/ensure-ts-host.sh installs it)"
    return None


def measure(spec: ServerSpec, generation: str, sizes: Sizes, errlog: Path) -> Outcome:
    """Run the TypeScript client against *spec* once."""
    env = {
        **os.environ,
        "TS_HOST_DIR": str(SDK_DIR),
        "SERVER_COMMAND": json.dumps(list(spec.command)),
        "SERVER_ENV": json.dumps(spec.env),
        "GENERATION": generation,
        "SEQUENTIAL": str(sizes.sequential),
        "CONCURRENT": str(sizes.concurrent),
        "IN_FLIGHT": str(IN_FLIGHT),
        "GETS": str(sizes.gets),
        "WARMUP": str(sizes.warmup),
    }
    with errlog.open("a") as log:
        done = subprocess.run(
            ["node", str(CLIENT)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            timeout=RUN_LIMIT_S,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"the TypeScript client failed against {spec.label}: see {errlog}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return Outcome(
        sequential=found["sequential"],
        sequential_cpu_ms=found["sequentialCpuMs"],
        concurrent=found["concurrent"],
        task_cpu_ms=found["taskCpuMs"],
        unended=found["unended"],
        get_p50_ms=figures.p50(found["gets"]),
    )


def run(quick: bool, baseline: Path | None = None, rounds: int | None = None) -> list[Row]:
    """Every server on both generations, interleaved round by round."""
    why = missing()
    if why is not None:
        return [_skipped(why)]
    sizes = QUICK if quick else FULL
    sizes = replace(sizes, rounds=rounds or sizes.rounds)
    servers: dict[str, Callable[[Path], ServerSpec]] = {FLOOR: floor_spec, TASKLOOM: taskloom_spec}
    if baseline is not None:
        servers[BASELINE] = baseline_spec(baseline)
    generations = (MODERN,) if quick else (LEGACY, MODERN)
    found = interleaved_rounds(
        servers,
        generations,
        sizes.rounds,
        lambda spec, generation, log: measure(spec, generation, sizes, log),
    )
    return rows(servers, found, generations)


def rows(
    servers: dict[str, Callable[[Path], ServerSpec]],
    found: dict[tuple[str, str], list[Outcome]],
    generations: tuple[str, ...],
) -> list[Row]:
    """A row per figure, server and generation; taskloom's with the ratio and verdict."""
    measures: tuple[tuple[str, str, Callable[[Outcome], float], str, float], ...] = (
        ("creates one at a time", "/s", lambda o: o.sequential, ">=", 0.7),
        (
            "server CPU per create one at a time, with its run",
            "ms",
            lambda o: o.sequential_cpu_ms,
            "",
            0,
        ),
        (f"creates {IN_FLIGHT} in flight", "/s", lambda o: o.concurrent, ">=", 0.7),
        (
            "server CPU per task (create, run, one tasks/get)",
            "ms",
            lambda o: o.task_cpu_ms,
            "<=",
            1.4,
        ),
        ("tasks/get p50", "ms", lambda o: o.get_p50_ms, "<=", 1.1),
    )
    found_rows: list[Row] = []
    for generation in generations:
        floor = found[FLOOR, generation]
        for title, unit, value, sense, bound in measures:
            for name in servers:
                mine = found[name, generation]
                row = figures.row(f"{title}: {name} {generation}", [value(m) for m in mine], unit)
                row["note"] = f"{len(mine)} rounds"
                if name != FLOOR:
                    ratio = statistics.median(
                        value(m) / value(f) for m, f in zip(mine, floor, strict=True)
                    )
                    row["note"] += f"; {ratio:.2f}x the floor"
                    if name == TASKLOOM and sense:
                        row["target"] = f"{sense} {bound}x the floor"
                        row["passed"] = ratio >= bound if sense == ">=" else ratio <= bound
                if name == TASKLOOM and "CPU per task" in title:
                    unended = sum(m.unended for m in mine)
                    if unended:
                        row["note"] += f"; {unended} tasks had not ended when read"
                found_rows.append(row)
    return found_rows


def _skipped(why: str) -> Row:
    return {
        "benchmark": "TypeScript client against taskloom and the floor",
        "median": 0.0,
        "min": 0.0,
        "max": 0.0,
        "unit": "",
        "runs": 0,
        "target": None,
        "passed": None,
        "note": f"not measured: {why}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--baseline", type=Path, help="another checkout's src folder")
    parser.add_argument("--rounds", type=int, help="rounds (default 3)")
    args = parser.parse_args()
    from run import render  # only when run as a script

    print(render(run(args.quick, args.baseline, args.rounds)))


if __name__ == "__main__":
    sys.path.insert(0, str(BENCH))
    main()
