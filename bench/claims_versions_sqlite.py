"""What filtering claims by workflow version costs (issue 23, ADR 0039).

One SQLite file (``synchronous=FULL``) with 20,000 queued runs of one workflow version.
A claim of one run (``RunStore.claim_runs(limit=1)``) by name, as before versions were
filtered, alternates with one by (name, version) pairs, as every worker now claims;
each claim takes a run, so the queue stays about as long.

Target: a claim by versions costs less than 10 % more than a claim by name (ratio of
the medians, measured in one run).
"""

import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Final

import anyio

import figures
from taskloom.engine.manager import TaskManager, claim_start
from taskloom.persistence.sqlite import SqliteTaskStore

Row = figures.Row
QUEUED: Final = 20_000
CLAIMS: Final = 40

BY_NAME: Final = frozenset({"bench-job"})
BY_VERSION: Final = frozenset({("bench-job", "1"), ("bench-job", "2")})


async def _once(path: Path, queued: int, claims: int) -> dict[str, list[float]]:
    async with SqliteTaskStore.open(path) as store:
        manager = TaskManager(store, runs=store)
        async with anyio.create_task_group() as task_group:
            for _ in range(20):

                async def make() -> None:
                    for _ in range(queued // 20):
                        await manager.create("bench-job", {}, workflow_version="1")

                task_group.start_soon(make)
        times: dict[str, list[float]] = {"name": [], "version": []}
        for number in range(claims):
            for kind, workflows in (("name", BY_NAME), ("version", BY_VERSION)):
                now = manager.clock.now()
                started = time.perf_counter()
                claimed = await store.claim_runs(
                    worker=f"w{number}{kind}",
                    workflows=workflows,
                    now=now,
                    lease_for=timedelta(minutes=10),
                    limit=1,
                    start=claim_start(now),
                )
                times[kind].append((time.perf_counter() - started) * 1000)
                assert len(claimed) == 1
    return times


def run(quick: bool) -> list[Row]:
    """The claim benchmark; *quick* queues 1,000 runs and claims 5 times each way."""
    queued, claims = (1_000, 5) if quick else (QUEUED, CLAIMS)
    with tempfile.TemporaryDirectory() as folder:
        times = anyio.run(_once, Path(folder) / "claims.db", queued, claims)
    ratio = statistics.median(times["version"]) / statistics.median(times["name"])
    label = f"a claim of 1 run among {queued:,} queued"
    rows = [
        figures.row(f"{label}, by workflow name", times["name"], "ms"),
        figures.row(f"{label}, by (name, version)", times["version"], "ms"),
        figures.row("by version / by name (medians, one run)", [ratio], "x", "< 1.1"),
    ]
    rows[1]["note"] = "what every worker claims by since ADR 0039"
    return rows
