"""A claim does not read the queue behind the runs it may choose (ADR 0067).

Counted as work, not time: SQLite's virtual-machine steps for the claim's ranking query
(a progress handler called every 100 steps), and PostgreSQL's rows read from ``tasks``
by the same query under ``EXPLAIN ANALYZE`` on its generic plan (as the claim's
transaction plans it, ADR 0063), with a short queue and with a queue ten times deeper. Ranking every claimable run (before ADR 0067) made both grow with the
queue, about tenfold here; reading each owner's first candidates keeps them level.
"""

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import psycopg

from taskloom.engine.manager import TaskManager, claim_start
from taskloom.engine.runs import ClaimTerms
from taskloom.persistence.postgres import PostgresTaskStore
from taskloom.persistence.sql import leases
from taskloom.persistence.sql.dialect import POSTGRES, SQLITE, Dialect
from taskloom.persistence.sql.script import Statement
from taskloom.persistence.sqlite import SqliteTaskStore
from tests import postgres

SHALLOW, DEEP = 100, 1000
"""Queued runs of the local user, then of one named owner ("ann"), at each depth."""


def _ranking(dialect: Dialect, manager: TaskManager) -> Statement:
    """The claim's first statement (its ranking query) as a worker would send it."""
    now = manager.clock.now()
    terms = ClaimTerms(
        worker="w",
        workflows=frozenset({("job", "1")}),
        now=now,
        lease_for=timedelta(minutes=1),
        limit=2,
        per_owner=1,
        start=claim_start(now),
    )
    first = next(leases.claim_runs(dialect, terms))
    assert isinstance(first, Statement)
    return first


async def _queue(manager: TaskManager, count: int) -> None:
    """*count* more queued runs of the local user and *count* of "ann" (the owners'
    runs interleaved: each owner's first candidates are its oldest)."""

    async def make(share: int) -> None:
        for _ in range(share):
            await manager.create("job", {}, workflow_version="1")
            await manager.create("job", {}, workflow_version="1", owner="ann")

    async with anyio.create_task_group() as task_group:
        for _ in range(8):
            task_group.start_soon(make, count // 8)


def _sqlite_steps(path: Path, statement: Statement) -> int:
    """Hundreds of SQLite VM steps the statement takes to its last row."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    with closing(sqlite3.connect(path)) as raw:
        raw.set_progress_handler(count, 100)
        rows = raw.execute(statement.text, dict(statement.parameters)).fetchall()
    assert len(rows) == 2  # one run of each owner: the query still chooses
    return steps


async def test_a_sqlite_claim_takes_as_many_steps_behind_a_deep_queue(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    steps = []
    async with SqliteTaskStore.open(path) as store:
        manager = TaskManager(store, runs=store)
        for depth in (SHALLOW, DEEP):
            await _queue(manager, depth - (SHALLOW if depth == DEEP else 0))
            steps.append(_sqlite_steps(path, _ranking(SQLITE, manager)))
    shallow, deep = steps
    assert deep <= shallow * 1.5 + 5, f"{shallow} then {deep} hundred steps"


def _rows_read(plan: dict[str, Any], relation: str = "tasks") -> Iterator[float]:
    """Rows each plan node read from *relation* (actual rows times loops, plus rows
    its filters removed)."""
    if plan.get("Relation Name") == relation:
        loops = plan.get("Actual Loops", 1)
        kept = plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)
        yield kept * loops
    for child in plan.get("Plans", []):
        yield from _rows_read(child, relation)


async def _postgres_rows(store: PostgresTaskStore, statement: Statement) -> float:
    schema = store.settings.schema_name
    async with await psycopg.AsyncConnection.connect(postgres.TEST_URL, autocommit=True) as c:
        await c.execute("SELECT set_config('search_path', %s, false)", (schema,))
        # as the claim's transaction plans it (ADR 0063): the generic plan
        await c.execute("SET plan_cache_mode = force_generic_plan")
        await c.execute(f"ANALYZE {schema}.tasks")
        cursor = await c.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + statement.text, statement.parameters
        )
        found = await cursor.fetchone()
    assert found is not None
    (report,) = found[0]
    assert report["Plan"]["Actual Rows"] == 2  # one run of each owner: the query chooses
    return sum(_rows_read(report["Plan"]))


async def test_a_postgres_claim_reads_as_many_rows_behind_a_deep_queue() -> None:
    rows = []
    async with postgres.fresh_store() as store:
        manager = TaskManager(store, runs=store)
        for depth in (SHALLOW, DEEP):
            await _queue(manager, depth - (SHALLOW if depth == DEEP else 0))
            rows.append(await _postgres_rows(store, _ranking(POSTGRES, manager)))
    shallow, deep = rows
    assert deep <= shallow * 1.5 + 10, f"{shallow} then {deep} rows of tasks read"
