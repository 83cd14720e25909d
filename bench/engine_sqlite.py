"""Durable task core benchmarks on the SQLite store (synchronous=FULL), in-process.

- durable creations per second: sequential (target >= 2,000/s) and 32 concurrent creators
  (target >= 4,000/s, which needs group commit), next to the fsync floor measured in the
  same run (plain sqlite3, one-row INSERT+COMMIT, WAL, synchronous=FULL);
- `get` latency p50/p99 at 10,000 tasks (target p50 < 0.3 ms);
- one `list` page of 50 at 10,000 and at 1,000,000 tasks (target: within 2x);
- database size per task;
- a create -> start -> progress -> complete round trip per second.
"""

import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

import figures
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task, TaskId
from taskloom.engine.states import TaskState
from taskloom.persistence.sqlite import SqliteTaskStore, rows

Row = figures.Row


def fsync_floor(path: Path, commits: int) -> float:
    """One-row durable commits per second with plain sqlite3 (the hardware floor)."""
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("PRAGMA journal_mode = WAL")
    raw.execute("PRAGMA synchronous = FULL")
    raw.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
    started = time.perf_counter()
    for index in range(commits):
        raw.execute("BEGIN IMMEDIATE")
        raw.execute("INSERT INTO t (body) VALUES (?)", (f"row {index}",))
        raw.execute("COMMIT")
    elapsed = time.perf_counter() - started
    raw.close()
    return commits / elapsed


async def creations(path: Path, count: int, concurrency: int) -> tuple[float, float]:
    """Creations per second, and the mean number of writes per committed batch."""
    async with SqliteTaskStore.open(path) as store:
        manager = TaskManager(store)
        batches_before = store.writer.batches
        per_creator = count // concurrency

        async def creator(worker: int) -> None:
            for index in range(per_creator):
                await manager.create("bench", {"worker": worker, "index": index})

        started = time.perf_counter()
        async with anyio.create_task_group() as task_group:
            for worker in range(concurrency):
                task_group.start_soon(creator, worker)
        elapsed = time.perf_counter() - started
        batches = store.writer.batches - batches_before
    total = per_creator * concurrency
    return total / elapsed, total / max(batches, 1)


def fill(path: Path, count: int) -> list[TaskId]:
    """*count* tasks written straight into the table in the store's own row format."""
    now = datetime.now(UTC)
    template = Task(
        id=TaskId("x" * 24),
        name="bench",
        arguments={"path": "src", "depth": 3},
        owner=None,
        state=TaskState.COMPLETED,
        status_message="completed 12 nodes in 3 phases",
        created_at=now,
        updated_at=now,
        ttl_ms=None,
        poll_interval_ms=1000,
        result={"files": 42, "lines": 12345},
        version=4,
    )
    ids: list[TaskId] = []
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("BEGIN")
    batch: list[rows.InsertRow] = []
    for index in range(count):
        task_id = TaskId(f"bench{index:019d}")
        owner = f"user{index % 10}"
        ids.append(task_id)
        batch.append(rows.insert_row(template.model_copy(update={"id": task_id, "owner": owner})))
        if len(batch) == 10_000:
            raw.executemany(rows.INSERT_SQL, batch)
            batch.clear()
    raw.executemany(rows.INSERT_SQL, batch)
    raw.execute("COMMIT")
    raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw.close()
    return ids


async def reads(path: Path, ids: list[TaskId], samples: int) -> dict[str, list[float]]:
    """Latencies in milliseconds of `get` and of list pages of 50."""
    found: dict[str, list[float]] = {"get": [], "list": [], "list owner": [], "list states": []}
    async with SqliteTaskStore.open(path) as store:
        manager = TaskManager(store)
        step = max(len(ids) // samples, 1)
        for task_id in ids[::step][:samples]:
            started = time.perf_counter()
            await manager.get(task_id)
            found["get"].append((time.perf_counter() - started) * 1000)
        page = await manager.list(limit=50)
        queries: dict[str, dict[str, Any]] = {
            "list": {"cursor": page.next_cursor},
            "list owner": {"owner": "user3"},
            "list states": {"states": [TaskState.COMPLETED]},
        }
        for _ in range(max(samples // 10, 5)):
            for key, query in queries.items():
                started = time.perf_counter()
                await manager.list(limit=50, **query)
                found[key].append((time.perf_counter() - started) * 1000)
    return found


async def round_trips(path: Path, count: int) -> float:
    """create -> start -> progress -> complete sequences per second."""
    async with SqliteTaskStore.open(path) as store:
        manager = TaskManager(store)
        started = time.perf_counter()
        for index in range(count):
            task = await manager.create("bench", {"index": index})
            await manager.start(task.id)
            await manager.report_progress(task.id, completed=1, total=2, message="half")
            await manager.complete(task.id, {"ok": True})
        return count / (time.perf_counter() - started)


def size_per_task(path: Path, count: int) -> float:
    """Bytes of database file per task, indexes included."""
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    pages = (
        raw.execute("PRAGMA page_count").fetchone()[0]
        * raw.execute("PRAGMA page_size").fetchone()[0]
    )
    raw.close()
    return float(pages) / count


def run(quick: bool) -> list[Row]:
    """Every core benchmark; *quick* only proves that the harness works."""
    repeats = 1 if quick else 5
    small, large = (500, 2_000) if quick else (10_000, 1_000_000)
    results: list[Row] = []
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        floor: list[float] = []
        sequential: list[float] = []
        for n in range(repeats):  # interleaved, so each pair saw the same machine load
            floor.append(fsync_floor(base / f"floor{n}.db", 200 if quick else 2_000))
            sequential.append(
                anyio.run(creations, base / f"seq{n}.db", 200 if quick else 3_000, 1)[0]
            )
        results.append(
            figures.row("fsync floor: one-row commits/s (sqlite3, FULL)", floor, "/s", None)
        )
        row = figures.row("durable creations/s, sequential", sequential, "/s", ">= 2000")
        ratios = [created / bare for created, bare in zip(sequential, floor, strict=True)]
        row["note"] = f"{statistics.median(ratios):.2f}x the floor (paired runs)"
        results.append(row)
        concurrent = [
            anyio.run(creations, base / f"con{n}.db", 640 if quick else 12_800, 32)
            for n in range(repeats)
        ]
        row = figures.row(
            "durable creations/s, 32 concurrent", [c[0] for c in concurrent], "/s", ">= 4000"
        )
        row["note"] = f"mean batch {statistics.median(c[1] for c in concurrent):.1f} writes/commit"
        results.append(row)
        trips = [
            anyio.run(round_trips, base / f"rt{n}.db", 100 if quick else 1_000)
            for n in range(repeats)
        ]
        results.append(figures.row("create+start+progress+complete/s", trips, "/s", None))

        small_db, large_db = base / "small.db", base / "large.db"
        for path in (small_db, large_db):
            anyio.run(_migrate, path)
        small_ids = fill(small_db, small)
        results.append(
            figures.row(
                f"database size per task at {small:,}", [size_per_task(small_db, small)], "B", None
            )
        )
        small_reads = anyio.run(reads, small_db, small_ids, 200 if quick else 5_000)
        large_ids = fill(large_db, large)
        large_reads = anyio.run(reads, large_db, large_ids, 200 if quick else 5_000)
    get = small_reads["get"]
    results.append(figures.latency(f"get at {small:,} tasks (p50)", get, "< 0.3", digits=3))
    for key in ("list", "list owner", "list states"):
        at_small = statistics.median(small_reads[key])
        at_large = statistics.median(large_reads[key])
        results.append(figures.row(f"{key} page of 50 at {small:,}", small_reads[key], "ms", None))
        ratio = at_large / at_small
        row = figures.row(f"{key} page of 50 at {large:,}", large_reads[key], "ms", None)
        row["target"] = "within 2x of the small store"
        row["passed"] = ratio <= 2.0
        row["note"] = f"{ratio:.2f}x"
        results.append(row)
    return results


async def _migrate(path: Path) -> None:
    async with SqliteTaskStore.open(path):
        pass


if __name__ == "__main__":
    for result in run(quick="--quick" in sys.argv):
        print(result)
