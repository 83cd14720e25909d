"""A claim does not read the queue behind the runs it may choose (ADR 0067).

Counted as work, not time. SQLite: the virtual-machine steps of the claim's ranking query
(a progress handler called every 100 steps). PostgreSQL: the rows of ``tasks`` its plan
reads (index entries and rows, those its filters removed included), under ``EXPLAIN
ANALYZE`` of the statement prepared with ``force_generic_plan``, as the claim's
transaction plans it (ADR 0063; ``EXPLAIN`` of a statement sent with its values would
plan them as constants). Ranking every claimable run (before ADR 0067) read the whole
queue; reading each owner's first candidates per state does not, nor does it visit the
owners whose tasks have all ended (found in review: a first version did).
"""

import re
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


async def _queue(manager: TaskManager, count: int, owners: tuple[str | None, ...]) -> None:
    """*count* more queued runs of each of *owners* (their runs interleaved: each
    owner's first candidates are its oldest)."""

    async def make(share: int) -> None:
        for _ in range(share):
            for owner in owners:
                await manager.create("job", {}, workflow_version="1", owner=owner)

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
    assert len(rows) == 2  # the query still chooses
    return steps


async def test_a_sqlite_claim_takes_as_many_steps_behind_a_deep_queue(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    steps = []
    async with SqliteTaskStore.open(path) as store:
        manager = TaskManager(store, runs=store)
        for depth in (SHALLOW, DEEP):
            await _queue(manager, depth - (SHALLOW if depth == DEEP else 0), (None, "ann"))
            steps.append(_sqlite_steps(path, _ranking(SQLITE, manager)))
    shallow, deep = steps
    assert deep <= shallow * 1.5 + 5, f"{shallow} then {deep} hundred steps"


async def test_a_sqlite_claim_does_not_visit_owners_whose_tasks_ended(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    async with SqliteTaskStore.open(path) as store:
        manager = TaskManager(store, runs=store)
        await _queue(manager, 16, (None,))
        before = _sqlite_steps(path, _ranking(SQLITE, manager))
        with closing(sqlite3.connect(path)) as raw:  # 2,000 owners, each with a run that ended
            raw.execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)"
                " INSERT INTO tasks (id, owner, state, version, updated_at, body, name,"
                " created_us, workflow_version) SELECT 'done' || i, 'p' || i, 'completed',"
                " version, updated_at, body, name, created_us, workflow_version"
                " FROM n, (SELECT * FROM tasks LIMIT 1)"
            )
            raw.commit()
        after = _sqlite_steps(path, _ranking(SQLITE, manager))
    assert after <= before * 1.5 + 5, f"{before} then {after} hundred steps"


def _rows_read(plan: dict[str, Any]) -> Iterator[float]:
    """Rows and index entries each plan node read from ``tasks`` (kept or removed by
    its filter, times its loops)."""
    if plan.get("Relation Name") == "tasks" or str(plan.get("Index Name", "")).startswith("tasks_"):
        kept = plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)
        yield kept * plan.get("Actual Loops", 1)
    for child in plan.get("Plans", []):
        yield from _rows_read(child)


def _generic_rows(connection: psycopg.Connection[Any], statement: Statement) -> float:
    """What the statement's generic plan reads from ``tasks``: prepared (its named
    parameters numbered), explained while it runs, deallocated."""
    names: list[str] = []

    def numbered(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    assert isinstance(statement.parameters, dict)
    connection.execute("ANALYZE tasks")  # as autovacuum would (off on the test server)
    connection.execute("SET plan_cache_mode = force_generic_plan")
    connection.execute("PREPARE claim AS " + re.sub(r"%\((\w+)\)s", numbered, statement.text))
    values = [statement.parameters[name] for name in names]
    cursor = psycopg.ClientCursor(connection)
    marks = ", ".join(["%s"] * len(values))
    cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE claim({marks})", values)
    found = cursor.fetchone()
    connection.execute("DEALLOCATE claim")
    assert found is not None
    (report,) = found[0]
    assert report["Plan"]["Actual Rows"] == 2  # the query still chooses
    return sum(_rows_read(report["Plan"]))


def _insert(
    connection: psycopg.Connection[Any], owner: str, state: str, count: int, first: int
) -> None:
    """*count* more tasks like the one in the table, of *owner* (``%`` in it: numbered)
    in *state*."""
    connection.execute(
        "INSERT INTO tasks (id, name, owner, state, version, updated_at, body, created_at,"
        " workflow_version) SELECT 'x' || i, name, replace(%s, '%%', i::text), %s, version,"
        " updated_at, body, created_at, workflow_version"
        " FROM generate_series(%s::int, %s::int) i, (SELECT * FROM tasks LIMIT 1) t",
        (owner, state, first, first + count - 1),
    )


async def _postgres_rows(
    store: PostgresTaskStore, manager: TaskManager, fill: list[tuple[str, str, int]]
) -> float:
    """Rows of ``tasks`` the claim's generic plan reads once *fill* (owner, state,
    count) is inserted after the tasks there."""
    with psycopg.connect(postgres.TEST_URL, autocommit=True) as connection:
        connection.execute(
            "SELECT set_config('search_path', %s, false)", (store.settings.schema_name,)
        )
        first = 1
        for owner, state, count in fill:
            _insert(connection, owner, state, count, first)
            first += count
        return _generic_rows(connection, _ranking(POSTGRES, manager))


async def test_a_postgres_claim_reads_as_many_rows_behind_a_deep_queue() -> None:
    rows = []
    for depth in (SHALLOW, 20 * DEEP):
        async with postgres.fresh_store() as store:
            manager = TaskManager(store, runs=store)
            await manager.create("job", {}, workflow_version="1", owner="ann")
            rows.append(await _postgres_rows(store, manager, [("hog", "queued", depth)]))
    shallow, deep = rows
    assert deep <= shallow * 1.5 + 10, f"{shallow} then {deep} rows of tasks read"


async def test_a_postgres_claim_does_not_visit_owners_whose_tasks_ended() -> None:
    rows = []
    for ended in (0, 5000):
        async with postgres.fresh_store() as store:
            manager = TaskManager(store, runs=store)
            await manager.create("job", {}, workflow_version="1", owner="ann")
            await _queue(manager, 8, (None,))
            rows.append(await _postgres_rows(store, manager, [("p%", "completed", ended)]))
    before, after = rows
    assert after <= before * 1.5 + 10, f"{before} then {after} rows of tasks read"
