"""Instructions per run of one PostgreSQL worker process of ``pg_scaleout``, before and
after (ADR 0074).

``pg_scaleout.py``'s rates and CPU per run follow the load of this shared machine (its
speed swings by a factor of two from one minute to the next); the instructions a worker
executes per run do not. For this checkout and another revision (``--base``, its ``src``
unpacked as ``engine_ab.py`` does), on a fresh database each: ``--runs`` runs of
``io_wait`` (one node awaiting 20 ms) are queued, then one worker process of
``pg_scaleout`` (``pg_scaleout.py worker URL SLOTS``: an engine opened as ``taskloom
worker`` opens it, frozen and hearing only its work) runs them under valgrind's
callgrind, its instrumentation switched on at ``go`` and off once every run has
completed (``callgrind_control``, as ``engine_callgrind.py``). The count includes the
event loop, psycopg and libpq; not PostgreSQL's.

Under callgrind the worker runs some 40 times slower than its 20 ms of I/O allows, so
its slots fall out of step: a claim takes one run and each final write goes alone, where
the timed bench claims two at a time and writes both ends together. The count is of
that pattern, the same for both trees; a change to the batches would show differently.

    python bench/pg_callgrind.py [--base REV] [--runs 300] [--slots 2]
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
import psycopg

import pg_flows
from engine_ab import BENCH, ROOT, _unpack
from pg_scaleout import all_completed
from postgres import migrate, scratch_database, settings
from taskloom.bootstrap import open_engine
from taskloom.engine.submit import submit

POLL_S = 0.1
WAIT_S = 1200.0


async def _queue(url: str, runs: int) -> None:
    async with open_engine(settings(url, run_worker=False)) as engine:
        for _ in range(runs):
            await submit(engine.manager, pg_flows.io_wait)


async def _completed(url: str, runs: int) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as watcher:
        with anyio.fail_after(WAIT_S):
            await all_completed(watcher, runs, POLL_S)


def instructions(src: Path | None, runs: int, slots: int) -> int:
    """Instructions of one worker process on *src* (``None``: this tree's) from its
    ``go`` to the completion of *runs* queued runs."""
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join([str(src or ROOT / "src"), str(BENCH)])
    with scratch_database() as url, tempfile.TemporaryDirectory() as folder:
        anyio.run(migrate, url)
        anyio.run(_queue, url, runs)
        out = Path(folder) / "callgrind.out"
        child = subprocess.Popen(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={out}",
                sys.executable,
                str(BENCH / "pg_scaleout.py"),
                "worker",
                url,
                str(slots),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=BENCH,
            env=environment,
        )
        try:  # a worker left behind would run under valgrind until killed
            assert child.stdin is not None
            assert child.stdout is not None
            said = child.stdout.readline()
            if said.strip() != "ready":
                raise RuntimeError(f"the worker did not start (it said {said!r})")
            callgrind = ["callgrind_control", "-i"]
            subprocess.run([*callgrind, "on", str(child.pid)], check=True, capture_output=True)
            child.stdin.write("go\n")
            child.stdin.flush()
            anyio.run(_completed, url, runs)
            subprocess.run([*callgrind, "off", str(child.pid)], check=True, capture_output=True)
            child.terminate()
            _, errors = child.communicate(timeout=300)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    found = re.search(r"Collected : ([\d,]+)", errors)
    if found is None:
        raise RuntimeError(f"callgrind failed: {errors[-2000:]}")
    return int(found[1].replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="main")
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--slots", type=int, default=2)
    options = parser.parse_args()
    print("| workload | before: instructions a run | after | ratio |")
    print("|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as folder:
        base = _unpack(options.base, Path(folder))
        before, after = (
            instructions(src, options.runs, options.slots) / options.runs for src in (base, None)
        )
    name = f"{options.runs:,} queued one-node runs (20 ms of I/O), one worker of {options.slots}"
    print(f"| {name} | {before:,.0f} | {after:,.0f} | {after / before:.2f}x |")


if __name__ == "__main__":
    main()
