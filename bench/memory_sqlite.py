"""Memory of a ``taskloom serve`` process (SQLite): resident set size, as the OS counts it.

The server runs as its own process over stdio (``taskloom serve --workflows flows``), on:

- an empty database (the floor: Python, the MCP SDK, the engine);
- a database holding 100,000 stored tasks (filled through the engine's API beforehand);
- the same, with 1,000 nodes running: ten ``wide`` tasks of 100 sleeping nodes each,
  created over MCP, measured once the database shows every node started.

Target (issue 6): under 150 MB at 100,000 stored tasks. The peak (``VmHWM``) is in the note.
"""

import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

import anyio

import figures
from flows import WIDTH
from mcp_client import MODERN, serving
from mcp_stdio import fill, taskloom_spec

Row = figures.Row
MIB: Final = 1024 * 1024


def resident(pid: int) -> tuple[float, float]:
    """Resident set size and its peak (MiB) of process *pid*."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return _kib(fields["VmRSS"]) / 1024, _kib(fields["VmHWM"]) / 1024


def _kib(value: str) -> float:
    return float(value.split()[0])


def _running_nodes(path: Path) -> int:
    raw = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(
            raw.execute("SELECT count(*) FROM node_runs WHERE state = 'running'").fetchone()[0]
        )
    finally:
        raw.close()


async def _until_running(path: Path, nodes: int, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while _running_nodes(path) < nodes:
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {nodes} nodes running after {within_s:g} s")
        await anyio.sleep(0.05)


async def measure(folder: Path, stored: int, runs: int, repeats: int) -> dict[str, list[float]]:
    """RSS and peak (MiB) per repeat: empty, with *stored* tasks, and with *runs* x WIDTH
    nodes running (each repeat on a fresh copy of the filled database)."""
    found: dict[str, list[float]] = {key: [] for key in ("empty", "stored", "running", "peak")}
    template = folder / "template.db"
    await fill(template, stored)  # closed: the WAL is folded into the file
    for repeat in range(repeats):
        empty = folder / f"empty-{repeat}"
        empty.mkdir()
        async with serving(taskloom_spec(empty), MODERN, folder / "empty.log") as client:
            await client.start("noop")
            found["empty"].append(resident(client.pid)[0])
        full = folder / f"full-{repeat}"
        full.mkdir()
        shutil.copyfile(template, full / "bench.db")
        async with serving(taskloom_spec(full), MODERN, folder / "full.log") as client:
            await client.start("noop")
            found["stored"].append(resident(client.pid)[0])
            for _ in range(runs):
                await client.start("wide", {"seconds": 600})
            await _until_running(full / "bench.db", runs * WIDTH, within_s=120)
            rss, peak = resident(client.pid)
            found["running"].append(rss)
            found["peak"].append(peak)
    return found


def run(quick: bool) -> list[Row]:
    """The three memory figures."""
    stored, runs, repeats = (2_000, 2, 1) if quick else (100_000, 10, 3)
    with tempfile.TemporaryDirectory() as folder:
        found = anyio.run(measure, Path(folder), stored, runs, repeats)
    running = figures.row(
        f"RSS: server holding {stored:,} stored tasks and {runs * WIDTH:,} running nodes",
        found["running"],
        "MiB",
        "< 150",
    )
    running["note"] = f"peak (VmHWM) up to {max(found['peak']):.1f} MiB"
    return [
        figures.row("RSS: server on an empty database", found["empty"], "MiB"),
        figures.row(f"RSS: server holding {stored:,} stored tasks", found["stored"], "MiB"),
        running,
    ]


if __name__ == "__main__":
    for row in run(quick="--quick" in sys.argv):
        print(row)
