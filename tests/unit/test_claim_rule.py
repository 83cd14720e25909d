"""The claim rule is written once: its SQL rendering admits exactly the rows its Python
predicate admits (the in-memory store's), on every combination of what it looks at."""

import itertools
import sqlite3
from datetime import UTC, datetime, timedelta

from taskloom.engine.claims import ClaimRule
from taskloom.engine.models import Task, TaskId
from taskloom.engine.runs import Lease
from taskloom.engine.states import TaskState
from taskloom.persistence.claims import SQLITE, claimable
from taskloom.persistence.sqlite import rows

NOW = datetime(2026, 11, 26, 12, tzinfo=UTC)
HOUR = timedelta(hours=1)

STATES = (TaskState.QUEUED, TaskState.RUNNING, TaskState.INPUT_REQUIRED, TaskState.COMPLETED)
WORKFLOWS = (("vflow", "1"), ("vflow", "2"), ("vflow", None), ("other", "1"), ("gone", "1"))
LEASES = (None, "live", "expired", "reclaimed")
PARKED = (None, "woken", "sleeping", "unanswered")
TTLS = (None, 1, 48 * 3_600_000)


def _task(
    number: int,
    state: TaskState,
    workflow: tuple[str, str | None],
    ttl: int | None,
    parked: str | None,
) -> Task:
    name, version = workflow
    return Task(
        id=TaskId(f"t{number}"),
        name=name,
        arguments={},
        owner=None,
        state=state,
        created_at=NOW - HOUR,
        updated_at=NOW - HOUR,
        ttl_ms=ttl,
        workflow_version=version,
        parked=parked is not None,
        wake_at={"woken": NOW - HOUR, "sleeping": NOW + HOUR}.get(parked or ""),
        version=1,
    )


def _lease(task: Task, kind: str | None) -> Lease | None:
    if kind is None:
        return None
    return Lease(
        task_id=task.id,
        worker="dead" if kind == "reclaimed" else "other",
        token="t",
        expires_at=NOW - HOUR if kind == "expired" else NOW + HOUR,
    )


def test_sql_and_python_admit_the_same_runs() -> None:
    rules = (
        ClaimRule.of([("vflow", "1"), ("other", "1")], reclaim_from="dead"),
        ClaimRule.of(["vflow"]),
        ClaimRule.of([("vflow", "2"), "other"]),
    )
    cases = list(itertools.product(STATES, WORKFLOWS, LEASES, PARKED, TTLS))
    database = sqlite3.connect(":memory:")
    database.execute(
        "CREATE TABLE tasks (id TEXT, name TEXT, state TEXT, expires_at INTEGER,"
        " parked INTEGER, wake_at INTEGER, workflow_version TEXT, body TEXT)"
    )
    database.execute("CREATE TABLE leases (task_id TEXT, worker TEXT, expires_at INTEGER)")
    tasks = []
    for number, (state, workflow, lease_kind, parked, ttl) in enumerate(cases):
        task = _task(number, state, workflow, ttl, parked)
        lease = _lease(task, lease_kind)
        tasks.append((task, lease))
        expires = task.expires_at
        database.execute(
            "INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                task.id,
                task.name,
                task.state.value,
                rows.micros(expires) if expires is not None else None,
                int(task.parked),
                rows.micros(task.wake_at) if task.wake_at is not None else None,
                task.workflow_version,
                task.model_dump_json(),
            ),
        )
        if lease is not None:
            database.execute(
                "INSERT INTO leases VALUES (?, ?, ?)",
                (task.id, lease.worker, rows.micros(lease.expires_at)),
            )
    for rule in rules:
        condition, parameters = claimable(rule, SQLITE)
        found = {
            row[0]
            for row in database.execute(
                "SELECT t.id FROM tasks t LEFT JOIN leases l ON l.task_id = t.id"
                f" WHERE {condition}",
                {**parameters, "now": rows.micros(NOW)},
            )
        }
        expected = {task.id for task, lease in tasks if rule.admits(task, lease, NOW)}
        assert expected, rule  # the cases include claimable runs for every rule
        assert found == expected, rule


def test_a_pair_admits_its_version_and_runs_that_recorded_none() -> None:
    rule = ClaimRule.of([("vflow", "1")])
    assert rule.has_version("vflow", "1")
    assert rule.has_version("vflow", None)
    assert not rule.has_version("vflow", "2")
    assert not rule.has_version("other", "1")
    assert ClaimRule.of(["vflow", ("vflow", "1")]).has_version("vflow", "7")
    assert ClaimRule.of([]).is_empty
