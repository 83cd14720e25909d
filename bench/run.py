"""Run the benchmarks and write their figures into docs/benchmarks.md.

    python bench/run.py            # every benchmark, figures written to the docs
    python bench/run.py --quick    # tiny sizes: proves the harness works, writes nothing
    python bench/run.py --only engine_sqlite

Each benchmark module in this folder has ``run(quick: bool) -> list[dict]``; each row has
the benchmark's name, median, min, max, unit, number of runs, target and verdict.
"""

import argparse
import importlib
import os
import platform
import sqlite3
import sys
import time
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
DOCS = BENCH.parent / "docs" / "benchmarks.md"
MODULES = (
    "engine_sqlite",
    "workflows_sqlite",
    "memory_sqlite",
    "mcp_stdio",
    "mcp_cpu",
    "mcp_ts",
    "postgres",
    "pg_scaleout",
    "waits_sqlite",
    "startup",
    "fanout_sqlite",
    "tokens_sqlite",
    "dashboard_sqlite",
    "claims_versions_sqlite",
    "claims_backlog",
    "cancel_sqlite",
    "pg_outage",
    "pg_wakeups",
    "pg_handback",
    "marking",
)
TITLES = {
    "engine_sqlite": "Durable task core (SQLite, synchronous=FULL, in-process)",
    "workflows_sqlite": "Workflow runner (SQLite, synchronous=FULL)",
    "memory_sqlite": "Memory of a `taskloom serve` process (SQLite)",
    "mcp_stdio": "MCP over stdio: taskloom, the in-memory floor and fastmcp-tasks",
    "mcp_cpu": "Server CPU per trivial task over MCP stdio: taskloom (SQLite) against the floor",
    "mcp_ts": "Issue 25's MCP figures with the TypeScript SDK's client: taskloom against the floor",
    "postgres": "taskloom on one PostgreSQL: worker processes, claim latency, MCP",
    "pg_scaleout": "PostgreSQL scale-out: I/O-bound nodes, 1, 2 and 4 worker processes",
    "waits_sqlite": "Durable waits: 1,000 tasks waiting for answers (SQLite)",
    "startup": "Start-up of the taskloom command (SQLite)",
    "fanout_sqlite": "Dynamic fan-out: a 10,000-item map against the static fan-out (SQLite)",
    "tokens_sqlite": "Telling a principal: static and stored tokens, and the quota at create",
    "dashboard_sqlite": "The dashboard's task list at 1,000,000 tasks (SQLite)",
    "claims_versions_sqlite": "Claims filtered by workflow version (SQLite)",
    "claims_backlog": "A claim of 2 runs among 1,000 to 100,000 queued (SQLite, PostgreSQL)",
    "cancel_sqlite": "A cancel from another process reaching the running nodes (SQLite)",
    "pg_outage": "Recovery after a PostgreSQL outage of 10 s and 40 s",
    "pg_wakeups": "PostgreSQL wake-ups: the database's CPU per run against the idle workers",
    "pg_handback": "A run handed back on PostgreSQL: a worker's stop to the run's next attempt",
    "marking": "The fleet's pass over unfinished runs: 1, 4 and 16 workers, 100,000 queued",
}


def main(argv: list[str] | None = None) -> int:
    """Run the chosen benchmarks; exit 1 if any raised."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="tiny sizes; write nothing")
    parser.add_argument("--only", choices=MODULES, action="append", help="run only these")
    parser.add_argument("--output", type=Path, default=DOCS, help="the Markdown file to update")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(BENCH))
    failed = False
    for name in args.only or MODULES:
        started = time.perf_counter()
        try:
            rows: list[dict[str, Any]] = importlib.import_module(name).run(args.quick)
        except Exception as error:  # noqa: BLE001  # report every broken benchmark, then fail
            print(f"{name}: FAILED: {type(error).__name__}: {error}", file=sys.stderr)
            failed = True
            continue
        table = render(rows)
        print(f"## {TITLES[name]} ({time.perf_counter() - started:.1f} s)\n\n{table}")
        if not args.quick:
            write_section(args.output, name, table)
    if args.quick and not failed:
        print("bench --quick: every benchmark ran (figures not recorded)")
    return 1 if failed else 0


def render(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of benchmark rows."""
    lines = [
        "| benchmark | median | min..max | runs | target | verdict | note |",
        "|---|---:|---:|---:|---|---|---|",
    ]
    for row in rows:
        verdict = {True: "met", False: "**missed**", None: ""}[row["passed"]]
        unit = row["unit"]
        lines.append(
            f"| {row['benchmark']} | {_number(row['median'])} {unit} "
            f"| {_number(row['min'])}..{_number(row['max'])} | {row['runs']} "
            f"| {row['target'] or ''} | {verdict} | {row.get('note', '')} |"
        )
    return "\n".join(lines)


def write_section(path: Path, name: str, table: str) -> None:
    """Replace the generated section of *name* in *path* (creating the file if needed)."""
    start, end = f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"
    text = path.read_text(encoding="utf-8") if path.exists() else _intro()
    body = f"{start}\n### {TITLES[name]}\n\n{_machine()}\n\n{table}\n{end}"
    if start in text and end in text:
        before, rest = text.split(start, 1)
        after = rest.split(end, 1)[1]
        text = before + body + after
    else:
        text = text.rstrip("\n") + "\n\n" + body + "\n"
    path.write_text(text, encoding="utf-8")


def _machine() -> str:
    return (
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {os.cpu_count()} cores, "
        f"{platform.machine()}, Python {platform.python_version()}, SQLite "
        f"{sqlite3.sqlite_version}, aiosqlite {version('aiosqlite')}, "
        f"pydantic {version('pydantic')}, anyio {version('anyio')}."
    )


def _intro() -> str:
    return (
        "# Benchmarks\n\n"
        "Measured by `make bench` (`python bench/run.py`), which rewrites the generated\n"
        "sections below. Each figure is the median of several runs in one process, with the\n"
        "spread; targets come from the issues. The machines are shared and noisy: compare\n"
        "figures measured in the same run (ratios), not across runs.\n"
    )


def _number(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


if __name__ == "__main__":
    sys.exit(main())
